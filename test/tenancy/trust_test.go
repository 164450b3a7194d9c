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
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/operator"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
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

	It("cannot have a machine of hers rendered from a kept revision of its class", func() {
		m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "old-recipe", Namespace: "evil"},
			Spec: macvirtv1alpha1.MacMachineSpec{ClassName: "sonoma", ClassRevision: "0123456789", Running: ptrTo(false)}}
		refusedNaming(as("mallory").Create(ctx, m), "spec.classRevision")
	})

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

// classEditor binds user, cluster-wide, to the shipped MacClass editor role
// and nothing else: someone trusted to write recipes, not to read Secrets
// or clone disks of namespaces they are no member of.
func classEditor(user string) client.Client {
	GinkgoHelper()
	ctx := context.Background()
	Expect(admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user + "-class-editor"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "macclass-editor-role"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}})).To(Succeed())
	Eventually(func() bool {
		return allowed(user, authorizationv1.ResourceAttributes{Verb: "create", Group: "macvirt.io", Resource: "macclasses"})
	}).Should(BeTrue(), "the API server's RBAC cache learns of %s's binding", user)
	return as(user)
}

// refusedFor expects an admission refusal whose causes name field and
// whose message says so.
func refusedFor(err error, field, says string) {
	GinkgoHelper()
	Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
	var fields []string
	for _, c := range err.(apierrors.APIStatus).Status().Details.Causes {
		fields = append(fields, c.Field)
	}
	Expect(fields).To(ContainElement(field), "refused, but not for %s: %v", field, err)
	Expect(err.Error()).To(ContainSubstring(says))
}

var _ = Describe("A class editor who is not cluster-admin", Ordered, func() {
	ctx := context.Background()
	var carol client.Client
	var sample *macvirtv1alpha1.MacClass

	BeforeAll(func() {
		carol = classEditor("carol")
		sample = &macvirtv1alpha1.MacClass{}
		Expect(admin.Get(ctx, types.NamespacedName{Name: "sonoma"}, sample)).To(Succeed())
		Expect(admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "another-operators-token", Namespace: operatorNamespace()},
			StringData: map[string]string{"token": "not for class authors"}})).To(Succeed())
	})

	recipe := func(name string, change func(*macvirtv1alpha1.MacClass)) *macvirtv1alpha1.MacClass {
		c := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: *sample.Spec.DeepCopy()}
		change(c)
		return c
	}

	It("cannot make the operator read a Secret of its namespace for a class's OSK", func() {
		c := recipe("steal-osk", func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Hardware.SMC = macvirtv1alpha1.SMCSpec{Mode: macvirtv1alpha1.SMCModeAppleSMC,
				OSKSecretRef: &macvirtv1alpha1.SecretKeyRef{Namespace: operatorNamespace(), Name: "another-operators-token", Key: "token"}}
		})
		refusedFor(carol.Create(ctx, c), "spec.hardware.smc.oskSecretRef", "carol may not get secrets another-operators-token in namespace "+operatorNamespace())
	})

	It("cannot make the operator clone another tenant's disk or a golden image she may not clone", func() {
		c := recipe("steal-disk", func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Image.SourceRef = nil
			c.Spec.Image.Source = &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "team-b", Name: "bobs-data"}}
		})
		refusedFor(carol.Create(ctx, c), "spec.image.source.pvc", "carol may not create datavolumes.cdi.kubevirt.io/source bobs-data in namespace team-b")
		refusedFor(carol.Create(ctx, recipe("sample-copy", func(*macvirtv1alpha1.MacClass) {})), "spec.image.sourceRef",
			"may not get datasources.cdi.kubevirt.io sonoma in namespace macvirt-images")
	})

	It("cannot make CDI send a Secret of a machine's namespace to a server of hers", func() {
		c := recipe("steal-by-import", func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Image.SourceRef = nil
			secret := "registry-credentials" //nolint:gosec // the name of a Secret in each machine's namespace, not a credential
			c.Spec.Image.Source = &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "https://carol.example.com/sonoma.img", SecretRef: secret}}
		})
		refusedFor(carol.Create(ctx, c), "spec.image.source.http.secretRef", "a class's disk source may not name a Secret")
	})

	It("may name what she may use, and edit a class whose references she could not have named", func() {
		images := sample.Spec.Image.SourceRef.Namespace
		Expect(admin.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "carol-clone", Namespace: *images},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"cdi.kubevirt.io"}, Resources: []string{"datasources"}, Verbs: []string{"get"}},
				{APIGroups: []string{"cdi.kubevirt.io"}, Resources: []string{"datavolumes/source"}, Verbs: []string{"create"}}}})).To(Succeed())
		Expect(admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "carol-clone", Namespace: *images},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "carol-clone"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "carol"}}})).To(Succeed())
		Eventually(func() bool {
			return allowed("carol", authorizationv1.ResourceAttributes{Namespace: *images, Verb: "create", Group: "cdi.kubevirt.io", Resource: "datavolumes", Subresource: "source"})
		}).Should(BeTrue())
		c := recipe("carols", func(*macvirtv1alpha1.MacClass) {})
		Expect(carol.Create(ctx, c)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, c))).To(Succeed()) })

		By("an admin's class naming the OSK Secret she may not read: she edits its description")
		osk := recipe("admins-applesmc", func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Hardware.SMC = macvirtv1alpha1.SMCSpec{Mode: macvirtv1alpha1.SMCModeAppleSMC,
				OSKSecretRef: &macvirtv1alpha1.SecretKeyRef{Namespace: operatorNamespace(), Name: "apple-osk", Key: "osk"}}
		})
		Expect(admin.Create(ctx, osk)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, osk))).To(Succeed()) })
		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(osk), osk)).To(Succeed())
			g.Expect(osk.Status.ObservedGeneration).To(Equal(osk.Generation))
		}).Should(Succeed(), "the operator checks the class's sources, its OSK Secret among them")
		edit := func(change func(*macvirtv1alpha1.MacClass)) error {
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				if err := carol.Get(ctx, client.ObjectKeyFromObject(osk), osk); err != nil {
					return err
				}
				change(osk)
				return carol.Update(ctx, osk)
			})
		}
		Expect(edit(func(c *macvirtv1alpha1.MacClass) { c.Spec.Description = "edited by carol" })).To(Succeed())
		By("but not its Secret")
		refusedFor(edit(func(c *macvirtv1alpha1.MacClass) { c.Spec.Hardware.SMC.OSKSecretRef.Name = "another-operators-token" }),
			"spec.hardware.smc.oskSecretRef", "carol may not get secrets another-operators-token")
	})

	It("cannot reach another namespace's disk through a DataSource of hers that names it", func() {
		ctx := context.Background()
		Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "carols-images"}})).To(Succeed())
		Expect(admin.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "images", Namespace: "carols-images"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"cdi.kubevirt.io"}, Resources: []string{"datasources"}, Verbs: []string{"get", "create", "update"}},
				{APIGroups: []string{"cdi.kubevirt.io"}, Resources: []string{"datavolumes/source"}, Verbs: []string{"create"}}}})).To(Succeed())
		Expect(admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "carol-images", Namespace: "carols-images"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "images"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "carol"}}})).To(Succeed())
		Eventually(func() bool {
			return allowed("carol", authorizationv1.ResourceAttributes{Namespace: "carols-images", Verb: "create", Group: "cdi.kubevirt.io", Resource: "datasources"})
		}).Should(BeTrue())
		ds := &cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Name: "sonoma", Namespace: "carols-images"},
			Spec: cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "team-b", Name: "bobs-data"}}}}
		Expect(carol.Create(ctx, ds)).To(Succeed())
		images := "carols-images"
		c := recipe("through-a-datasource", func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Image.SourceRef = &cdiv1.DataVolumeSourceRef{Kind: cdiv1.DataVolumeDataSource, Namespace: &images, Name: "sonoma"}
		})
		Expect(carol.Create(ctx, c)).To(Succeed(), "she may clone from her own namespace")
		DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, c))).To(Succeed()) })
		m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "through-a-datasource", Namespace: "team-a"},
			Spec: macvirtv1alpha1.MacMachineSpec{ClassName: c.Name, Running: ptrTo(false)}}
		Expect(admin.Create(ctx, m)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, m))).To(Succeed()) })
		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
			cond := meta.FindStatusCondition(m.Status.Conditions, macvirtv1alpha1.ConditionStalled)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Reason).To(Equal(macvirtv1alpha1.ReasonInvalidClass))
			g.Expect(cond.Message).To(ContainSubstring("DataSource carols-images/sonoma names PVC team-b/..., outside its own namespace"))
		}).Should(Succeed())
		var dvs cdiv1.DataVolumeList
		Expect(admin.List(ctx, &dvs, client.InNamespace("team-a"))).To(Succeed())
		for _, dv := range dvs.Items {
			Expect(dv.Spec.SourceRef).To(Or(BeNil(), HaveField("Name", Not(Equal("sonoma")))), "a DataVolume clones through her DataSource: %s", dv.Name)
		}
	})
})

// operatorNamespace is the namespace the operator runs in, whose Secrets
// it may read.
func operatorNamespace() string { return operator.DefaultNamespace }
