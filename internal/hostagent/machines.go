/*
Copyright 2026 The macvirt Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package hostagent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/hostagent/vz"
)

// VMPrefix starts the name of every VM the agent makes; a VM with it that
// no machine placed on the host names is the agent's to remove.
const VMPrefix = "macvirt-"

// VMName is a machine's VM's name on the host: its UID, which no other
// machine ever has, even one of the same name made again.
func VMName(m *macvirtv1alpha1.MacMachine) string { return VMPrefix + string(m.UID) }

// resync is how often a machine is looked at although nothing changed:
// a VM that stops by itself reports no event.
const resync = 10 * time.Second

// startRetry is how soon a start or resume that failed is tried again.
const startRetry = 2 * time.Second

// machineReconciler runs the VMs of the machines placed on the host.
type machineReconciler struct {
	agent *Agent
}

// Reconcile brings one machine's VM one step closer to what the machine
// wants, and reports it in status.host when that changed.
func (r *machineReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	a := r.agent
	m := &macvirtv1alpha1.MacMachine{}
	if err := a.client.Get(ctx, req.NamespacedName, m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if m.Spec.HostName != a.opts.Host || m.UID == "" {
		return ctrl.Result{}, nil
	}
	class := &macvirtv1alpha1.MacClass{}
	classErr := a.client.Get(ctx, client.ObjectKey{Name: m.Spec.ClassName}, class)
	if classErr != nil {
		class = nil
	}
	name := VMName(m)
	report := m.Status.Host.DeepCopy()
	if report == nil {
		report = &macvirtv1alpha1.HostVMStatus{}
	}
	report.VMName = name
	// The creation is read before the VM: one that ends in between is
	// seen still running, never as a VM to make again.
	cv, made := a.creations.view(name)
	vm, err := a.driver.Get(ctx, name)
	exists := err == nil
	if err != nil && !errors.Is(err, vz.ErrNotFound) {
		report.Error = err.Error()
		return r.write(ctx, m, report, ctrl.Result{RequeueAfter: resync}, err)
	}
	in := Input{Now: a.clock.Now(), Deleting: !m.DeletionTimestamp.IsZero(), WantsRunning: m.Spec.Running == nil || *m.Spec.Running,
		Exists: exists, State: vm.State, Grace: macvirtv1alpha1.DefaultShutdownGracePeriod}
	if class != nil {
		in.Grace = class.Spec.Lifecycle.ShutdownGracePeriodOrDefault()
		in.PowerOff = class.Spec.Lifecycle.AfterShutdownGracePeriod == macvirtv1alpha1.AfterGracePowerOff
	}
	if report.StopRequestedAt != nil {
		t := report.StopRequestedAt.Time
		in.StopRequestedAt = &t
	}
	in.SuspendWanted = m.Spec.SuspendWhenIdle && m.Spec.ClaimRef == nil
	if in.SuspendWanted && exists && vm.State == vz.StateRunning {
		in.StartedSuspendable = a.startedSuspendable(name)
		g := m.Status.Guest
		in.GuestReported = g != nil && g.LastHeartbeat != nil && report.RunningSince != nil && !g.LastHeartbeat.Before(report.RunningSince)
		if in.GuestReported {
			in.SuspendProblem = a.suspendProblem(ctx, classMemory(class))
		}
	}
	if exists && vm.State == vz.StateStopped && m.Spec.ClaimRef == nil {
		in.SlotForResume = a.slotForResume(ctx)
	}
	in.Creating = made && cv.Running
	if made && !cv.Running && cv.Err != nil {
		in.CreateFailedAt, in.CreateError = &cv.FinishedAt, cv.Err.Error()
	}
	if made && !cv.Running && cv.Err == nil {
		report.ImageDigest = cv.Digest
	}
	report.Pull = nil
	if exists {
		report.MACAddress = vm.MAC
	}
	d := Decide(in)
	result := ctrl.Result{RequeueAfter: resync}
	if d.RecheckAfter > 0 {
		result.RequeueAfter = d.RecheckAfter
	}
	report.Error = d.Problem
	var stepErr error
	switch d.Action {
	case ActDeleted:
		a.creations.forget(name)
		report.State, report.Address, report.RunningSince = macvirtv1alpha1.HostVMDeleted, "", nil
		return r.write(ctx, m, report, ctrl.Result{}, nil)
	case ActCreate:
		if class == nil {
			report.State, report.Error = macvirtv1alpha1.HostVMCreating, fmt.Sprintf("reading MacClass %s: %v", m.Spec.ClassName, classErr)
			return r.write(ctx, m, report, result, classErr)
		}
		report.State = macvirtv1alpha1.HostVMCreating
		image := class.Spec.VMImage()
		if stepErr = macvirtv1alpha1.CheckVMImage(image); stepErr != nil {
			stepErr = fmt.Errorf("MacClass %s: image.source.registry.url: %w", class.Name, stepErr)
		} else if stepErr = a.recordMade(name); stepErr == nil {
			// A cached image is cloned at once; one to pull waits for a
			// pull token. Either way the loop goes on.
			cached := false
			if images, err := a.driver.Images(ctx); err == nil && class.Spec.Image.PullPolicy != macvirtv1alpha1.PullAlways {
				cached = cachedImage(images, image)
			}
			a.creations.begin(ctx, a.driver, name, createOptions(class), cached, req.NamespacedName)
			if cv, ok := a.creations.view(name); ok && cv.Running {
				report.Pull = pullStatus(cv)
			}
		}
	case ActWaitCreate:
		report.State = macvirtv1alpha1.HostVMCreating
		if cv.Running {
			report.Pull = pullStatus(cv)
		}
	case ActCancelCreate:
		a.creations.cancel(name)
		report.State = macvirtv1alpha1.HostVMCreating
		if cv.Running {
			report.Pull = pullStatus(cv)
		}
	case ActStart, ActResume:
		report.State, report.StopRequestedAt = macvirtv1alpha1.HostVMStarting, nil
		mode := startMode{resume: d.Action == ActResume}
		// An idle machine of a suspended pool starts so that it can be
		// suspended once its guest reported; a resumed one is restored so
		// whatever it says.
		mode.suspendable = mode.resume || (in.SuspendWanted && a.hostSuspendProblem(ctx) == "")
		if mode.resume {
			// Recorded before the VM runs: the operator judges every
			// heartbeat after it by the keys the guest had before, and the
			// guest may report before the start returns.
			now := metav1.NewTime(a.clock.Now())
			report.ResumedAt, mode.resumedAt = &now, now.Time
			report.Resumes++
			if _, stepErr = r.write(ctx, m, report.DeepCopy(), result, nil); stepErr != nil {
				break
			}
		}
		if !mode.resume && report.Resumes > 0 {
			// A cold boot of a machine that was resumed (its saved state
			// dropped): its guest renews its identity as after a resume,
			// which the operator expects of it.
			mode.renew, mode.resumedAt = true, a.clock.Now()
		}
		stepErr = a.start(ctx, m, name, mode)
		if stepErr != nil {
			// The endpoint busy, the VM limit: a claim may be waiting.
			result.RequeueAfter = startRetry
		}
		if mode.resume {
			if dropped := a.resumeFailed(ctx, name, stepErr); dropped != "" {
				report.Error, stepErr = dropped, nil
			}
		}
		if stepErr == nil {
			now := metav1.NewTime(a.clock.Now())
			report.State, report.RunningSince = macvirtv1alpha1.HostVMRunning, &now
			if mode.resume {
				ctrl.LoggerFrom(ctx).Info("resumed a suspended VM for its claim", "vm", name)
			}
			if vm, err := a.driver.Get(ctx, name); err == nil {
				report.Address = vm.IP
			}
		}
	case ActSuspend:
		// Suspending is written first, under the resourceVersion the
		// decision was made from: a binding written since (spec.claimRef)
		// makes it conflict, and the VM is not suspended; and a binding
		// tried after it conflicts, or finds the machine not bindable.
		report.State = macvirtv1alpha1.HostVMSuspending
		if err := r.writeGuarded(ctx, m, report.DeepCopy()); err != nil {
			if apierrors.IsConflict(err) {
				// Looked at again once the cache shows what changed.
				return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
			}
			stepErr = err
			break
		}
		if stepErr = a.driver.Suspend(ctx, name); stepErr == nil {
			now := metav1.NewTime(a.clock.Now())
			report.State, report.SuspendedAt, report.Address, report.RunningSince = macvirtv1alpha1.HostVMSuspended, &now, "", nil
			ctrl.LoggerFrom(ctx).Info("suspended an idle VM: it holds no licence slot until a claim binds it", "vm", name)
		} else if vm, err := a.driver.Get(ctx, name); err == nil {
			report.State = hostState(vm.State)
		}
	case ActRequestStop:
		stepErr = a.requestStop(ctx, name)
		switch {
		case stepErr == nil:
			now := metav1.NewTime(a.clock.Now())
			report.State, report.StopRequestedAt = macvirtv1alpha1.HostVMStopping, &now
			report.Error = waitingProblem(report.Error, a.stopWarning(name))
		case errors.Is(stepErr, vz.ErrNotRunning):
			// Stopped meanwhile, or not running yet: looked at again.
			stepErr = nil
		default:
			report.State = macvirtv1alpha1.HostVMRunning
		}
	case ActPowerOff:
		report.State = macvirtv1alpha1.HostVMStopping
		if stepErr = a.driver.ForceStop(ctx, name); errors.Is(stepErr, vz.ErrNotRunning) {
			stepErr = nil
		}
		ctrl.LoggerFrom(ctx).Info("forced a deleted machine's VM off past its grace period, as its class says", "vm", name)
	case ActWaitStop:
		report.State = macvirtv1alpha1.HostVMStopping
		report.Error = waitingProblem(report.Error, a.stopWarning(name))
	case ActDelete:
		stepErr = a.driver.Delete(ctx, name)
		if stepErr == nil {
			a.creations.forget(name)
			a.forgetMade(name)
			_ = a.markSuspendable(name, false)
			report.State, report.Address, report.RunningSince, report.StopRequestedAt = macvirtv1alpha1.HostVMDeleted, "", nil, nil
			return r.write(ctx, m, report, ctrl.Result{}, nil)
		}
	case ActNone:
		report.State = hostState(vm.State)
		if vm.State == vz.StateStopped || vm.State == vz.StateSuspended {
			report.Address, report.RunningSince, report.StopRequestedAt = "", nil, nil
			a.forgetStopWarning(name)
		} else {
			report.Address = vm.IP
			if vm.State == vz.StateRunning && report.RunningSince == nil {
				// Started by an agent that stopped before it reported (a
				// restart, a start that outlived its timeout): running
				// from now on, so its guest is waited for and timed.
				now := metav1.NewTime(a.clock.Now())
				report.RunningSince = &now
			}
		}
	}
	report.LatestImageDigest = ""
	if class != nil && class.Spec.Image.Refresh != nil && report.ImageDigest != "" && report.State != macvirtv1alpha1.HostVMDeleted {
		// What the Mac's cache holds for the class's image now: a refresh
		// that pulled a re-pushed tag shows here, and the pool replaces
		// the VM while it is idle.
		if latest, err := a.driver.ImageDigest(ctx, class.Spec.VMImage()); err == nil {
			report.LatestImageDigest = latest
		}
	}
	if stepErr != nil {
		report.Error = stepErr.Error()
	}
	return r.write(ctx, m, report, result, stepErr)
}

// writeGuarded patches status.host with the machine's resourceVersion as
// a precondition: a conflict says the machine changed since it was read.
func (r *machineReconciler) writeGuarded(ctx context.Context, m *macvirtv1alpha1.MacMachine, report *macvirtv1alpha1.HostVMStatus) error {
	before := m.DeepCopy()
	m.Status.Host = report
	if err := r.agent.client.Status().Patch(ctx, m, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		m.Status.Host = before.Status.Host
		return fmt.Errorf("reporting the VM of MacMachine %s/%s: %w", m.Namespace, m.Name, err)
	}
	return nil
}

// write patches status.host, only when it changed, and nothing else.
func (r *machineReconciler) write(ctx context.Context, m *macvirtv1alpha1.MacMachine, report *macvirtv1alpha1.HostVMStatus,
	result ctrl.Result, stepErr error) (ctrl.Result, error) {
	if len(report.Error) > 1024 {
		report.Error = report.Error[:1024]
	}
	if equality.Semantic.DeepEqual(m.Status.Host, report) {
		return result, stepErr
	}
	before := m.DeepCopy()
	m.Status.Host = report
	if err := r.agent.client.Status().Patch(ctx, m, client.MergeFrom(before)); err != nil {
		return result, fmt.Errorf("reporting the VM of MacMachine %s/%s: %w", m.Namespace, m.Name, err)
	}
	if stepErr != nil {
		// Reported; looked at again after resync, not in a hot loop.
		ctrl.LoggerFrom(ctx).Info("VM step failed", "vm", report.VMName, "error", stepErr.Error())
		return result, nil
	}
	return result, nil
}

func hostState(s vz.State) macvirtv1alpha1.HostVMState {
	switch s {
	case vz.StateRunning:
		return macvirtv1alpha1.HostVMRunning
	case vz.StateStarting:
		return macvirtv1alpha1.HostVMStarting
	case vz.StateSuspended:
		return macvirtv1alpha1.HostVMSuspended
	}
	return macvirtv1alpha1.HostVMStopped
}

func createOptions(class *macvirtv1alpha1.MacClass) vz.CreateOptions {
	opts := vz.CreateOptions{Image: class.Spec.VMImage(), PullAlways: class.Spec.Image.PullPolicy == macvirtv1alpha1.PullAlways}
	opts.CPUs = int(class.Spec.Resources.CPU)
	mem := class.Spec.Resources.MemoryOrDefault()
	opts.MemoryMiB = int(mem.Value() / (1 << 20))
	return opts
}
