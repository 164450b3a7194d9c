package install

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

func TestChooseImage(t *testing.T) {
	defaultImage := DefaultImage
	env := func(vars map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	olm := env(map[string]string{
		RelatedImageEnv:           "registry.example/hook@sha256:19",
		RelatedImageEnvFor("1.8"): "registry.example/hook@sha256:18",
	})
	for _, tc := range []struct {
		name            string
		explicit        string
		env             func(string) (string, bool)
		kubevirtVersion string
		want            string
		warning         bool
	}{
		{name: "the flag wins over everything", explicit: "mine:1", env: olm, kubevirtVersion: "v1.8.2", want: "mine:1"},
		{name: "OLM, the built-against minor", env: olm, kubevirtVersion: "v" + KubeVirtMinor + ".3", want: "registry.example/hook@sha256:19"},
		{name: "OLM, an older minor by its own variable", env: olm, kubevirtVersion: "v1.8.2", want: "registry.example/hook@sha256:18"},
		{name: "OLM without the minor's variable: the default's tag for it", env: olm, kubevirtVersion: "v1.7.0", want: defaultImage + "-kubevirt1.7"},
		{name: "kustomize, the built-against minor", kubevirtVersion: "v" + KubeVirtMinor + ".0", want: defaultImage},
		{name: "kustomize, an older minor", kubevirtVersion: "1.8.1", want: defaultImage + "-kubevirt1.8"},
		{name: "a release candidate", kubevirtVersion: "v1.8.0-rc.1", want: defaultImage + "-kubevirt1.8"},
		{name: "unknown version: the default, warned", env: olm, kubevirtVersion: "", want: "registry.example/hook@sha256:19", warning: true},
		{name: "garbage version: the default, warned", kubevirtVersion: "vX.Y", want: defaultImage, warning: true},
		{name: "an unsupported minor: the default, warned", kubevirtVersion: "v1.2.0", want: defaultImage, warning: true},
		{name: "an empty variable is no variable", env: env(map[string]string{RelatedImageEnv: ""}), kubevirtVersion: "v" + KubeVirtMinor + ".0", want: defaultImage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ChooseImage(tc.explicit, tc.env, tc.kubevirtVersion)
			if got.Image != tc.want || got.Warning != tc.warning {
				t.Errorf("ChooseImage(%q, env, %q) = %+v, want image %s warning %v", tc.explicit, tc.kubevirtVersion, got, tc.want, tc.warning)
			}
			if got.Why == "" {
				t.Error("no reason given")
			}
		})
	}
}

func TestRelatedImageEnvFor(t *testing.T) {
	if got := RelatedImageEnvFor("1.8"); got != "RELATED_IMAGE_DOMAIN_HOOK_KUBEVIRT_1_8" {
		t.Errorf("RelatedImageEnvFor(1.8) = %s", got)
	}
	if got := ImageTagFor("r/hook:v1", KubeVirtMinor); got != "r/hook:v1" {
		t.Errorf("ImageTagFor(the built-against minor) = %s", got)
	}
}

func TestWaitForKubeVirtVersion(t *testing.T) {
	s := runtime.NewScheme()
	kv := func(version string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("kubevirt.io/v1")
		u.SetKind("KubeVirt")
		u.SetNamespace("kubevirt")
		u.SetName("kubevirt")
		if version != "" {
			_ = unstructured.SetNestedField(u.Object, version, "status", "observedKubeVirtVersion")
		}
		return u
	}
	forbidden := interceptor.Funcs{List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
		return apierrors.NewForbidden(schema.GroupResource{Group: "kubevirt.io", Resource: "kubevirts"}, "",
			errors.New(`User "system:serviceaccount:macvirt-system:macvirt-controller-manager" cannot list resource "kubevirts"`))
	}}
	for _, tc := range []struct {
		name    string
		objs    []client.Object
		funcs   *interceptor.Funcs
		want    string
		wantErr string
		waits   bool
	}{
		{name: "reported", objs: []client.Object{kv("v1.8.2")}, want: "v1.8.2"},
		{name: "no KubeVirt CR: final", wantErr: "no KubeVirt CR"},
		{name: "not reported yet: waits, then says so", objs: []client.Object{kv("")}, wantErr: "has not reported", waits: true},
		{name: "listing refused: final, in the API server's words", funcs: &forbidden, wantErr: `cannot list resource "kubevirts"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithScheme(s).WithObjects(tc.objs...)
			if tc.funcs != nil {
				b = b.WithInterceptorFuncs(*tc.funcs)
			}
			c := b.Build()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			got, err := WaitForKubeVirtVersion(ctx, c, 50*time.Millisecond)
			if got != tc.want || (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("got %q, %v; want %q, an error with %q", got, err, tc.want, tc.wantErr)
			}
			if waited := ctx.Err() != nil; waited != tc.waits {
				t.Errorf("waited until the deadline: %v (after %s), want %v", waited, time.Since(start), tc.waits)
			}
		})
	}
}
