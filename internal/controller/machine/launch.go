package machine

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	kubevirtv1 "kubevirt.io/api/core/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// crashLoopFailedStarts is how many failed starts in a row make a crash
// loop the machine gives up on. KubeVirt reports CrashLoopBackOff from the
// first failure; one failure (say, of an instance that failed while its
// disks were still importing) is retried, not condemned.
const crashLoopFailedStarts = 3

// launchStalledReasons are the VMRunning reasons that need a human: KubeVirt
// retries, but the same cause fails every retry until someone fixes it.
var launchStalledReasons = map[string]bool{
	macvirtv1alpha1.ReasonStartTimeout:         true,
	macvirtv1alpha1.ReasonImagePullFailed:      true,
	macvirtv1alpha1.ReasonInstanceCreateFailed: true,
	macvirtv1alpha1.ReasonPaused:               true,
}

// launchWarningReasons are the Ready reasons announced by a Warning event
// when the machine enters them.
var launchWarningReasons = map[string]bool{
	macvirtv1alpha1.ReasonStartTimeout:         true,
	macvirtv1alpha1.ReasonImagePullFailed:      true,
	macvirtv1alpha1.ReasonInstanceCreateFailed: true,
	macvirtv1alpha1.ReasonPaused:               true,
	macvirtv1alpha1.ReasonStartFailed:          true,
	macvirtv1alpha1.ReasonInstanceFailed:       true,
}

// observeVMLaunch reads what the VirtualMachine itself says of a start
// that does not happen: a crash loop, or an instance KubeVirt could not
// create. ok is false when it says neither.
func observeVMLaunch(vm *kubevirtv1.VirtualMachine) (base.Condition, bool) {
	if vm == nil {
		return base.Condition{}, false
	}
	if vm.Status.PrintableStatus == kubevirtv1.VirtualMachineStatusCrashLoopBackOff {
		f := vm.Status.StartFailure
		if f == nil || f.ConsecutiveFailCount >= crashLoopFailedStarts {
			return base.CondFalse(macvirtv1alpha1.ReasonCrashLoop, "VirtualMachine %s is crash-looping: %s", vm.Name, startFailure(vm)), true
		}
		retry := "after KubeVirt's backoff"
		if f.RetryAfterTimestamp != nil {
			retry = "at " + f.RetryAfterTimestamp.UTC().Format("2006-01-02T15:04:05Z")
		}
		return base.CondFalse(macvirtv1alpha1.ReasonStartFailed,
			"VirtualMachineInstance failed before it ran (%d of %d failed starts before the machine gives up); KubeVirt retries %s",
			f.ConsecutiveFailCount, crashLoopFailedStarts, retry), true
	}
	for _, c := range vm.Status.Conditions {
		if c.Type == kubevirtv1.VirtualMachineFailure && c.Status == corev1.ConditionTrue && c.Reason == "FailedCreate" {
			return base.CondFalse(macvirtv1alpha1.ReasonInstanceCreateFailed,
				"KubeVirt cannot create the VirtualMachineInstance: %s", c.Message), true
		}
	}
	return base.Condition{}, false
}

// observeInstanceTrouble reads what keeps an instance from running, or
// running usefully, in KubeVirt's words: a failed image pull, a pause, a
// failure of the instance. ok is false when there is none.
func observeInstanceTrouble(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) (base.Condition, bool) {
	for _, c := range vmi.Status.Conditions {
		switch {
		case c.Type == kubevirtv1.VirtualMachineInstanceSynchronized && c.Status == corev1.ConditionFalse &&
			(c.Reason == "ErrImagePull" || c.Reason == "ImagePullBackOff"):
			return base.CondFalse(macvirtv1alpha1.ReasonImagePullFailed,
				"the VirtualMachineInstance's pod cannot start, an image cannot be pulled (%s): %s", c.Reason, c.Message), true
		case c.Type == kubevirtv1.VirtualMachineInstancePaused && c.Status == corev1.ConditionTrue &&
			vmi.Status.Phase == kubevirtv1.Running:
			return base.CondFalse(macvirtv1alpha1.ReasonPaused,
				"the VirtualMachineInstance is paused (%s: %s); resume it with: virtctl unpause vmi %s -n %s",
				c.Reason, c.Message, vmi.Name, vmi.Namespace), true
		}
	}
	if vmi.Status.Phase != kubevirtv1.Failed {
		return base.Condition{}, false
	}
	cause := "no reason given"
	if vmi.Status.Reason != "" {
		cause = "reason " + vmi.Status.Reason
	}
	then := "KubeVirt starts a new one"
	if vm != nil && vm.Spec.RunStrategy != nil && *vm.Spec.RunStrategy != kubevirtv1.RunStrategyAlways {
		then = fmt.Sprintf("runStrategy %s decides whether KubeVirt starts a new one", *vm.Spec.RunStrategy)
	}
	return base.CondFalse(macvirtv1alpha1.ReasonInstanceFailed, "the VirtualMachineInstance failed (%s); %s", cause, then), true
}

// launchWarning returns the reason and note of the Warning event a status
// change calls for: the machine's Ready condition entered a launch reason.
func launchWarning(before, after *macvirtv1alpha1.MacMachineStatus) (string, string, bool) {
	now := meta.FindStatusCondition(after.Conditions, macvirtv1alpha1.ConditionReady)
	if now == nil || !launchWarningReasons[now.Reason] {
		return "", "", false
	}
	if was := meta.FindStatusCondition(before.Conditions, macvirtv1alpha1.ConditionReady); was != nil && was.Reason == now.Reason {
		return "", "", false
	}
	return now.Reason, now.Message, true
}

func startFailure(vm *kubevirtv1.VirtualMachine) string {
	if f := vm.Status.StartFailure; f != nil {
		return fmt.Sprintf("%d consecutive failed starts", f.ConsecutiveFailCount)
	}
	return "KubeVirt reports CrashLoopBackOff"
}
