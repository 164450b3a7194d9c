package pool

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// heardAt is a machine whose guest last sent a heartbeat at the given
// time; never heard when nil.
func heardAt(at *time.Time) *macvirtv1alpha1.MacMachine {
	m := &macvirtv1alpha1.MacMachine{}
	if at != nil {
		ts := metav1.NewTime(*at)
		m.Status.Guest = &macvirtv1alpha1.GuestStatus{LastHeartbeat: &ts}
	}
	return m
}

func TestSilentReplaceAtGivesARebootItsBootTimeout(t *testing.T) {
	silentAt := metav1.NewTime(t0)
	c := &metav1.Condition{LastTransitionTime: silentAt}
	twoMinutesAgo := t0.Add(-2 * time.Minute)
	short := &macvirtv1alpha1.MacClass{}
	short.Spec.Lifecycle.BootTimeout = &metav1.Duration{Duration: time.Minute}
	for name, tc := range map[string]struct {
		m     *macvirtv1alpha1.MacMachine
		class *macvirtv1alpha1.MacClass
		want  time.Time
	}{
		"a reboot gets the default bootTimeout from its last heartbeat": {m: heardAt(&twoMinutesAgo), class: &macvirtv1alpha1.MacClass{},
			want: t0.Add(-2*time.Minute + macvirtv1alpha1.DefaultBootTimeout)},
		"never sooner than silenceGrace": {m: heardAt(&twoMinutesAgo), class: short, want: t0.Add(silenceGrace)},
		"no class: silenceGrace":         {m: heardAt(&twoMinutesAgo), want: t0.Add(silenceGrace)},
		"never heard: silenceGrace":      {m: heardAt(nil), class: &macvirtv1alpha1.MacClass{}, want: t0.Add(silenceGrace)},
	} {
		if got := silentReplaceAt(tc.m, c, tc.class); !got.Equal(tc.want) {
			t.Errorf("%s: replace at %s, want %s", name, got, tc.want)
		}
	}
}
