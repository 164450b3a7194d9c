package pool

import (
	"context"
	"errors"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/controllertest"
	"github.com/macvirt/macvirt/internal/controller/slots"
)

func TestSlotsProblem(t *testing.T) {
	g := NewWithT(t)
	name := corev1.ResourceName(macvirtv1alpha1.ResourceMacOSSlots)
	node := func(n string, slots int64, cordoned bool) corev1.Node {
		node := corev1.Node{}
		node.Name, node.Spec.Unschedulable = n, cordoned
		if slots >= 0 {
			node.Status.Allocatable = corev1.ResourceList{name: *resource.NewQuantity(slots, resource.DecimalSI)}
		}
		return node
	}
	vmi := func(n string, phase kubevirtv1.VirtualMachineInstancePhase) kubevirtv1.VirtualMachineInstance {
		v := kubevirtv1.VirtualMachineInstance{}
		v.Spec.Domain.Resources.Limits = corev1.ResourceList{name: resource.MustParse("1")}
		v.Status.NodeName, v.Status.Phase = n, phase
		return v
	}
	use := slots.Use([]corev1.Node{node("mac-2", 2, true), node("mac-1", 2, false), node("mac-3", -1, false)},
		[]kubevirtv1.VirtualMachineInstance{vmi("mac-1", kubevirtv1.Running), vmi("mac-1", kubevirtv1.Scheduled),
			vmi("mac-2", kubevirtv1.Running), vmi("mac-2", kubevirtv1.Succeeded), {}})
	g.Expect(use).To(Equal([]slots.NodeUse{{Node: "mac-1", Slots: 2, Used: 2}, {Node: "mac-2", Slots: 2, Used: 1, Cordoned: true},
		{Node: "mac-3", NotListed: true}}))
	p := slotsProblem(1, use, nil)
	g.Expect(p.Reason).To(Equal(macvirtv1alpha1.ReasonMacOSSlotsExhausted))
	g.Expect(p.Message).To(ContainSubstring("1 machine(s) cannot be scheduled"))
	g.Expect(p.Message).To(ContainSubstring("free slots per node: mac-1 0 of 2 free, mac-2 1 of 2 free (cordoned), mac-3 advertises no macvirt.io/macos-slots yet"))
	g.Expect(slotsProblem(0, use, nil)).To(BeNil())
	g.Expect(slotsProblem(2, nil, nil).Message).To(ContainSubstring("no node is labelled macvirt.io/apple-hardware=true"))

	waiting := macvirtv1alpha1.MacMachine{}
	meta.SetStatusCondition(&waiting.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: macvirtv1alpha1.ReasonMacOSSlotsExhausted})
	bound := *waiting.DeepCopy()
	bound.Spec.ClaimRef = &macvirtv1alpha1.ObjectRef{Name: "c"}
	g.Expect(waitingForSlots([]macvirtv1alpha1.MacMachine{waiting, bound, {}})).To(Equal(1))
	g.Expect(slots.Exhausted("0/1 nodes are available: 1 Insufficient macvirt.io/macos-slots.")).To(BeTrue())
	g.Expect(slots.Exhausted("0/1 nodes are available: 1 Insufficient cpu.")).To(BeFalse())
	g.Expect(strings.Count(p.Message, "docs/licensing.md")).To(Equal(1))
}

func TestAnUnreadableSlotReportIsSaidOnThePool(t *testing.T) {
	waiting := macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "p-2", Namespace: "pools"}}
	waiting.Status.Conditions = []metav1.Condition{{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: macvirtv1alpha1.ReasonMacOSSlotsExhausted}}
	c := fake.NewClientBuilder().WithScheme(controllertest.Scheme(t)).WithInterceptorFuncs(interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return apierrors.NewForbidden(corev1.Resource("nodes"), "", errors.New("cannot list nodes at the cluster scope"))
		},
	}).Build()
	r := &Reconciler{Client: c}
	s := &poolScope{Pool: &macvirtv1alpha1.MacPool{}, Machines: []macvirtv1alpha1.MacMachine{waiting}}
	if proceed, err := r.observeSlots(context.Background(), s); !proceed || err != nil {
		t.Fatalf("observeSlots = %v, %v; want the pool to go on", proceed, err)
	}
	st := computePoolStatus(s)
	var ready *metav1.Condition
	for i := range st.Conditions {
		if st.Conditions[i].Type == macvirtv1alpha1.ConditionReady {
			ready = &st.Conditions[i]
		}
	}
	if ready == nil || ready.Reason != macvirtv1alpha1.ReasonMacOSSlotsExhausted ||
		!strings.Contains(ready.Message, `could not be read: listing Apple nodes: nodes is forbidden: cannot list nodes at the cluster scope`) {
		t.Fatalf("Ready = %+v; want MacOSSlotsExhausted saying why the free slots are unknown, in the API server's words", ready)
	}
}
