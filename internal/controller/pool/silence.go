package pool

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// silentReplaceAt is when a pool may replace an unbound machine whose guest
// fell silent (c, its GuestAgentReady condition): silenceGrace after it was
// judged silent, and never before the class's bootTimeout has passed since
// its last heartbeat. A guest rebooting, for a macOS update or from its
// menu, keeps its instance Running and is silent until it has booted again
// (pkg/virt-handler/vm.go reports a reset domain as Running): a reboot is a
// boot, and gets as long.
func silentReplaceAt(m *macvirtv1alpha1.MacMachine, c *metav1.Condition, class *macvirtv1alpha1.MacClass) time.Time {
	at := c.LastTransitionTime.Add(silenceGrace)
	if class == nil || m.Status.Guest == nil || m.Status.Guest.LastHeartbeat == nil {
		return at
	}
	if boot := m.Status.Guest.LastHeartbeat.Add(class.Spec.Lifecycle.BootTimeoutOrDefault()); boot.After(at) {
		return boot
	}
	return at
}

// guestFellSilent says the machine's agent answered once and then stayed
// silent past heartbeatTimeout.
func guestFellSilent(m *macvirtv1alpha1.MacMachine) bool { return silentGuest(m) != nil }

// silentGuest is the machine's GuestAgentReady condition when it says the
// guest fell silent; nil otherwise.
func silentGuest(m *macvirtv1alpha1.MacMachine) *metav1.Condition {
	c := meta.FindStatusCondition(m.Status.Conditions, macvirtv1alpha1.ConditionGuestAgentReady)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != macvirtv1alpha1.ReasonHeartbeatStale {
		return nil
	}
	return c
}
