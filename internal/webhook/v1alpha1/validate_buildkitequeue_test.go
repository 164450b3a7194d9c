package v1alpha1

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

func TestValidateMacBuildkiteQueue(t *testing.T) {
	queue := func(endpoint, path string) *macvirtv1alpha1.MacBuildkiteQueue {
		return &macvirtv1alpha1.MacBuildkiteQueue{ObjectMeta: metav1.ObjectMeta{Namespace: "ci", Name: "ios"},
			Spec: macvirtv1alpha1.MacBuildkiteQueueSpec{Buildkite: macvirtv1alpha1.BuildkiteTarget{Queue: "macos", TokenSecretName: "bk", Endpoint: endpoint},
				ClassName: "sonoma", MaxAgents: 2, Agent: macvirtv1alpha1.BuildkiteAgentInstall{Path: path}}}
	}
	cases := []struct {
		name      string
		queue     *macvirtv1alpha1.MacBuildkiteQueue
		err, warn string
	}{
		{name: "buildkite.com", queue: queue("", "")},
		{name: "an endpoint and an agent path", queue: queue("https://agent.example/v3", "/opt/homebrew/bin/buildkite-agent")},
		{name: "plain http on loopback", queue: queue("http://127.0.0.1:8080/v3/", "bin/buildkite-agent")},
		{name: "plain http elsewhere warns", queue: queue("http://agent.example/v3", ""), warn: "unencrypted"},
		{name: "credentials in the endpoint", queue: queue("https://user:pw@agent.example/v3", ""), err: "spec.buildkite.endpoint"},
		{name: "not a URL", queue: queue("agent.example", ""), err: "spec.buildkite.endpoint"},
		{name: "a quote in the path", queue: queue("", "x'; rm -rf ~; '"), err: "spec.agent.path"},
		{name: "a space in the path", queue: queue("", "buildkite-agent --token x"), err: "spec.agent.path"},
		{name: "a parent in the path", queue: queue("", "../bin/buildkite-agent"), err: "spec.agent.path"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs, warns := ValidateMacBuildkiteQueue(tc.queue)
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
