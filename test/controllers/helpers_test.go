package controllers_test

import (
	"context"
	"sync"
	"time"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestprotocol"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

const (
	timeout  = 30 * time.Second
	interval = 50 * time.Millisecond
)

// newClass creates a minimal class (only the two required disks) and lets
// CRD defaulting fill the rest, then applies mods before creating it.
func newClass(mods ...func(*macvirtv1alpha1.MacClass)) *macvirtv1alpha1.MacClass {
	ns := "macvirt-images"
	c := &macvirtv1alpha1.MacClass{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "sonoma-"},
		Spec: macvirtv1alpha1.MacClassSpec{
			Image: macvirtv1alpha1.ImageSpec{DiskSource: macvirtv1alpha1.DiskSource{
				SourceRef: &cdiv1.DataVolumeSourceRef{Kind: cdiv1.DataVolumeDataSource, Namespace: &ns, Name: "sonoma"}}},
			Bootloader: macvirtv1alpha1.BootloaderSpec{DiskSource: macvirtv1alpha1.DiskSource{
				SourceRef: &cdiv1.DataVolumeSourceRef{Kind: cdiv1.DataVolumeDataSource, Namespace: &ns, Name: "opencore"}}},
		},
	}
	for _, m := range mods {
		m(c)
	}
	Expect(k8sClient.Create(context.Background(), c)).To(Succeed())
	trackClass(c.Name)
	return c
}

// newMachine creates a machine of class in ns and deletes it (waiting for
// the graceful deletion to finish) when the test ends.
func newMachine(ns, class string, mods ...func(*macvirtv1alpha1.MacMachine)) *macvirtv1alpha1.MacMachine {
	m := &macvirtv1alpha1.MacMachine{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "mac-", Namespace: ns},
		Spec:       macvirtv1alpha1.MacMachineSpec{ClassName: class},
	}
	for _, mod := range mods {
		mod(m)
	}
	Expect(k8sClient.Create(context.Background(), m)).To(Succeed())
	return m
}

func key(o client.Object) types.NamespacedName { return client.ObjectKeyFromObject(o) }

func getMachine(k types.NamespacedName) *macvirtv1alpha1.MacMachine {
	return getMachineWith(Default, k)
}

// getMachineWith gets a machine, asserting with g: inside a polled function
// a failed read is retried instead of failing the spec.
func getMachineWith(g Gomega, k types.NamespacedName) *macvirtv1alpha1.MacMachine {
	m := &macvirtv1alpha1.MacMachine{}
	g.Expect(k8sClient.Get(context.Background(), k, m)).To(Succeed())
	return m
}

// phase polls a machine's phase.
func phase(k types.NamespacedName) func() macvirtv1alpha1.MachinePhase {
	return func() macvirtv1alpha1.MachinePhase {
		m := &macvirtv1alpha1.MacMachine{}
		if err := k8sClient.Get(context.Background(), k, m); err != nil {
			return ""
		}
		return m.Status.Phase
	}
}

// conditionOf polls one condition of a machine.
func conditionOf(k types.NamespacedName, t string) func() metav1.Condition {
	return pollCondition(k, t, &macvirtv1alpha1.MacMachine{}, func(m *macvirtv1alpha1.MacMachine) []metav1.Condition {
		return m.Status.Conditions
	})
}

// pollCondition polls condition t of the object at k.
func pollCondition[T client.Object](k types.NamespacedName, t string, obj T, conds func(T) []metav1.Condition) func() metav1.Condition {
	return func() metav1.Condition {
		if err := k8sClient.Get(context.Background(), k, obj); err != nil {
			return metav1.Condition{}
		}
		if c := meta.FindStatusCondition(conds(obj), t); c != nil {
			return *c
		}
		return metav1.Condition{}
	}
}

// heartbeat records a guest-agent heartbeat the way the agent endpoint does.
func heartbeat(k types.NamespacedName) {
	Eventually(func(g Gomega) error {
		m := getMachineWith(g, k)
		before := m.DeepCopy()
		now := metav1.NewTime(clock.Now())
		m.Status.Guest = &macvirtv1alpha1.GuestStatus{LastHeartbeat: &now, AgentVersion: "test", OSVersion: "14.5"}
		return k8sClient.Status().Patch(context.Background(), m, client.MergeFrom(before))
	}).WithTimeout(timeout).Should(Succeed())
}

// touch changes an annotation so the operator reconciles the machine now.
func touch(k types.NamespacedName) { touchObject(getMachine(k)) }

// silentPast is how far the clock moves for a guest to be judged silent
// under timeout: past it, and past the gap in which a steady guest's
// heartbeat may go unwritten (guestprotocol.HeartbeatRecordGap).
func silentPast(timeout time.Duration) time.Duration {
	return timeout + guestprotocol.HeartbeatRecordGap(guestprotocol.HeartbeatInterval(timeout)) + time.Second
}

// touchObject changes an annotation of obj, so the operator looks at it
// again (after the test moved the clock).
func touchObject(obj client.Object) {
	before := obj.DeepCopyObject().(client.Object)
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations["test.macvirt.io/touched"] = time.Now().Format(time.RFC3339Nano)
	obj.SetAnnotations(annotations)
	ExpectWithOffset(1, k8sClient.Patch(context.Background(), obj, client.MergeFrom(before))).To(Succeed())
}

// owned counts the machine's VMs, VMIs and DataVolumes by label.
type owned struct{ VMs, VMIs, DataVolumes int }

func ownedBy(k types.NamespacedName) func(Gomega) owned {
	return func(g Gomega) owned {
		sel := client.MatchingLabels{macvirtv1alpha1.LabelMachine: k.Name}
		in := client.InNamespace(k.Namespace)
		var vms kubevirtv1.VirtualMachineList
		var vmis kubevirtv1.VirtualMachineInstanceList
		var dvs cdiv1.DataVolumeList
		g.Expect(k8sClient.List(context.Background(), &vms, in, sel)).To(Succeed())
		g.Expect(k8sClient.List(context.Background(), &vmis, in, sel)).To(Succeed())
		g.Expect(k8sClient.List(context.Background(), &dvs, in, sel)).To(Succeed())
		return owned{len(vms.Items), len(vmis.Items), len(dvs.Items)}
	}
}

// deleteAndWait deletes a machine and waits until it is gone.
func deleteAndWait(k types.NamespacedName) {
	m := &macvirtv1alpha1.MacMachine{}
	if err := k8sClient.Get(context.Background(), k, m); apierrors.IsNotFound(err) {
		return
	}
	Expect(client.IgnoreNotFound(k8sClient.Delete(context.Background(), m))).To(Succeed())
	Eventually(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(context.Background(), k, &macvirtv1alpha1.MacMachine{}))
	}).WithTimeout(timeout).WithPolling(interval).Should(BeTrue(), "machine %s was not deleted", k)
}

func vmOf(k types.NamespacedName) func() *kubevirtv1.VirtualMachine {
	return func() *kubevirtv1.VirtualMachine {
		vm := &kubevirtv1.VirtualMachine{}
		if err := k8sClient.Get(context.Background(), k, vm); err != nil {
			return nil
		}
		return vm
	}
}

// runtimeConvert converts an unstructured object into a typed one.
func runtimeConvert(u map[string]any, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u, into)
}

// crdNamed reads an installed CustomResourceDefinition.
func crdNamed(name string) *apiextensionsv1.CustomResourceDefinition {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	Expect(k8sClient.Get(context.Background(), types.NamespacedName{Name: name}, crd)).To(Succeed())
	return crd
}

// countEvents counts the Added and Deleted events w delivers within d.
func countEvents(w watch.Interface, d time.Duration) (added, deleted int) {
	deadline := time.After(d)
	for {
		select {
		case ev := <-w.ResultChan():
			switch ev.Type {
			case watch.Added:
				added++
			case watch.Deleted:
				deleted++
			}
		case <-deadline:
			return added, deleted
		}
	}
}

// expireStartBackoff moves virt-controller's clock on for one VM, as
// offsetClock does the operator's: once an instance has failed before it
// ran, virt-controller records when it will start the next (10-15 s later,
// then 40-60 s), and this brings that time to now, written as
// virt-controller. virt-controller still counts the failures, computes the
// backoff and makes the next start itself; only the wait is skipped. It
// returns the start failure it found (nil when there is none).
func expireStartBackoff(k types.NamespacedName) *kubevirtv1.VirtualMachineStartFailure {
	vm := &kubevirtv1.VirtualMachine{}
	if err := k8sClient.Get(context.Background(), k, vm); err != nil || vm.Status.StartFailure == nil {
		return nil
	}
	found := vm.Status.StartFailure.DeepCopy()
	// Not after the third failure, at which the operator gives up: a
	// fourth start would race its verdict.
	if f := vm.Status.StartFailure; f.ConsecutiveFailCount < 3 && f.RetryAfterTimestamp != nil && f.RetryAfterTimestamp.After(time.Now()) {
		before := vm.DeepCopy()
		now := metav1.Now()
		f.RetryAfterTimestamp = &now
		// A conflict means virt-controller wrote meanwhile; the next poll
		// looks again. Anything else (a right lost) fails the spec rather
		// than let it wait out the real backoff.
		err := virtController().Status().Patch(context.Background(), vm, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		ExpectWithOffset(1, err == nil || apierrors.IsConflict(err)).To(BeTrue(), "moving virt-controller's retry time: %v", err)
	}
	return found
}

// virtController is a client that acts as KubeVirt's controller service
// account, as the harness runs virt-controller.
var virtController = sync.OnceValue(func() client.Client {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + cluster.KubeVirtNamespace + ":kubevirt-controller",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + cluster.KubeVirtNamespace, "system:authenticated"}}
	cl, err := client.New(c, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	return cl
})
