package pool

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func machine(mods ...func(*macvirtv1alpha1.MacMachine)) *macvirtv1alpha1.MacMachine {
	m := &macvirtv1alpha1.MacMachine{}
	m.Name, m.Namespace, m.Generation = "m", "ns", 3
	for _, mod := range mods {
		mod(m)
	}
	return m
}

func withHeartbeat(at time.Time) func(*macvirtv1alpha1.MacMachine) {
	return func(m *macvirtv1alpha1.MacMachine) {
		ts := metav1.NewTime(at)
		m.Status.Guest = &macvirtv1alpha1.GuestStatus{LastHeartbeat: &ts}
	}
}

func class() *macvirtv1alpha1.MacClass { return &macvirtv1alpha1.MacClass{} }

func TestSilentReplaceAtGivesARebootItsBootTimeout(t *testing.T) {
	silentAt := metav1.NewTime(t0)
	c := &metav1.Condition{LastTransitionTime: silentAt}
	short := class()
	short.Spec.Lifecycle.BootTimeout = &metav1.Duration{Duration: time.Minute}
	for name, tc := range map[string]struct {
		m     *macvirtv1alpha1.MacMachine
		class *macvirtv1alpha1.MacClass
		want  time.Time
	}{
		"a reboot gets the default bootTimeout from its last heartbeat": {m: machine(withHeartbeat(t0.Add(-2 * time.Minute))), class: class(),
			want: t0.Add(-2*time.Minute + macvirtv1alpha1.DefaultBootTimeout)},
		"never sooner than silenceGrace": {m: machine(withHeartbeat(t0.Add(-2 * time.Minute))), class: short, want: t0.Add(silenceGrace)},
		"no class: silenceGrace":         {m: machine(withHeartbeat(t0.Add(-2 * time.Minute))), want: t0.Add(silenceGrace)},
		"never heard: silenceGrace":      {m: machine(), class: class(), want: t0.Add(silenceGrace)},
	} {
		if got := silentReplaceAt(tc.m, c, tc.class); !got.Equal(tc.want) {
			t.Errorf("%s: replace at %s, want %s", name, got, tc.want)
		}
	}
}
