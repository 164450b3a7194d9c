package tenancy_test

import (
	"context"
	"encoding/json"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/simulator"
)

// grantVMs gives user what KubeVirt's aggregated kubevirt.io:edit role
// gives anyone bound to the built-in edit role in ns: VMs and VMIs.
func grantVMs(user, ns string) {
	GinkgoHelper()
	ctx := context.Background()
	name := user + "-kubevirt-edit"
	Expect(admin.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"kubevirt.io"},
			Resources: []string{"virtualmachines", "virtualmachineinstances"},
			Verbs:     []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}})).To(Succeed())
	Expect(admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}})).To(Succeed())
	Eventually(func() bool {
		return allowed(user, authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: "kubevirt.io", Resource: "virtualmachineinstances"})
	}).Should(BeTrue(), "the API server's RBAC cache learns of %s's binding", name)
}

// advertisedSlots is the macOS slot count a node's allocatable says.
func advertisedSlots(g Gomega, node string) int64 {
	n := &corev1.Node{}
	g.Expect(admin.Get(context.Background(), types.NamespacedName{Name: node}, n)).To(Succeed())
	q := n.Status.Allocatable[corev1.ResourceName(macvirtv1alpha1.ResourceMacOSSlots)]
	return q.Value()
}

// appleNodeWithRoom labels the node the simulator runs every instance on
// (this suite's sandbox schedules by no slots) as Apple hardware with the
// most slots a node may advertise, so that slots taken away would show
// while every Mac of the suite still fits; the cleanup puts it back.
func appleNodeWithRoom() string {
	GinkgoHelper()
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: simulator.DefaultNodeName}}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(node), node); apierrors.IsNotFound(err) {
		Expect(admin.Create(ctx, node)).To(Succeed())
	} else {
		Expect(err).NotTo(HaveOccurred())
	}
	patch := func(labels, annotations any) {
		body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels, "annotations": annotations}})
		Expect(err).NotTo(HaveOccurred())
		Expect(admin.Patch(ctx, node, client.RawPatch(types.MergePatchType, body))).To(Succeed())
	}
	patch(map[string]any{macvirtv1alpha1.LabelAppleHardware: "true"},
		map[string]any{macvirtv1alpha1.AnnotationMacOSSlots: fmt.Sprint(macvirtv1alpha1.MaxMacOSSlots)})
	DeferCleanup(func() {
		patch(map[string]any{macvirtv1alpha1.LabelAppleHardware: nil}, map[string]any{macvirtv1alpha1.AnnotationMacOSSlots: nil})
	})
	Eventually(func(g Gomega) {
		g.Expect(advertisedSlots(g, node.Name)).To(BeNumerically("==", macvirtv1alpha1.MaxMacOSSlots))
	}).Should(Succeed(), "node %s advertises its slots", node.Name)
	return node.Name
}

var _ = Describe("A hostile tenant", Ordered, func() {
	ctx := context.Background()

	It("cannot take an Apple node's macOS slots away with VMIs labelled as macvirt's", func() {
		grantVMs("mallory", "evil")
		node := appleNodeWithRoom()
		before := advertisedSlots(Default, node)
		for i := range macvirtv1alpha1.DefaultMacOSSlots {
			vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("squatter-%d", i), Namespace: "evil",
				Labels: map[string]string{macvirtv1alpha1.LabelMachine: "squatter"}},
				Spec: kubevirtv1.VirtualMachineInstanceSpec{
					Tolerations: []corev1.Toleration{{Key: macvirtv1alpha1.LabelAppleHardware, Operator: corev1.TolerationOpExists}},
					Domain: kubevirtv1.DomainSpec{Resources: kubevirtv1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}}}}}
			Expect(as("mallory").Create(ctx, vmi)).To(Succeed())
			DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, vmi))).To(Succeed()) })
		}
		By("the squatters run on the node")
		Eventually(func(g Gomega) {
			for i := range macvirtv1alpha1.DefaultMacOSSlots {
				v := &kubevirtv1.VirtualMachineInstance{}
				g.Expect(admin.Get(ctx, types.NamespacedName{Namespace: "evil", Name: fmt.Sprintf("squatter-%d", i)}, v)).To(Succeed())
				g.Expect(v.Status.NodeName).To(Equal(node))
				g.Expect(v.Status.Phase).To(Equal(kubevirtv1.Running))
			}
		}).Should(Succeed())
		By("and the node keeps its slots")
		Consistently(func(g Gomega) {
			g.Expect(advertisedSlots(g, node)).To(Equal(before), "node %s lost slots to a tenant's VMIs", node)
		}, "8s", "250ms").Should(Succeed())
	})
})
