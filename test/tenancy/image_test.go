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

package tenancy_test

import (
	"context"
	"slices"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

var _ = Describe("Capturing images", func() {
	ctx := context.Background()
	image := func(name string, src macvirtv1alpha1.ImageSource) *macvirtv1alpha1.MacImage {
		return &macvirtv1alpha1.MacImage{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: macvirtv1alpha1.MacImageSpec{Source: src}}
	}
	claimSource := func(c *macvirtv1alpha1.MacClaim) macvirtv1alpha1.ImageSource {
		return macvirtv1alpha1.ImageSource{Claim: &macvirtv1alpha1.NamespacedName{Namespace: c.Namespace, Name: c.Name}}
	}

	It("is for cluster admins: tenants may not create images, and an image editor may not capture a Mac they may not write", func() {
		By("no shipped role aggregated into admin, edit or view names MacImages")
		for _, file := range tenantRoleFiles() {
			for _, obj := range shipped(file) {
				role, ok := obj.(*rbacv1.ClusterRole)
				if !ok || (role.Labels["rbac.authorization.k8s.io/aggregate-to-edit"] != "true" &&
					role.Labels["rbac.authorization.k8s.io/aggregate-to-admin"] != "true" && role.Labels["rbac.authorization.k8s.io/aggregate-to-view"] != "true") {
					continue
				}
				for _, rule := range role.Rules {
					Expect(slices.Contains(rule.Resources, "macimages") || slices.Contains(rule.Resources, "*")).To(BeFalse(),
						"%s (%s) grants tenants MacImages", role.Name, file)
				}
			}
		}
		for _, user := range []string{"alice", "mallory"} {
			for _, verb := range []string{"create", "update", "patch", "delete"} {
				Expect(allowed(user, authorizationv1.ResourceAttributes{Verb: verb, Group: "macvirt.io", Resource: "macimages"})).To(BeFalse(),
					"the shipped roles let %s %s images", user, verb)
			}
		}

		By("alice, with every tenant role and the built-in edit role in team-a, may not capture her own claim")
		Expect(admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice-edit", Namespace: "team-a"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "alice"}}})).To(Succeed())
		golden := claimFor("alice", "golden")
		machine := machineOf(golden)
		forbidden(as("alice").Create(ctx, image("alices", claimSource(golden))))

		By("dave, given the image editor role cluster-wide but no rights on claims or machines, is refused by the webhook")
		editor := ""
		for _, obj := range shipped("macimage_editor_role.yaml") {
			editor = obj.GetName()
		}
		Expect(admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "dave-images"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: editor},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "dave"}}})).To(Succeed())
		Eventually(func() bool {
			return allowed("dave", authorizationv1.ResourceAttributes{Verb: "create", Group: "macvirt.io", Resource: "macimages"})
		}).Should(BeTrue())
		Expect(as("dave").Create(ctx, image("daves", claimSource(golden)))).To(MatchError(ContainSubstring(
			`spec.source.claim: Forbidden: dave may not get macclaims.macvirt.io "golden" in namespace team-a; ` +
				`capturing stops the Mac and publishes its disk to the whole cluster, so only cluster admins capture images`)))
		Expect(as("dave").Create(ctx, image("daves", macvirtv1alpha1.ImageSource{
			Machine: &macvirtv1alpha1.NamespacedName{Namespace: machine.Namespace, Name: machine.Name}}))).To(MatchError(ContainSubstring(
			`spec.source.machine: Forbidden: dave may not update macmachines.macvirt.io in namespace ` + machine.Namespace + `; ` +
				`capturing stops the Mac and publishes its disk to the whole cluster, so only cluster admins capture images`)))

		By("a cluster admin captures alice's Mac")
		img := image("golden", claimSource(golden))
		Expect(admin.Create(ctx, img)).To(Succeed())
		Expect(admin.Delete(ctx, img)).To(Succeed())
		Eventually(func() error { return admin.Get(ctx, client.ObjectKeyFromObject(img), &macvirtv1alpha1.MacImage{}) }).
			Should(MatchError(ContainSubstring("not found")), "the operator, under the shipped rules, lets a deleted image go")
		Expect(as("alice").Delete(ctx, golden)).To(Succeed())
	})
})
