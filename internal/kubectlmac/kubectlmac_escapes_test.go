package kubectlmac

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// evil is a guest's text as an operator before the endpoint cleaned it
// recorded it: a colour, a window title, a line erased and rewritten.
const evil = "\x1b[31mdenied\x1b[0m\x1b]0;pwned\x07\r\x1b[2Kall \u009b1mfine"

// evilShown is evil as kubectl mac prints it.
const evilShown = "deniedall fine"

// noTerminalControls fails the test if out holds anything a terminal acts
// on but newlines and tabs.
func noTerminalControls(t *testing.T, what, out string) {
	t.Helper()
	if i := strings.IndexFunc(out, func(r rune) bool { return r < 0x20 && r != '\n' && r != '\t' || r >= 0x7f && r <= 0x9f }); i >= 0 {
		t.Errorf("%s prints a control character at byte %d:\n%q", what, i, out)
	}
}

// Statuses an older operator wrote (or anyone who may write them) can hold
// a guest's escape sequences; kubectl mac prints their text without them.
func TestStatusTextIsPrintedWithoutEscapeSequences(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: "team", Generation: 1,
		CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
		Spec: macvirtv1alpha1.MacClaimSpec{ClassName: "sonoma", Bootstrap: &macvirtv1alpha1.Bootstrap{}}}
	exit := int32(1)
	claim.Status.Phase = macvirtv1alpha1.ClaimBound
	claim.Status.Bootstrap = []macvirtv1alpha1.BootstrapPartStatus{{Name: macvirtv1alpha1.BootstrapPartClaim,
		TaskOutcome: macvirtv1alpha1.TaskOutcome{State: macvirtv1alpha1.BootstrapFailed, ExitCode: &exit,
			Message: evil, OutputTail: "step 1\n" + evil + "\n"}}}
	for _, c := range []metav1.Condition{
		{Type: macvirtv1alpha1.ConditionBootstrapSucceeded, Status: metav1.ConditionFalse, Reason: macvirtv1alpha1.ReasonBootstrapFailed,
			Message: "the claim's bootstrap exited 1: " + evil},
		{Type: macvirtv1alpha1.ConditionHostDraining, Status: metav1.ConditionTrue, Reason: macvirtv1alpha1.ReasonEvacuationRequested,
			Message: evil},
		{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: macvirtv1alpha1.ReasonGuestConfigFailed,
			Message: "the guest agent could not apply what it was sent: " + evil, ObservedGeneration: 1},
	} {
		meta.SetStatusCondition(&claim.Status.Conditions, c)
	}
	set := &macvirtv1alpha1.MacRunnerSet{ObjectMeta: metav1.ObjectMeta{Name: "ios", Namespace: "team"}}
	set.Status.RunnerStatuses = []macvirtv1alpha1.RunnerStatus{{Name: "ios-abcde", State: macvirtv1alpha1.RunnerRunning, Message: evil,
		Job: &macvirtv1alpha1.RunnerJob{ID: "42", DisplayName: evil, Repository: "acme/app"}}}
	set.Status.LastGitHubError = &macvirtv1alpha1.ServiceError{Time: metav1.NewTime(now), Message: evil}
	meta.SetStatusCondition(&set.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: macvirtv1alpha1.ReasonGitHubUnavailable, Message: evil})
	img := &macvirtv1alpha1.MacImage{ObjectMeta: metav1.ObjectMeta{Name: "xcode-16", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))}}
	img.Status.Phase = macvirtv1alpha1.ImageCopying
	meta.SetStatusCondition(&img.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: macvirtv1alpha1.ReasonCopying, Message: evil})

	var out bytes.Buffer
	env := &Env{Client: fake.NewClientBuilder().WithScheme(imageScheme(t)).WithObjects(claim, set, img).Build(), Namespace: "team",
		Streams: Streams{Out: &out, Err: &out}, Now: func() time.Time { return now }}
	for _, tc := range []struct {
		what string
		run  func() (int, error)
		want []string
	}{
		{"kubectl mac get", func() (int, error) { return getCmd{}.run(context.Background(), env, nil) }, []string{
			"build: host draining (EvacuationRequested): " + evilShown + "; save your work",
			"build: bootstrap Failed: the claim's bootstrap exited 1: " + evilShown + "\n"}},
		{"kubectl mac logs", func() (int, error) { return logsCmd{}.run(context.Background(), env, []string{"build"}) }, []string{
			"# claim's bootstrap: Failed, exit status 1 (" + evilShown + ")\n", "step 1\n" + evilShown + "\n"}},
		{"kubectl mac wait", func() (int, error) {
			last := ""
			code, _, err := claimSettled(env, claim, now, &last)
			return code, err
		}, []string{"  GuestConfigFailed: the guest agent could not apply what it was sent: " + evilShown + "\n"}},
		{"kubectl mac runners", func() (int, error) { return runnersCmd{}.run(context.Background(), env, nil) }, []string{
			"ios: " + evilShown + "\n", "ios: GitHub said at 12:00:00: " + evilShown + "\n", "42 (" + evilShown + ")", evilShown + "\n"}},
		{"kubectl mac image list", func() (int, error) { return listImages(context.Background(), env, nil) }, []string{
			"xcode-16: Copying: " + evilShown + "\n"}},
		{"kubectl mac image capture --wait", func() (int, error) {
			last := ""
			code, _, err := imageSettled(env, img, now, &last)
			return code, err
		}, []string{"  Copying: " + evilShown + "\n"}},
	} {
		out.Reset()
		if code, err := tc.run(); code != 0 || err != nil {
			t.Fatalf("%s: %d %v", tc.what, code, err)
		}
		got := out.String()
		noTerminalControls(t, tc.what, got)
		for _, want := range tc.want {
			if !strings.Contains(got, want) {
				t.Errorf("%s lacks %q:\n%q", tc.what, want, got)
			}
		}
	}

	// What ends waiting is an error, which Main prints.
	stalled := claim.DeepCopy()
	meta.SetStatusCondition(&stalled.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionStalled, Status: metav1.ConditionTrue,
		Reason: macvirtv1alpha1.ReasonGuestConfigFailed, Message: evil})
	last := ""
	if _, _, err := claimSettled(env, stalled, now, &last); err == nil {
		t.Error("a Stalled claim does not end waiting")
	} else {
		noTerminalControls(t, "kubectl mac wait on a Stalled claim", err.Error())
	}
	failed := img.DeepCopy()
	failed.Status.Phase = macvirtv1alpha1.ImageFailed
	if _, _, err := imageSettled(env, failed, now, &last); err == nil {
		t.Error("a failed image does not end waiting")
	} else {
		noTerminalControls(t, "kubectl mac image capture --wait on a failed image", err.Error())
	}
}
