/*
Copyright 2026 The macvirt Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

import (
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// shippedClusterRole creates, under a name of its own, the ClusterRole a
// file of config/rbac ships, and binds it to user cluster-wide.
func shippedClusterRole(file, user string) {
	raw, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "config", "rbac", file)) //nolint:gosec // a file of the repository's config/rbac.
	Expect(err).NotTo(HaveOccurred())
	role := &rbacv1.ClusterRole{}
	Expect(yaml.Unmarshal(raw, role)).To(Succeed())
	role.Name = uniqueName(role.Name)
	Expect(k8sClient.Create(suiteCtx, role)).To(Succeed())
	cleanup(role)
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}}
	Expect(k8sClient.Create(suiteCtx, binding)).To(Succeed())
	cleanup(binding)
}

// grant lets user do verbs on macvirt.io's resource in ns.
func grant(user, ns, resource string, verbs ...string) {
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: uniqueName(user + "-" + resource), Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{macvirtv1alpha1.GroupVersion.Group}, Resources: []string{resource}, Verbs: verbs}}}
	Expect(k8sClient.Create(suiteCtx, role)).To(Succeed())
	Expect(k8sClient.Create(suiteCtx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}})).To(Succeed())
}

// impersonatingWithWarnings is a client that acts as user and records the
// admission warnings it receives.
func impersonatingWithWarnings(user string) client.Client {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	c.WarningHandler = warnings
	cl, err := client.New(c, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	return cl
}

var _ = Describe("Capturing an image", func() {
	const webhook = "vmacimage-v1alpha1.macvirt.io"

	It("is refused to whoever may not read the claim or update its machine, naming them; an admin is warned the Mac stops", func() {
		tenantNS, poolNS := newNamespace(nil), newNamespace(nil)
		By("a claim bound to a running machine of the pools' namespace")
		machine := minimalMachine()
		machine.Namespace, machine.Name = poolNS, uniqueName("ci")
		Expect(k8sClient.Create(suiteCtx, machine)).To(Succeed())
		claim := minimalClaim()
		claim.Namespace, claim.Name = tenantNS, "alice-mac"
		Expect(k8sClient.Create(suiteCtx, claim)).To(Succeed())
		claim.Status.Phase = macvirtv1alpha1.ClaimReady
		claim.Status.MachineRef = &macvirtv1alpha1.ObjectRef{Namespace: poolNS, Name: machine.Name, UID: machine.UID}
		Expect(k8sClient.Status().Update(suiteCtx, claim)).To(Succeed())
		machine.Spec.ClaimRef = &macvirtv1alpha1.ObjectRef{Namespace: tenantNS, Name: claim.Name, UID: claim.UID}
		Expect(k8sClient.Update(suiteCtx, machine)).To(Succeed())
		machine.Status.Phase = macvirtv1alpha1.MachineReady
		Expect(k8sClient.Status().Update(suiteCtx, machine)).To(Succeed())

		image := func() *macvirtv1alpha1.MacImage {
			img := imageOfClaim(tenantNS, claim.Name)
			img.Name = uniqueName("xcode")
			return img
		}

		By("carol, with the shipped image editor role only, may not read the claim")
		shippedClusterRole("macimage_editor_role.yaml", "carol")
		carol := impersonatingWithWarnings("carol")
		var err error
		Eventually(func() string { err = carol.Create(suiteCtx, image(), client.DryRunAll); return denialOf(err).byWebhook }).
			Should(Equal(webhook), "RBAC lets carol create images once the API server learns of the binding")
		expectDenied(err, webhook, "spec.source.claim",
			`carol may not get macclaims.macvirt.io "alice-mac" in namespace `+tenantNS+`; capturing stops the Mac and publishes its disk to the whole cluster, so only cluster admins capture images`)

		By("allowed to read the claim, she may still not update its machine in the pools' namespace")
		grant("carol", tenantNS, "macclaims", "get")
		Eventually(func() string { err = carol.Create(suiteCtx, image(), client.DryRunAll); return errorText(err) }).
			Should(ContainSubstring("may not update"))
		expectDenied(err, webhook, "spec.source.claim",
			"carol may not update macmachines.macvirt.io in namespace "+poolNS+"; capturing stops the Mac")
		err = carol.Create(suiteCtx, imageOfMachine(poolNS, machine.Name), client.DryRunAll)
		expectDenied(err, webhook, "spec.source.machine", "carol may not update macmachines.macvirt.io in namespace "+poolNS)

		By("allowed both, she captures it, and is told the claim's Mac stops")
		grant("carol", poolNS, "macmachines", "update")
		img := image()
		var warns []string
		Eventually(func() error {
			warns = warnings.during(func() { err = carol.Create(suiteCtx, img) })
			return err
		}).Should(Succeed())
		cleanup(img)
		Expect(warns).To(ContainElement(ContainSubstring("capturing stops " + tenantNS + "/alice-mac's Mac until the copy is done")))

		By("a claim not bound yet is refused, saying when to capture it")
		unbound := minimalClaim()
		unbound.Namespace, unbound.Name = tenantNS, "waiting"
		Expect(k8sClient.Create(suiteCtx, unbound)).To(Succeed())
		expectDenied(k8sClient.Create(suiteCtx, imageOfClaim(tenantNS, "waiting"), client.DryRunAll), webhook, "spec.source.claim",
			"claim "+tenantNS+"/waiting is not bound to a machine; capture it once `kubectl get macclaim` shows it Bound")
	})

	It("refuses a name that is not a DNS label, and two sources", func() {
		img := imageOfMachine("macvirt-pools", "ci-0")
		img.Name = uniqueName("xcode.16")
		expectDenied(k8sClient.Create(suiteCtx, img, client.DryRunAll), webhook, "metadata.name", "the published DataSource's")
		both := imageOfMachine("macvirt-pools", "ci-0")
		both.Spec.Source.Claim = &macvirtv1alpha1.NamespacedName{Namespace: "dev", Name: "alice-mac"}
		expectDenied(k8sClient.Create(suiteCtx, both, client.DryRunAll), "", "spec.source", "set exactly one of source.claim or source.machine")
	})
})
