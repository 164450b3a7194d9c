package operator

import (
	"testing"
)

func TestChooseHookImage(t *testing.T) {
	defaultImage := DefaultHookImage
	env := func(vars map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	olm := env(map[string]string{
		RelatedImageHookEnv:           "registry.example/hook@sha256:19",
		RelatedImageHookEnvFor("1.8"): "registry.example/hook@sha256:18",
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
		{name: "OLM, the built-against minor", env: olm, kubevirtVersion: "v" + HookKubeVirtMinor + ".3", want: "registry.example/hook@sha256:19"},
		{name: "OLM, an older minor by its own variable", env: olm, kubevirtVersion: "v1.8.2", want: "registry.example/hook@sha256:18"},
		{name: "OLM without the minor's variable: the default's tag for it", env: olm, kubevirtVersion: "v1.7.0", want: defaultImage + "-kubevirt1.7"},
		{name: "kustomize, the built-against minor", kubevirtVersion: "v" + HookKubeVirtMinor + ".0", want: defaultImage},
		{name: "kustomize, an older minor", kubevirtVersion: "1.8.1", want: defaultImage + "-kubevirt1.8"},
		{name: "a release candidate", kubevirtVersion: "v1.8.0-rc.1", want: defaultImage + "-kubevirt1.8"},
		{name: "unknown version: the default, warned", env: olm, kubevirtVersion: "", want: "registry.example/hook@sha256:19", warning: true},
		{name: "garbage version: the default, warned", kubevirtVersion: "vX.Y", want: defaultImage, warning: true},
		{name: "an unsupported minor: the default, warned", kubevirtVersion: "v1.2.0", want: defaultImage, warning: true},
		{name: "an empty variable is no variable", env: env(map[string]string{RelatedImageHookEnv: ""}), kubevirtVersion: "v" + HookKubeVirtMinor + ".0", want: defaultImage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ChooseHookImage(tc.explicit, tc.env, tc.kubevirtVersion)
			if got.Image != tc.want || got.Warning != tc.warning {
				t.Errorf("ChooseHookImage(%q, env, %q) = %+v, want image %s warning %v", tc.explicit, tc.kubevirtVersion, got, tc.want, tc.warning)
			}
			if got.Why == "" {
				t.Error("no reason given")
			}
		})
	}
}

func TestRelatedImageHookEnvFor(t *testing.T) {
	if got := RelatedImageHookEnvFor("1.8"); got != "RELATED_IMAGE_DOMAIN_HOOK_KUBEVIRT_1_8" {
		t.Errorf("RelatedImageHookEnvFor(1.8) = %s", got)
	}
	if got := HookImageTagFor("r/hook:v1", HookKubeVirtMinor); got != "r/hook:v1" {
		t.Errorf("HookImageTagFor(the built-against minor) = %s", got)
	}
}
