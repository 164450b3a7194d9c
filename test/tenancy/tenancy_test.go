package tenancy_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestprotocol"
	"github.com/macvirt/macvirt/internal/tunnel"
)

const pool = "ci-sonoma" // the sample pool, in macvirt-pools

// claimFor creates, as user, a claim of the sample pool and waits until it
// is Ready.
func claimFor(user, name string) *macvirtv1alpha1.MacClaim {
	c := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tenants[user]},
		Spec: macvirtv1alpha1.MacClaimSpec{PoolName: pool, SSHAuthorizedKeys: []string{
			"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBu3mZ9f0rQeQ0yJ1S0Ukq8Vw3lJz1qW2x9b7kXo4h2c " + user + "@example.com"},
			WriteConnectionSecretToRef: &macvirtv1alpha1.LocalSecretReference{Name: name + "-ssh"}}}
	Expect(as(user).Create(context.Background(), c)).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(as(user).Get(context.Background(), client.ObjectKeyFromObject(c), c)).To(Succeed())
		g.Expect(c.Status.Phase).To(Equal(macvirtv1alpha1.ClaimReady))
	}).Should(Succeed())
	return c
}

// machineOf is, read by the administrator, the machine a claim is bound to.
func machineOf(c *macvirtv1alpha1.MacClaim) *macvirtv1alpha1.MacMachine {
	ref := c.Status.MachineRef
	Expect(ref).NotTo(BeNil())
	m := &macvirtv1alpha1.MacMachine{}
	Expect(admin.Get(context.Background(), types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, m)).To(Succeed())
	return m
}

func forbidden(err error) {
	GinkgoHelper()
	Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)
}

// refusedNaming expects an admission refusal whose causes name field.
func refusedNaming(err error, field string) {
	GinkgoHelper()
	Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
	var fields []string
	for _, c := range err.(apierrors.APIStatus).Status().Details.Causes {
		fields = append(fields, c.Field)
	}
	Expect(fields).To(ContainElement(field), "refused, but not for %s: %v", field, err)
	Expect(err.Error()).To(ContainSubstring("only the macvirt operator sets this"))
}

var _ = Describe("Tenants with the shipped roles", Ordered, func() {
	var aliceClaim, bobClaim *macvirtv1alpha1.MacClaim
	var bobMachine *macvirtv1alpha1.MacMachine
	ctx := context.Background()
	mallory := func() client.Client { return as("mallory") }

	BeforeAll(func() {
		aliceClaim = claimFor("alice", "build")
		bobClaim = claimFor("bob", "db")
		bobMachine = machineOf(bobClaim)
	})

	It("get a Ready Mac and see it on the claim, without reading the machine's namespace", func() {
		st := aliceClaim.Status.Machine
		Expect(st).NotTo(BeNil())
		Expect(st.Name).To(HavePrefix("macvirt-pools/"))
		Expect(st.Phase).To(Equal(macvirtv1alpha1.MachineReady))
		Expect(st.NodeName).NotTo(BeEmpty())
		m := machineOf(aliceClaim)
		forbidden(as("alice").Get(ctx, client.ObjectKeyFromObject(m), &macvirtv1alpha1.MacMachine{}))
		Expect(aliceClaim.Status.Connection).To(And(HaveField("Host", Not(BeEmpty())), HaveField("User", "admin"),
			HaveField("HostKeys", Not(BeEmpty()))), "everything to connect is on the claim, which she may read")
		By("and in the Secret she asked for, once the claim is Ready")
		Eventually(func(g Gomega) {
			secret := &corev1.Secret{}
			g.Expect(as("alice").Get(ctx, types.NamespacedName{Namespace: "team-a", Name: "build-ssh"}, secret)).To(Succeed())
			g.Expect(secret.Data).To(HaveKeyWithValue("user", []byte("admin")))
		}).Should(Succeed())
	})

	It("reach their own Mac through the tunnel, and no one else's", func() {
		conn, err := tunnel.Dial(ctx, configAs("alice"), "team-a", "build", 22)
		Expect(err).NotTo(HaveOccurred(), "alice's tunnel to her claim's SSH port")
		banner := make([]byte, len("SSH-2.0-"))
		Expect(conn.SetReadDeadline(time.Now().Add(30 * time.Second))).To(Succeed())
		_, err = io.ReadFull(conn, banner)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(banner)).To(Equal("SSH-2.0-"), "the Mac's sshd, through the API server and the operator")
		Expect(conn.Close()).To(Succeed())
		By("mallory, with the same shipped roles in her own namespace, is refused by the API server")
		_, err = tunnel.Dial(ctx, configAs("mallory"), "team-a", "build", 22)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "mallory's tunnel to alice's claim: %v", err)
		By("and a port the class does not open stays shut, for alice too")
		_, err = tunnel.Dial(ctx, configAs("alice"), "team-a", "build", 2049)
		Expect(apierrors.IsServiceUnavailable(err)).To(BeTrue(), "a tunnel to port 2049: %v", err)
		Expect(err.Error()).To(ContainSubstring("port 2049 of macclaim team-a/build is not open"))
	})

	It("cannot read another namespace's connection Secret, claim or machine", func() {
		c := mallory()
		forbidden(c.Get(ctx, types.NamespacedName{Namespace: "team-b", Name: "db-ssh"}, &corev1.Secret{}))
		forbidden(c.List(ctx, &corev1.SecretList{}, client.InNamespace("team-b")))
		forbidden(c.List(ctx, &corev1.SecretList{}))
		forbidden(c.Get(ctx, client.ObjectKeyFromObject(bobClaim), &macvirtv1alpha1.MacClaim{}))
		forbidden(c.List(ctx, &macvirtv1alpha1.MacClaimList{}, client.InNamespace("team-b")))
		forbidden(c.List(ctx, &macvirtv1alpha1.MacClaimList{}))
		forbidden(c.Get(ctx, client.ObjectKeyFromObject(bobMachine), &macvirtv1alpha1.MacMachine{}))
		forbidden(c.List(ctx, &macvirtv1alpha1.MacMachineList{}))
		By("while the catalog is open to everyone")
		Expect(c.Get(ctx, types.NamespacedName{Name: pool}, &macvirtv1alpha1.MacPool{})).To(Succeed())
	})

	It("cannot write any status, not even of their own objects", func() {
		c := mallory()
		own := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "waits", Namespace: "evil"},
			Spec: macvirtv1alpha1.MacClaimSpec{PoolName: "no-such-pool"}}
		Expect(c.Create(ctx, own)).To(Succeed())
		own.Status.Phase = macvirtv1alpha1.ClaimReady
		own.Status.MachineRef = &macvirtv1alpha1.ObjectRef{Namespace: bobMachine.Namespace, Name: bobMachine.Name, UID: bobMachine.UID}
		forbidden(c.Status().Update(ctx, own))
		forbidden(c.Status().Patch(ctx, own, client.Merge))

		m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "status", Namespace: "evil"},
			Spec: macvirtv1alpha1.MacMachineSpec{ClassName: "sonoma", Running: ptrTo(false)}}
		Expect(c.Create(ctx, m)).To(Succeed(), "the shipped macmachine-admin-role lets a namespace's admin make a plain machine")
		m.Status.Phase = macvirtv1alpha1.MachineReady
		forbidden(c.Status().Update(ctx, m))
		bob := bobMachine.DeepCopy()
		bob.Status.Guest = &macvirtv1alpha1.GuestStatus{Hostname: "mallory"}
		forbidden(c.Status().Update(ctx, bob))

		p := &macvirtv1alpha1.MacPool{}
		Expect(c.Get(ctx, types.NamespacedName{Name: pool}, p)).To(Succeed())
		p.Status.Idle = 99
		forbidden(c.Status().Update(ctx, p))
		class := &macvirtv1alpha1.MacClass{}
		Expect(c.Get(ctx, types.NamespacedName{Name: "sonoma"}, class)).To(Succeed())
		forbidden(c.Status().Update(ctx, class))
	})

	It("cannot bind a machine, forge a pool's machine, or touch another tenant's", func() {
		c := mallory()
		forged := func(name string, mod func(*macvirtv1alpha1.MacMachine)) *macvirtv1alpha1.MacMachine {
			m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "evil"},
				Spec: macvirtv1alpha1.MacMachineSpec{ClassName: "sonoma"}}
			mod(m)
			return m
		}
		refusedNaming(c.Create(ctx, forged("catch-bob", func(m *macvirtv1alpha1.MacMachine) {
			m.Spec.ClaimRef = &macvirtv1alpha1.ObjectRef{Namespace: "team-b", Name: bobClaim.Name, UID: bobClaim.UID}
		})), "spec.claimRef")
		p := &macvirtv1alpha1.MacPool{}
		Expect(c.Get(ctx, types.NamespacedName{Name: pool}, p)).To(Succeed())
		refusedNaming(c.Create(ctx, forged("decoy", func(m *macvirtv1alpha1.MacMachine) {
			m.Labels = map[string]string{macvirtv1alpha1.LabelPool: pool}
			m.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(p, macvirtv1alpha1.GroupVersion.WithKind("MacPool"))}
		})), "metadata.labels[macvirt.io/pool]")
		refusedNaming(c.Create(ctx, forged("my-token", func(m *macvirtv1alpha1.MacMachine) {
			m.Annotations = map[string]string{macvirtv1alpha1.AnnotationAgentTokenHash: guestprotocol.HashToken("chosen-by-mallory")}
		})), "metadata.annotations[macvirt.io/agent-token-sha256]")

		By("her own plain machine cannot be bound to bob's claim after the fact")
		own := &macvirtv1alpha1.MacMachine{}
		Expect(c.Get(ctx, types.NamespacedName{Namespace: "evil", Name: "status"}, own)).To(Succeed())
		patch := client.MergeFrom(own.DeepCopy())
		own.Spec.ClaimRef = &macvirtv1alpha1.ObjectRef{Namespace: "team-b", Name: bobClaim.Name, UID: bobClaim.UID}
		refusedNaming(c.Patch(ctx, own, patch), "spec.claimRef")

		By("bob's machine is out of her reach")
		bob := bobMachine.DeepCopy()
		bob.Spec.Running = ptrTo(false)
		forbidden(c.Update(ctx, bob))
		forbidden(c.Delete(ctx, bobMachine.DeepCopy()))
		Consistently(func(g Gomega) {
			claim := &macvirtv1alpha1.MacClaim{}
			g.Expect(as("bob").Get(ctx, client.ObjectKeyFromObject(bobClaim), claim)).To(Succeed())
			g.Expect(claim.Status.Phase).To(Equal(macvirtv1alpha1.ClaimReady))
			g.Expect(claim.Status.MachineRef.UID).To(Equal(bobMachine.UID))
		}).WithTimeout(2 * time.Second).Should(Succeed())
	})

	It("cannot heartbeat for another machine, even with a valid token of their own", func() {
		c := mallory()
		own := &macvirtv1alpha1.MacMachine{}
		Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, types.NamespacedName{Namespace: "evil", Name: "status"}, own)).To(Succeed())
			g.Expect(own.Annotations[macvirtv1alpha1.AnnotationAgentSecret]).NotTo(BeEmpty())
		}).Should(Succeed())
		secret := &corev1.Secret{}
		Expect(c.Get(ctx, types.NamespacedName{Namespace: "evil", Name: own.Annotations[macvirtv1alpha1.AnnotationAgentSecret]}, secret)).To(Succeed())
		token := string(secret.Data[guestprotocol.KeyToken])
		Expect(token).NotTo(BeEmpty())

		Expect(heartbeat(token, own.Namespace, own.Name)).To(Equal(http.StatusOK), "her token is good for her own machine")
		Expect(heartbeat(token, bobMachine.Namespace, bobMachine.Name)).To(Equal(http.StatusUnauthorized))
		m := &macvirtv1alpha1.MacMachine{}
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(bobMachine), m)).To(Succeed())
		Expect(m.Status.Guest).NotTo(BeNil())
		Expect(m.Status.Guest.Hostname).NotTo(Equal("mallory"))
	})

	It("leave a tenant's own Secret named like a connection Secret untouched, and say so on the claim", func() {
		alice := as("alice")
		mine := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "notes-connection", Namespace: "team-a"},
			StringData: map[string]string{"diary": "mine"}}
		Expect(alice.Create(ctx, mine)).To(Succeed())
		claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "notes", Namespace: "team-a"},
			Spec: macvirtv1alpha1.MacClaimSpec{PoolName: pool,
				WriteConnectionSecretToRef: &macvirtv1alpha1.LocalSecretReference{Name: "notes-connection"}}}
		Expect(alice.Create(ctx, claim)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(alice.Get(ctx, client.ObjectKeyFromObject(claim), claim)).To(Succeed())
			cond := meta.FindStatusCondition(claim.Status.Conditions, macvirtv1alpha1.ConditionConnectionSecretReady)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Reason).To(Equal(macvirtv1alpha1.ReasonSecretConflict))
		}).Should(Succeed())
		Expect(alice.Get(ctx, client.ObjectKeyFromObject(mine), mine)).To(Succeed())
		Expect(mine.Data).To(Equal(map[string][]byte{"diary": []byte("mine")}))
		Expect(mine.OwnerReferences).To(BeEmpty())
	})

	It("cannot stop or delete a colleague's VirtualMachine by naming a machine after it", func() {
		vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "evil", Name: "colleague"},
			Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: ptrTo(kubevirtv1.RunStrategyAlways),
				Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{Spec: kubevirtv1.VirtualMachineInstanceSpec{
					Domain: kubevirtv1.DomainSpec{Resources: kubevirtv1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}}}}}}}
		Expect(admin.Create(ctx, vm)).To(Succeed(), "a VM someone else in the namespace made")
		c := mallory()
		m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "colleague", Namespace: "evil"},
			Spec: macvirtv1alpha1.MacMachineSpec{ClassName: "sonoma", Running: ptrTo(false)}}
		Expect(c.Create(ctx, m)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
			cond := meta.FindStatusCondition(m.Status.Conditions, macvirtv1alpha1.ConditionStalled)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Reason).To(Equal(macvirtv1alpha1.ReasonNotOwned))
			g.Expect(cond.Message).To(ContainSubstring("VirtualMachine evil/colleague"))
		}).Should(Succeed())
		Expect(c.Delete(ctx, m)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(m), m)) }).Should(BeTrue())
		after := &kubevirtv1.VirtualMachine{}
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(vm), after)).To(Succeed())
		Expect(after.UID).To(Equal(vm.UID))
		Expect(after.DeletionTimestamp).To(BeNil())
		Expect(after.Spec.RunStrategy).To(HaveValue(Equal(kubevirtv1.RunStrategyAlways)), "the machine, asked not to run, stopped someone's VM")
	})

	It("are granted nothing across namespaces, or over status, by any shipped role", func() {
		type attempt struct {
			why   string
			attrs authorizationv1.ResourceAttributes
		}
		other := func(verb, group, resource string) authorizationv1.ResourceAttributes {
			return authorizationv1.ResourceAttributes{Namespace: "team-b", Verb: verb, Group: group, Resource: resource}
		}
		own := func(verb, group, resource, sub string) authorizationv1.ResourceAttributes {
			return authorizationv1.ResourceAttributes{Namespace: "evil", Verb: verb, Group: group, Resource: resource, Subresource: sub}
		}
		var attempts []attempt
		for _, verb := range []string{"get", "list", "watch"} {
			attempts = append(attempts,
				attempt{"read another namespace's Secrets", other(verb, "", "secrets")},
				attempt{"read another namespace's claims", other(verb, "macvirt.io", "macclaims")},
				attempt{"read another namespace's machines", other(verb, "macvirt.io", "macmachines")},
				attempt{"read the pools' machines", authorizationv1.ResourceAttributes{Namespace: "macvirt-pools", Verb: verb, Group: "macvirt.io", Resource: "macmachines"}},
				attempt{"read the operator's Secrets", authorizationv1.ResourceAttributes{Namespace: "macvirt-system", Verb: verb, Resource: "secrets"}})
		}
		for _, verb := range []string{"create", "update", "patch", "delete"} {
			attempts = append(attempts,
				attempt{"write another namespace's claims", other(verb, "macvirt.io", "macclaims")},
				attempt{"write another namespace's machines", other(verb, "macvirt.io", "macmachines")},
				attempt{"write the pools' machines", authorizationv1.ResourceAttributes{Namespace: "macvirt-pools", Verb: verb, Group: "macvirt.io", Resource: "macmachines"}},
				attempt{"write classes", authorizationv1.ResourceAttributes{Verb: verb, Group: "macvirt.io", Resource: "macclasses"}},
				attempt{"write pools", authorizationv1.ResourceAttributes{Verb: verb, Group: "macvirt.io", Resource: "macpools"}})
		}
		for _, verb := range []string{"update", "patch"} {
			for _, r := range []string{"macclaims", "macmachines"} {
				attempts = append(attempts, attempt{"write the status of their own " + r, own(verb, "macvirt.io", r, "status")})
			}
			for _, r := range []string{"macclasses", "macpools"} {
				attempts = append(attempts, attempt{"write the status of " + r,
					authorizationv1.ResourceAttributes{Verb: verb, Group: "macvirt.io", Resource: r, Subresource: "status"}})
			}
		}
		var granted []string
		for _, a := range attempts {
			if allowed("mallory", a.attrs) {
				granted = append(granted, a.why+": "+a.attrs.Verb+" "+a.attrs.Resource+"/"+a.attrs.Subresource+" in "+a.attrs.Namespace)
			}
		}
		Expect(granted).To(BeEmpty(), "a shipped role grants a tenant what crosses a boundary")
		By("while the same roles do grant a tenant their own namespace's claims (the checks can say yes)")
		Expect(allowed("mallory", own("create", "macvirt.io", "macclaims", ""))).To(BeTrue())
		Expect(allowed("mallory", own("get", "macvirt.io", "macclaims", "status"))).To(BeTrue())
	})
})

func ptrTo[T any](v T) *T { return &v }

// heartbeat posts a heartbeat for namespace/name with token to the
// operator's agent endpoint and returns the HTTP status.
func heartbeat(token, namespace, name string) int {
	pool := x509.NewCertPool()
	Expect(pool.AppendCertsFromPEM(system.CABundle)).To(BeTrue())
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	body, err := json.Marshal(guestprotocol.Heartbeat{Machine: guestprotocol.MachineRef{Namespace: namespace, Name: name},
		AgentVersion: "1.0.0", OSVersion: "14.5", OSBuild: "23F79", Hostname: "mallory", BootTime: time.Now().Add(-time.Minute),
		IPAddresses: []string{"10.0.2.2"}})
	Expect(err).NotTo(HaveOccurred())
	req, err := http.NewRequest(http.MethodPost, system.AgentEndpoint+guestprotocol.HeartbeatPath, bytes.NewReader(body))
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	return resp.StatusCode
}
