package v1alpha1

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

func TestValidateMacRunnerSet(t *testing.T) {
	set := func(url, dir string, labels ...string) *macvirtv1alpha1.MacRunnerSet {
		return &macvirtv1alpha1.MacRunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ci", Name: "ios"},
			Spec: macvirtv1alpha1.MacRunnerSetSpec{GitHub: macvirtv1alpha1.GitHubRunnerTarget{URL: url, CredentialsSecretName: "gh"},
				ClassName: "sonoma", MaxRunners: 2, Labels: labels, Runner: macvirtv1alpha1.RunnerInstall{Directory: dir}}}
	}
	cases := []struct {
		name      string
		set       *macvirtv1alpha1.MacRunnerSet
		err, warn string
	}{
		{name: "an organisation", set: set("https://github.com/acme", "")},
		{name: "a repository with a runner directory", set: set("https://github.com/acme/app", "/opt/actions-runner")},
		{name: "extra labels on github.com", set: set("https://github.com/acme", "", "xcode-16")},
		{name: "extra labels on GHES warn", set: set("https://ghe.example/acme", "", "xcode-16"), warn: "DistributedTask.AllowRunnerScaleSetCustomLabels"},
		{name: "an enterprise", set: set("https://github.com/enterprises/big", ""), err: "spec.github.url"},
		{name: "not an address", set: set("acme", ""), err: "spec.github.url"},
		{name: "a quote in the directory", set: set("https://github.com/acme", "x'; rm -rf ~; '"), err: "spec.runner.directory"},
		{name: "a parent in the directory", set: set("https://github.com/acme", "../other"), err: "spec.runner.directory"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs, warns := ValidateMacRunnerSet(tc.set)
			if tc.err == "" && len(errs) > 0 {
				t.Fatalf("refused: %v", errs)
			}
			if tc.err != "" && (len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.err)) {
				t.Fatalf("errors %v, want one naming %s", errs, tc.err)
			}
			if got := strings.Join(warns, "\n"); (tc.warn == "") != (got == "") || !strings.Contains(got, tc.warn) {
				t.Fatalf("warnings %q, want %q", got, tc.warn)
			}
		})
	}
}
