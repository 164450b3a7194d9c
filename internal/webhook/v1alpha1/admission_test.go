package v1alpha1

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/devserve"
)

var objectCount atomic.Int32

// uniqueName gives cluster-scoped test objects distinct names.
func uniqueName(base string) string { return fmt.Sprintf("%s-%d", base, objectCount.Add(1)) }

// denial is who refused a request and why.
type denial struct {
	byWebhook string // the webhook's name, or "" for the API server's own validation (schema, CEL)
	message   string
	fields    []string
}

func denialOf(err error) denial {
	var status apierrors.APIStatus
	Expect(errors.As(err, &status)).To(BeTrue(), "not an API error: %v", err)
	s := status.Status()
	d := denial{message: s.Message}
	if m := regexp.MustCompile(`admission webhook "([^"]+)" denied the request`).FindStringSubmatch(s.Message); m != nil {
		d.byWebhook = m[1]
	}
	if s.Details != nil {
		for _, c := range s.Details.Causes {
			d.fields = append(d.fields, c.Field)
		}
	}
	return d
}

// expectDenied asserts who refused err, the field named and the message. A
// rejection the API server makes itself (CRD schema or CEL) happens before
// admission webhooks run; webhook is "" for those.
func expectDenied(err error, webhook, path, want string) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred(), "the request was admitted")
	d := denialOf(err)
	Expect(d.byWebhook).To(Equal(webhook), "refused by %q, want %q: %s", d.byWebhook, webhook, d.message)
	Expect(d.fields).To(ContainElement(path), "no cause names %s: %s", path, d.message)
	Expect(d.message).To(ContainSubstring(want))
}

// apiServerRejects names the class rejection cases the CRD's schema or CEL
// rules refuse before the webhook sees them; every other case of
// classRejections must be refused by the validating webhook.
var apiServerRejects = map[string]string{
	"one vCPU":                        "spec.resources.cpu",
	"65 vCPUs":                        "spec.resources.cpu",
	"2Gi of memory":                   "spec.resources.memory",
	"image without a source":          "spec.image",
	"image with source and sourceRef": "spec.image",
	"blank disk":                      "spec",
	"installer with a disk that is not blank":      "spec",
	"refresh of an image that is not a registry's": "spec.image",
	"a pull policy on a KubeVirt class":            "spec",
	"bootloader without a source":                  "spec.bootloader",
	"AppleSMC without the OSK":                     "spec.hardware.smc",
	"AppleSMC with an OSK reference without key":   "spec.hardware.smc.oskSecretRef.key",
	"unknown SMC mode":                             "spec.hardware.smc.mode",
	"shutdownGracePeriod of 0s":                    "spec.lifecycle.shutdownGracePeriod",
	"bootTimeout of 30s":                           "spec.lifecycle.bootTimeout",
	"heartbeatTimeout of 2h":                       "spec.lifecycle.heartbeatTimeout",
}

// poolAPIServerRejects, claimAPIServerRejects and machineAPIServerRejects
// are the same for the other kinds' rejection tables.
var (
	poolAPIServerRejects = map[string]string{
		"name over 52 characters":  "<nil>", // a rule on the whole object
		"no className":             "spec.className",
		"negative idle":            "spec.idle",
		"maxMachines below idle":   "spec",
		"negative maxProvisioning": "spec.maxProvisioning",
	}
	claimAPIServerRejects = map[string]string{
		"neither class nor pool": "spec",
		"too many keys":          "spec.sshAuthorizedKeys",
		"key too long":           "spec.sshAuthorizedKeys[0]",
	}
	machineAPIServerRejects = map[string]string{
		"name over 63 characters": "<nil>", // a rule on the whole object
		"no className":            "spec.className",
		"lower-case serial":       "spec.smbios.serialNumber",
		"short board serial":      "spec.smbios.boardSerial",
		"malformed UUID":          "spec.smbios.uuid",
	}
)

// entries makes one table entry per case name, in a stable order, for the
// cases keep selects.
func entries[T any](cases map[string]T, keep func(T) bool) []TableEntry {
	var names []string
	for name, tc := range cases {
		if keep == nil || keep(tc) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	out := make([]TableEntry, 0, len(names))
	for _, name := range names {
		out = append(out, Entry(name, name))
	}
	return out
}

// expectRefusal asserts a rejection case of a pure table through the API:
// refused by the API server itself when rejects names the case (with the
// path it names), else by webhook with the table's path and message.
func expectRefusal(err error, rejects map[string]string, name, webhook, path, want string) {
	GinkgoHelper()
	if apiPath, ok := rejects[name]; ok {
		expectDenied(err, "", apiPath, "")
		return
	}
	expectDenied(err, webhook, path, want)
}

var _ = Describe("Defaulting over TLS", func() {
	var class *macvirtv1alpha1.MacClass
	BeforeEach(func() {
		class = minimalClass()
		class.Name = uniqueName("defaults")
		Expect(k8sClient.Create(suiteCtx, class)).To(Succeed())
		cleanup(class)
		Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(class), class)).To(Succeed())
	})

	DescribeTable("a MacClass created with only its disks gets the API's default",
		func(get func(*macvirtv1alpha1.MacClassSpec) any, want any) {
			Expect(get(&class.Spec)).To(Equal(want))
		},
		Entry("resources.cpu", func(s *macvirtv1alpha1.MacClassSpec) any { return s.Resources.CPU }, int32(4)),
		Entry("resources.memory", func(s *macvirtv1alpha1.MacClassSpec) any { return s.Resources.Memory.String() }, "8Gi"),
		Entry("image.size", func(s *macvirtv1alpha1.MacClassSpec) any { return s.Image.Size.String() }, "128Gi"),
		Entry("bootloader.size", func(s *macvirtv1alpha1.MacClassSpec) any { return s.Bootloader.Size.String() }, "1Gi"),
		Entry("hardware.cpuModel", func(s *macvirtv1alpha1.MacClassSpec) any { return s.Hardware.CPUModel }, macvirtv1alpha1.CPUModelHaswellNoTSX),
		Entry("hardware.nicModel", func(s *macvirtv1alpha1.MacClassSpec) any { return s.Hardware.NICModel }, macvirtv1alpha1.NICModelVmxnet3),
		Entry("hardware.diskBus", func(s *macvirtv1alpha1.MacClassSpec) any { return s.Hardware.DiskBus }, macvirtv1alpha1.DiskBusSATA),
		Entry("hardware.smc.mode", func(s *macvirtv1alpha1.MacClassSpec) any { return s.Hardware.SMC.Mode }, macvirtv1alpha1.SMCModeVirtualSMC),
		Entry("hardware.smbios.productName", func(s *macvirtv1alpha1.MacClassSpec) any { return s.Hardware.SMBIOS.ProductName }, "iMacPro1,1"),
		Entry("hardware.display.model", func(s *macvirtv1alpha1.MacClassSpec) any { return s.Hardware.Display.Model }, macvirtv1alpha1.DisplayModelVGA),
		Entry("placement.nodeSelector", func(s *macvirtv1alpha1.MacClassSpec) any { return s.Placement.NodeSelector },
			map[string]string{"macvirt.io/apple-hardware": "true"}),
		Entry("placement.tolerations", func(s *macvirtv1alpha1.MacClassSpec) any { return s.Placement.Tolerations },
			[]corev1.Toleration{{Key: "macvirt.io/apple-hardware", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}),
		Entry("lifecycle.shutdownGracePeriod", func(s *macvirtv1alpha1.MacClassSpec) any { return s.Lifecycle.ShutdownGracePeriod.Duration }, 5*time.Minute),
		Entry("lifecycle.bootTimeout", func(s *macvirtv1alpha1.MacClassSpec) any { return s.Lifecycle.BootTimeout.Duration }, 20*time.Minute),
		Entry("lifecycle.heartbeatTimeout", func(s *macvirtv1alpha1.MacClassSpec) any { return s.Lifecycle.HeartbeatTimeout.Duration }, 2*time.Minute),
		Entry("lifecycle.drainGracePeriod", func(s *macvirtv1alpha1.MacClassSpec) any { return s.Lifecycle.DrainGracePeriod.Duration }, time.Hour),
		Entry("tenancy.allowedNamespaces", func(s *macvirtv1alpha1.MacClassSpec) any { return s.Tenancy.AllowedNamespaces }, &metav1.LabelSelector{}),
		Entry("tenancy.onDemand", func(s *macvirtv1alpha1.MacClassSpec) any { return *s.Tenancy.OnDemand }, true),
	)

	It("gives a class moved to macOS 26 Tahoe's hardware in place of what it defaulted before", func() {
		class.Spec.MacOS = &macvirtv1alpha1.MacOSSpec{Release: macvirtv1alpha1.MacOSTahoe}
		Expect(k8sClient.Update(suiteCtx, class)).To(Succeed())
		Expect(class.Spec.Hardware.SMBIOS.ProductName).To(Equal("MacPro7,1"))
		Expect(class.Spec.Hardware.NICModel).To(Equal(macvirtv1alpha1.NICModelVirtio))
	})

	It("agrees with DefaultMacClass, so the schema and the webhook give the same object", func() {
		want := minimalClass()
		DefaultMacClass(want)
		got := class.Spec.DeepCopy()
		Expect(got.Resources.Memory.Cmp(*want.Spec.Resources.Memory)).To(BeZero())
		got.Resources.Memory = want.Spec.Resources.Memory
		got.Image.Size, got.Bootloader.Size = want.Spec.Image.Size, want.Spec.Bootloader.Size
		Expect(*got).To(Equal(want.Spec))
	})

	DescribeTable("MacPool defaults",
		func(idle *int32, wantNS string, wantIdle, wantEffectiveMax, wantProvisioning int32) {
			p := minimalPool()
			p.Name, p.Spec.Idle = uniqueName("pool"), idle
			Expect(k8sClient.Create(suiteCtx, p)).To(Succeed())
			cleanup(p)
			Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			Expect(p.Spec.Namespace).To(Equal(wantNS))
			Expect(*p.Spec.Idle).To(Equal(wantIdle))
			Expect(p.Spec.MaxMachines).To(BeNil(), "maxMachines stays unset, so the cap can follow idle")
			Expect(p.Spec.EffectiveMaxMachines()).To(Equal(wantEffectiveMax))
			Expect(p.Spec.MaxProvisioning).To(Equal(wantProvisioning))
		},
		Entry("nothing set", nil, "macvirt-pools", int32(1), int32(2), int32(2)),
		Entry("idle set: the cap follows it", i32(6), "macvirt-pools", int32(6), int32(12), int32(2)),
	)

	It("admits a later raise of idle on a pool created without maxMachines", func() {
		p := minimalPool()
		p.Name, p.Spec.Idle = uniqueName("pool"), i32(2)
		Expect(k8sClient.Create(suiteCtx, p)).To(Succeed())
		cleanup(p)
		Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		p.Spec.Idle = i32(5)
		Expect(k8sClient.Update(suiteCtx, p)).To(Succeed(), "no maxMachines was frozen into spec at create")
		Expect(p.Spec.MaxMachines).To(BeNil())
	})

	It("defaults a MacClaim's reclaimPolicy to Delete", func() {
		c := minimalClaim()
		c.Namespace = newNamespace(nil)
		Expect(k8sClient.Create(suiteCtx, c)).To(Succeed())
		Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(c), c)).To(Succeed())
		Expect(c.Spec.ReclaimPolicy).To(Equal(macvirtv1alpha1.ReclaimDelete))
	})

	It("gives each MacMachine a unique SMBIOS identity in Apple's formats for its class's product, once", func() {
		mac := minimalClass()
		mac.Name = uniqueName("macpro")
		mac.Spec.Hardware.SMBIOS.ProductName = "MacPro7,1"
		Expect(k8sClient.Create(suiteCtx, mac)).To(Succeed())
		cleanup(mac)
		ns := newNamespace(nil)
		serials := map[string]bool{}
		for i := range 3 {
			m := minimalMachine()
			m.Namespace, m.Name, m.Spec.ClassName = ns, fmt.Sprintf("m-%d", i), mac.Name
			Expect(k8sClient.Create(suiteCtx, m)).To(Succeed())
			Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(m), m)).To(Succeed())
			Expect(m.Spec.Running).To(HaveValue(BeTrue()))
			id := m.Spec.SMBIOS
			Expect(id).NotTo(BeNil())
			Expect(id.SerialNumber).To(MatchRegexp(`^[A-Z0-9]{8}P7QM$`), "MacPro7,1's model code ends the serial")
			Expect(id.BoardSerial).To(MatchRegexp(`^[A-Z0-9]{17}$`))
			Expect(id.UUID).To(MatchRegexp(`^[0-9A-F]{8}-[0-9A-F]{4}-4[0-9A-F]{3}-[89AB][0-9A-F]{3}-[0-9A-F]{12}$`))
			serials[id.SerialNumber] = true

			// An update leaves the identity alone (machines are matched on CREATE only).
			before := *id
			m.Labels = map[string]string{"touched": "yes"}
			Expect(k8sClient.Update(suiteCtx, m)).To(Succeed())
			Expect(*m.Spec.SMBIOS).To(Equal(before))
		}
		Expect(serials).To(HaveLen(3))
	})
})

var _ = Describe("Validation over TLS", func() {
	DescribeTable("refuses a MacClass, naming the field and the fix",
		func(name string) {
			tc := classRejections[name]
			c := minimalClass()
			c.Name = uniqueName("invalid")
			tc.mutate(c)
			expectRefusal(k8sClient.Create(suiteCtx, c), apiServerRejects, name, "vmacclass-v1alpha1.macvirt.io", tc.path, tc.want)
		},
		entries(classRejections, nil),
	)

	DescribeTable("refuses a MacPool, naming the field and the fix",
		func(name string) {
			tc := poolRejections[name]
			p := minimalPool()
			p.Name = uniqueName("invalid")
			tc.mutate(p)
			expectRefusal(k8sClient.Create(suiteCtx, p), poolAPIServerRejects, name, "vmacpool-v1alpha1.macvirt.io", tc.path, tc.want)
		},
		entries(poolRejections, nil),
	)

	DescribeTable("refuses a MacClaim, naming the field and the fix",
		func(name string) {
			tc := claimRejections[name]
			c := minimalClaim()
			c.Namespace = newNamespace(nil)
			tc.mutate(c)
			expectRefusal(k8sClient.Create(suiteCtx, c), claimAPIServerRejects, name, "vmacclaim-v1alpha1.macvirt.io", tc.path, tc.want)
		},
		// The cases that need a pool or a namespace's labels have their own specs below.
		entries(claimRejections, func(tc claimCase) bool {
			return tc.env.Pool == nil && tc.path != "metadata.namespace" && tc.path != "spec.access.type"
		}),
	)

	It("refuses a claim asking for an access type its class does not allow, on create and on update", func() {
		class := minimalClass()
		class.Name = uniqueName("access")
		Expect(k8sClient.Create(suiteCtx, class)).To(Succeed())
		cleanup(class)
		c := minimalClaim()
		c.Namespace, c.Spec.ClassName = newNamespace(nil), class.Name
		c.Spec.Access.Type = macvirtv1alpha1.AccessLoadBalancer
		Expect(errorText(k8sClient.Create(suiteCtx, c))).To(ContainSubstring(
			"spec.access.type: Forbidden: MacClass " + class.Name + " allows spec.access.type [ClusterIP] only"))
		c.Spec.Access.Type = ""
		Expect(k8sClient.Create(suiteCtx, c)).To(Succeed())
		c.Spec.Access.Type = macvirtv1alpha1.AccessNodePort
		Expect(errorText(k8sClient.Update(suiteCtx, c))).To(ContainSubstring("spec.access.type: Forbidden"))
	})

	DescribeTable("refuses a MacMachine, naming the field and the fix",
		func(name string) {
			tc := machineRejections[name]
			m := minimalMachine()
			m.Namespace = newNamespace(nil)
			id := goodIdentity()
			m.Spec.SMBIOS = &id
			tc.mutate(m)
			expectRefusal(k8sClient.Create(suiteCtx, m), machineAPIServerRejects, name, "vmacmachine-v1alpha1.macvirt.io", tc.path, tc.want)
		},
		// An identity in use needs another machine; its own spec is below.
		entries(machineRejections, func(tc machineCase) bool { return tc.users == nil }),
	)

	It("refuses MacPools the schema accepts", func() {
		p := minimalPool()
		p.Name, p.Spec.Namespace = uniqueName("pool"), "CI_Macs"
		expectDenied(k8sClient.Create(suiteCtx, p), "vmacpool-v1alpha1.macvirt.io", "spec.namespace", "RFC 1123")

		p = minimalPool()
		p.Name, p.Spec.Idle, p.Spec.MaxMachines = uniqueName("pool"), i32(4), i32(2)
		expectDenied(k8sClient.Create(suiteCtx, p), "", "spec", "maxMachines must be at least idle")
	})

	It("refuses changing a pool's class or namespace", func() {
		p := minimalPool()
		p.Name = uniqueName("pool")
		Expect(k8sClient.Create(suiteCtx, p)).To(Succeed())
		cleanup(p)
		p.Spec.ClassName = "ventura"
		expectDenied(k8sClient.Update(suiteCtx, p), "", "spec.className", "className is immutable")
	})

	Context("MacClaims", func() {
		var class *macvirtv1alpha1.MacClass
		var pool *macvirtv1alpha1.MacPool
		BeforeEach(func() {
			class = minimalClass()
			class.Name = uniqueName("tenancy")
			class.Spec.Tenancy.AllowedNamespaces = &metav1.LabelSelector{MatchLabels: map[string]string{"macvirt.io/tenant": "true"}}
			Expect(k8sClient.Create(suiteCtx, class)).To(Succeed())
			cleanup(class)
			pool = minimalPool()
			pool.Name, pool.Spec.ClassName = uniqueName("pool"), class.Name
			Expect(k8sClient.Create(suiteCtx, pool)).To(Succeed())
			cleanup(pool)
		})

		It("refuses a claim from a namespace the class does not allow, naming the class and the selector", func() {
			c := minimalClaim()
			c.Namespace, c.Spec.ClassName = newNamespace(nil), class.Name
			expectDenied(k8sClient.Create(suiteCtx, c), "vmacclaim-v1alpha1.macvirt.io", "metadata.namespace",
				fmt.Sprintf("may not claim MacClass %s: its labels do not match the class's spec.tenancy.allowedNamespaces (macvirt.io/tenant=true)", class.Name))

			c.Namespace = newNamespace(map[string]string{"macvirt.io/tenant": "true"})
			Expect(k8sClient.Create(suiteCtx, c)).To(Succeed())
		})

		It("refuses a Retain claim where the class does not allow Retain, naming the field and the fix", func() {
			forbid := false
			strict := minimalClass()
			strict.Name = uniqueName("noretain")
			strict.Spec.Tenancy.AllowRetain = &forbid
			Expect(k8sClient.Create(suiteCtx, strict)).To(Succeed())
			cleanup(strict)
			c := minimalClaim()
			c.Namespace, c.Spec.ClassName, c.Spec.ReclaimPolicy = newNamespace(nil), strict.Name, macvirtv1alpha1.ReclaimRetain
			expectDenied(k8sClient.Create(suiteCtx, c), "vmacclaim-v1alpha1.macvirt.io", "spec.reclaimPolicy",
				fmt.Sprintf("MacClass %s does not allow reclaimPolicy Retain (spec.tenancy.allowRetain is false); use Delete", strict.Name))
			c.Spec.ReclaimPolicy = macvirtv1alpha1.ReclaimDelete
			Expect(k8sClient.Create(suiteCtx, c)).To(Succeed())
		})

		It("refuses a claim whose class and pool disagree, and one with neither", func() {
			ns := newNamespace(map[string]string{"macvirt.io/tenant": "true"})
			c := minimalClaim()
			c.Namespace, c.Spec.ClassName, c.Spec.PoolName = ns, "ventura", pool.Name
			expectDenied(k8sClient.Create(suiteCtx, c), "vmacclaim-v1alpha1.macvirt.io", "spec.className",
				fmt.Sprintf("MacPool %s holds machines of MacClass %q", pool.Name, class.Name))

			c.Spec.ClassName, c.Spec.PoolName = "", ""
			expectDenied(k8sClient.Create(suiteCtx, c), "", "spec", "set className, poolName, or both")
		})

		It("refuses a malformed SSH key", func() {
			c := minimalClaim()
			c.Namespace, c.Spec.SSHAuthorizedKeys = newNamespace(map[string]string{"macvirt.io/tenant": "true"}), []string{testKey, "ssh-rsa nonsense"}
			c.Spec.ClassName = class.Name
			expectDenied(k8sClient.Create(suiteCtx, c), "vmacclaim-v1alpha1.macvirt.io", "spec.sshAuthorizedKeys[1]", "not an SSH public key")
		})

		It("refuses changing the reclaim policy of a bound claim", func() {
			c := minimalClaim()
			c.Namespace, c.Spec.ClassName = newNamespace(map[string]string{"macvirt.io/tenant": "true"}), class.Name
			Expect(k8sClient.Create(suiteCtx, c)).To(Succeed())
			c.Status.MachineRef = &macvirtv1alpha1.ObjectRef{Namespace: pool.Spec.Namespace, Name: "m-0", UID: "uid-0"}
			Expect(k8sClient.Status().Update(suiteCtx, c)).To(Succeed())
			c.Spec.ReclaimPolicy = macvirtv1alpha1.ReclaimRetain
			expectDenied(k8sClient.Update(suiteCtx, c), "vmacclaim-v1alpha1.macvirt.io", "spec.reclaimPolicy", "was bound with Delete")
		})

		It("admits a claim naming a pool or class that does not exist yet, with a warning (GitOps applies in any order)", func() {
			c := minimalClaim()
			c.Namespace, c.Spec.ClassName, c.Spec.PoolName = newNamespace(nil), "", uniqueName("later")
			warns := warnings.during(func() { Expect(k8sClient.Create(suiteCtx, c)).To(Succeed()) })
			Expect(warns).To(ContainElement(ContainSubstring(fmt.Sprintf("MacPool %q does not exist yet", c.Spec.PoolName))))
		})
	})

	It("refuses a MacMachine whose SMBIOS identity another machine uses", func() {
		ns := newNamespace(nil)
		first := minimalMachine()
		first.Namespace = ns
		Expect(k8sClient.Create(suiteCtx, first)).To(Succeed())
		Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(first), first)).To(Succeed())
		copied := minimalMachine()
		copied.Namespace, copied.Name = newNamespace(nil), "copy"
		id := *first.Spec.SMBIOS
		id.BoardSerial = "C02123ABCDEHX87AB"
		id.UUID = strings.ToLower(id.UUID)
		copied.Spec.SMBIOS = &id
		// The cache may not hold the first machine yet.
		Eventually(func() error { return k8sClient.Create(suiteCtx, copied, client.DryRunAll) }).Should(HaveOccurred())
		err := k8sClient.Create(suiteCtx, copied)
		expectDenied(err, "vmacmachine-v1alpha1.macvirt.io", "spec.smbios.serialNumber", "already used by MacMachine "+ns+"/m-1")
		Expect(denialOf(err).fields).To(ContainElement("spec.smbios.uuid"), "UUIDs compare case-insensitively")
	})

	It("returns the warnings of risky but legal values to the client", func() {
		c := minimalClass()
		c.Name = uniqueName("risky")
		c.Spec.Lifecycle.ShutdownGracePeriod = dur(30 * time.Second)
		c.Spec.Image.Size = qty("32Gi")
		warns := warnings.during(func() { Expect(k8sClient.Create(suiteCtx, c)).To(Succeed()) })
		cleanup(c)
		Expect(warns).To(ContainElements(
			ContainSubstring("spec.lifecycle.shutdownGracePeriod 30s is under 1m0s"),
			ContainSubstring("spec.image.size 32Gi is under 64Gi")))

		c.Spec.Resources.Memory = qty("16Gi")
		warns = warnings.during(func() { Expect(k8sClient.Update(suiteCtx, c)).To(Succeed()) })
		Expect(warns).To(ContainElement(ContainSubstring("new revision")))
	})
})

var _ = Describe("With the webhook server down", func() {
	It("still deletes everything and writes status; creates and machine updates fail closed", func() {
		ns := newNamespace(nil)
		class := minimalClass()
		class.Name = uniqueName("down")
		pool := minimalPool()
		pool.Name, pool.Spec.ClassName = uniqueName("down"), class.Name
		claim := minimalClaim()
		claim.Namespace, claim.Spec.ClassName = ns, class.Name
		machine := minimalMachine()
		machine.Namespace, machine.Spec.ClassName = ns, class.Name
		machine.Finalizers = []string{macvirtv1alpha1.MachineFinalizer}
		for _, o := range []client.Object{class, pool, claim, machine} {
			Expect(k8sClient.Create(suiteCtx, o)).To(Succeed())
		}

		// Configurations like the live ones, pointed at a port nobody serves.
		dead, err := devserve.Prepare(devserve.Options{Manifests: manifests, NamePrefix: "macvirt-down-"})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(dead.Close)
		Expect(dead.Install(suiteCtx, k8sClient)).To(Succeed())
		DeferCleanup(func() { Expect(dead.Uninstall(context.Background(), k8sClient)).To(Succeed()) })
		probe := minimalClass()
		probe.Name = uniqueName("probe")
		Eventually(func() string { return errorText(k8sClient.Create(suiteCtx, probe, client.DryRunAll)) }).
			Should(ContainSubstring("failed calling webhook"), "creates fail closed while the webhook is down")

		By("the operator's own writes: status of every kind")
		now := metav1.Now()
		class.Status.Revision = "r1"
		Expect(k8sClient.Status().Update(suiteCtx, class)).To(Succeed())
		pool.Status.Machines = 1
		Expect(k8sClient.Status().Update(suiteCtx, pool)).To(Succeed())
		claim.Status.Phase, claim.Status.BoundAt = macvirtv1alpha1.ClaimPending, &now
		Expect(k8sClient.Status().Update(suiteCtx, claim)).To(Succeed())
		machine.Status.Phase = macvirtv1alpha1.MachinePending
		Expect(k8sClient.Status().Update(suiteCtx, machine)).To(Succeed())
		bind := machine.DeepCopy()
		bind.Spec.ClaimRef = &macvirtv1alpha1.ObjectRef{Namespace: ns, Name: claim.Name, UID: claim.UID}
		Expect(errorText(k8sClient.Update(suiteCtx, bind))).To(ContainSubstring("failed calling webhook"),
			"what binds a machine is checked for the operator's identity, so it waits for the webhook")

		By("deletes")
		for _, o := range []client.Object{claim, machine, pool, class} {
			Expect(k8sClient.Delete(suiteCtx, o)).To(Succeed())
		}

		By("but a new machine is refused rather than admitted unchecked")
		m := minimalMachine()
		m.Namespace, m.Name = ns, "while-down"
		Expect(errorText(k8sClient.Create(suiteCtx, m))).To(ContainSubstring("failed calling webhook"))

		By("the finalizer goes once the webhook answers again")
		Expect(dead.Uninstall(suiteCtx, k8sClient)).To(Succeed())
		Eventually(func() error {
			if err := k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(machine), machine); err != nil {
				return err
			}
			machine.Finalizers = nil
			return k8sClient.Update(suiteCtx, machine)
		}).Should(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(machine), machine))
		}).Should(BeTrue())
	})
})
