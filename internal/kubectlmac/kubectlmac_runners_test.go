package kubectlmac

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

func TestRunnersListsSetsAndTheirJobs(t *testing.T) {
	s := runtime.NewScheme()
	if err := macvirtv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	started := metav1.NewTime(now.Add(-3 * time.Minute))
	set := &macvirtv1alpha1.MacRunnerSet{ObjectMeta: metav1.ObjectMeta{Name: "ios", Namespace: "team"},
		Spec: macvirtv1alpha1.MacRunnerSetSpec{ScaleSetName: "macos-xcode", MaxRunners: 5}}
	set.Status = macvirtv1alpha1.MacRunnerSetStatus{AssignedJobs: 3, Runners: 3, Idle: 1,
		FleetStatus: macvirtv1alpha1.FleetStatus{Desired: 3, Pending: 1, Running: 1},
		RunnerStatuses: []macvirtv1alpha1.RunnerStatus{
			{Name: "ios-abcde", State: macvirtv1alpha1.RunnerRunning, Since: &started,
				Job: &macvirtv1alpha1.RunnerJob{ID: "42", DisplayName: "test", Repository: "acme/app", StartedAt: &started}},
			{Name: "ios-fghij", State: macvirtv1alpha1.RunnerProvisioning, Message: "waiting for a Mac"},
		},
		LastGitHubError: &macvirtv1alpha1.ServiceError{Time: metav1.NewTime(now), StatusCode: 503, Message: "503 Service Unavailable"}}
	meta.SetStatusCondition(&set.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: macvirtv1alpha1.ReasonGitHubUnavailable, Message: "GitHub answered 503"})
	var out bytes.Buffer
	env := &Env{Client: fake.NewClientBuilder().WithScheme(s).WithObjects(set).Build(), Namespace: "team",
		Streams: Streams{Out: &out, Err: &out}, Now: func() time.Time { return now }}
	if code, err := (runnersCmd{}).run(context.Background(), env, nil); code != 0 || err != nil {
		t.Fatalf("runners: %d %v", code, err)
	}
	got := out.String()
	for _, want := range []string{
		"ios          macos-xcode   3      3         1         1      1         5     False (GitHubUnavailable)",
		"ios: GitHub answered 503",
		"ios: GitHub said at 12:00:00: 503 Service Unavailable",
		"ios-abcde   Running        42 (test)   acme/app     3m    ",
		"ios-fghij   Provisioning   <none>      <none>       -     waiting for a Mac",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("runners output lacks %q:\n%s", want, got)
		}
	}
	out.Reset()
	env.Namespace = "empty"
	if code, err := (runnersCmd{}).run(context.Background(), env, nil); code != 0 || err != nil || !strings.Contains(out.String(), "No runner sets in namespace empty.") {
		t.Fatalf("runners in an empty namespace: %d %v %q", code, err, out.String())
	}
}
