package v1alpha1

import (
	"strings"
	"testing"

	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// TestClassRights lists, per reference a class makes, the right its author
// must hold, and refuses the references no right can vouch for.
func TestClassRights(t *testing.T) {
	ns := func(s string) *string { return &s }
	images := &cdiv1.DataVolumeSourceRef{Kind: "DataSource", Namespace: ns("macvirt-images"), Name: "sonoma"}
	for _, tc := range []struct {
		name    string
		change  func(*macvirtv1alpha1.MacClass)
		rights  []string
		refused []string
	}{
		{"DataSources of a namespace", func(*macvirtv1alpha1.MacClass) {}, []string{
			"get cdi.kubevirt.io/datasources/ macvirt-images/sonoma", "create cdi.kubevirt.io/datavolumes/source macvirt-images/",
			"get cdi.kubevirt.io/datasources/ macvirt-images/opencore"}, nil},
		{"a PVC and a snapshot", func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Image.SourceRef = nil
			c.Spec.Image.Source = &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "team-b", Name: "data"}}
			c.Spec.Bootloader.SourceRef = nil
			c.Spec.Bootloader.Source = &cdiv1.DataVolumeSource{Snapshot: &cdiv1.DataVolumeSourceSnapshot{Namespace: "golden", Name: "oc"}}
		}, []string{"create cdi.kubevirt.io/datavolumes/source team-b/", "create cdi.kubevirt.io/datavolumes/source golden/"}, nil},
		{"the OSK Secret", func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Hardware.SMC = macvirtv1alpha1.SMCSpec{Mode: macvirtv1alpha1.SMCModeAppleSMC,
				OSKSecretRef: &macvirtv1alpha1.SecretKeyRef{Namespace: "macvirt-system", Name: "osk", Key: "osk"}}
		}, []string{"get /secrets/ macvirt-system/osk"}, nil},
		{"an import's credentials", func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Image.SourceRef = nil
			c.Spec.Image.Source = &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "https://x", SecretRef: "creds", CertConfigMap: "ca"}}
		}, nil, []string{"spec.image.source.http.secretRef", "spec.image.source.http.certConfigMap"}},
		{"a refreshed registry's credentials, in the images namespace", func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Image.SourceRef = nil
			c.Spec.Image.Source = &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: ns("docker://x"), SecretRef: ns("pull")}}
			c.Spec.Image.Refresh = &macvirtv1alpha1.ImageRefresh{Schedule: "0 3 * * *"}
		}, []string{"get /secrets/ imgs/pull"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &macvirtv1alpha1.MacClass{}
			c.Spec.Image.SourceRef = images.DeepCopy()
			c.Spec.Bootloader.SourceRef = &cdiv1.DataVolumeSourceRef{Kind: "DataSource", Namespace: ns("macvirt-images"), Name: "opencore"}
			tc.change(c)
			rights, refused := classRights(c, "imgs")
			var got []string
			for _, r := range rights {
				a := r.attrs
				got = append(got, a.Verb+" "+a.Group+"/"+a.Resource+"/"+a.Subresource+" "+a.Namespace+"/"+a.Name)
			}
			for _, want := range tc.rights {
				if !strings.Contains(strings.Join(got, "\n"), want) {
					t.Errorf("rights %q; want %q among them", got, want)
				}
			}
			var fields []string
			for _, e := range refused {
				fields = append(fields, e.Field)
			}
			if strings.Join(fields, ",") != strings.Join(tc.refused, ",") {
				t.Errorf("refused %q; want %q", fields, tc.refused)
			}
		})
	}
	old, _ := classRights(&macvirtv1alpha1.MacClass{Spec: macvirtv1alpha1.MacClassSpec{Image: macvirtv1alpha1.ImageSpec{DiskSource: macvirtv1alpha1.DiskSource{SourceRef: images}}}}, "")
	same, _ := classRights(&macvirtv1alpha1.MacClass{Spec: macvirtv1alpha1.MacClassSpec{Image: macvirtv1alpha1.ImageSpec{DiskSource: macvirtv1alpha1.DiskSource{SourceRef: images}}}}, "")
	if n := newRights(old, same); len(n) != 0 {
		t.Errorf("an unchanged reference asks again: %+v", n)
	}
}
