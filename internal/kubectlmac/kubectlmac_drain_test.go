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

func TestGetTellsATenantTheirMacsHostIsDraining(t *testing.T) {
	s := runtime.NewScheme()
	if err := macvirtv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	draining := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: "team", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
		Spec: macvirtv1alpha1.MacClaimSpec{ClassName: "sonoma"}}
	draining.Status.Phase = macvirtv1alpha1.ClaimReady
	meta.SetStatusCondition(&draining.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionHostDraining, Status: metav1.ConditionTrue,
		Reason: macvirtv1alpha1.ReasonEvacuationRequested, Message: "machine pools/m: node mac-1 is being drained: ... until 2026-12-01T13:00:00Z"})
	quiet := draining.DeepCopy()
	quiet.Name, quiet.Status.Conditions = "other", nil
	var out bytes.Buffer
	env := &Env{Client: fake.NewClientBuilder().WithScheme(s).WithObjects(draining, quiet).Build(), Namespace: "team",
		Streams: Streams{Out: &out, Err: &out}, Now: func() time.Time { return now }}
	if code, err := (getCmd{}).run(context.Background(), env, nil); code != 0 || err != nil {
		t.Fatalf("get: %d %v", code, err)
	}
	got := out.String()
	want := "build: host draining (EvacuationRequested): machine pools/m: node mac-1 is being drained: ... until 2026-12-01T13:00:00Z; save your work"
	if !strings.Contains(got, want) {
		t.Fatalf("get does not tell the tenant:\n%s", got)
	}
	if strings.Contains(got, "other: host draining") {
		t.Fatalf("a claim whose host is not draining gets a note:\n%s", got)
	}
}

func TestSSHWarnsOnStderrThatTheHostIsDraining(t *testing.T) {
	s := runtime.NewScheme()
	if err := macvirtv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: "team", UID: "claim-uid"}}
	c.Status.Connection = &macvirtv1alpha1.ClaimConnection{Address: "10.244.1.2", SSHPort: 22, User: "admin", HostKeys: []string{testHostKeyLine}}
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionHostDraining, Status: metav1.ConditionTrue,
		Reason: macvirtv1alpha1.ReasonDrainStop, Message: "machine pools/m: node mac-1 is being drained and drainGracePeriod (1h0m0s) is over"})
	var out, errs bytes.Buffer
	env := &Env{Client: fake.NewClientBuilder().WithScheme(s).WithObjects(c).Build(), Namespace: "team", Streams: Streams{Out: &out, Err: &errs}}
	if _, err := connection(context.Background(), env, "build"); err != nil {
		t.Fatal(err)
	}
	if want := "kubectl mac: macclaim team/build: host draining (DrainStop): machine pools/m: node mac-1 is being drained"; !strings.Contains(errs.String(), want) {
		t.Fatalf("stderr lacks %q:\n%s", want, errs.String())
	}
	if out.Len() != 0 {
		t.Fatalf("the warning went to stdout, where a command's output goes: %q", out.String())
	}
}

// testHostKeyLine is an SSH host key in authorized_keys form.
const testHostKeyLine = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE0Ow6DQP+//k6m8zioktAbUb0Su/x93h9rtsTyq+kAs"
