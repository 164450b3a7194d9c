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

package simulator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Faults and guest actions of the guest's power: a guest deaf to ACPI, a
// reboot and a shutdown from inside macOS.
const (
	// IgnoreACPI makes the guest of a VirtualMachine ignore the ACPI power
	// button. A graceful stop then runs the instance's whole
	// terminationGracePeriodSeconds, the guest heartbeating all along, after
	// which virt-handler kills the domain and the instance ends Failed, not
	// Succeeded. Imitates pkg/virt-handler/vm.go: helperVmShutdown (kill once
	// hasGracePeriodExpired) and calculateVmPhaseForStatusReason (a domain
	// Destroyed with ACPI on is Failed).
	IgnoreACPI FaultKind = "IgnoreACPI"
	// GuestReboot makes the guest of a VirtualMachine reboot: while the
	// fault is on it sends no heartbeat and its instance stays Running (a
	// reboot inside the guest resets the domain, it does not end it, so
	// virt-handler keeps reporting the domain Running:
	// pkg/virt-handler/vm.go, calculateVmPhaseForStatusReason). Clearing the
	// fault ends the reboot: the guest boots for GuestBootDelay and
	// heartbeats again with a new boot time.
	GuestReboot FaultKind = "GuestReboot"
	// GuestAgentV1 makes the guest of a VirtualMachine run an agent from
	// before protocol v2: it heartbeats on v1 and runs no task.
	GuestAgentV1 FaultKind = "GuestAgentV1"
	// GuestAgentRestart stops the guest's agent while the fault is on (no
	// heartbeats; the tasks it started keep running, in process groups of
	// their own, as under launchd); clearing it starts a new agent, which
	// finds what the last one ran in the guest's task directory.
	GuestAgentRestart FaultKind = "GuestAgentRestart"
)

// powerOff is how a deleted instance's shutdown ends and when: after
// ShutdownDelay (cut short by a smaller grace period) the guest is off and
// the instance Succeeded; a guest that ignores ACPI runs the whole grace
// period and is then killed, and the instance is Failed.
func (s *Simulator) powerOff(vmi *kubevirtv1.VirtualMachineInstance) (time.Duration, kubevirtv1.VirtualMachineInstancePhase) {
	if !s.hasFault(IgnoreACPI, vmi.Namespace, vmi.Name) {
		return s.shutdownDelay(vmi), kubevirtv1.Succeeded
	}
	// pkg/virt-handler/vm.go, hasGracePeriodExpired: no grace period given
	// means KubeVirt's default of 30 s.
	grace := kubevirtv1.DefaultGracePeriodSeconds
	if g := vmi.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = *g
	}
	return time.Duration(grace) * time.Second, kubevirtv1.Failed
}

// ShutDownGuest shuts the guest of the named running instance down from
// inside, as a user choosing Shut Down in the macOS menu: the domain shuts
// off by itself, and virt-handler reports the instance Succeeded
// (pkg/virt-handler/vm.go, calculateVmPhaseForStatusReason: Shutoff with
// reason Shutdown). The VirtualMachine controller then acts on its run
// strategy; under Always it deletes the instance and creates a new one
// (pkg/virt-controller/watch/vm/vm.go, RunStrategyAlways). It fails when
// the instance is not Running.
func (s *Simulator) ShutDownGuest(ctx context.Context, key types.NamespacedName) error {
	// virt-controller writes the instance too: read it afresh on a conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		vmi := &kubevirtv1.VirtualMachineInstance{}
		if err := s.reader.Get(ctx, key, vmi); client.IgnoreNotFound(err) != nil {
			return err
		} else if err != nil || vmi.Status.Phase != kubevirtv1.Running || vmi.DeletionTimestamp != nil {
			return errNotRunning
		}
		// virt-handler reports it; virt-controller derives the rest.
		enterPhase(vmi, kubevirtv1.Succeeded, time.Now())
		writer, err := s.handlerClient(vmi.Status.NodeName)
		if err != nil {
			return err
		}
		return writer.Update(ctx, vmi)
	})
	if err != nil {
		return fmt.Errorf("shutting down the guest of %s: %w", key, err)
	}
	return nil
}

// errNotRunning is ShutDownGuest's answer for an instance not running.
var errNotRunning = errors.New("its VirtualMachineInstance is not running")

// guestListens reports whether the guest of an instance still runs: that
// of a Running instance not being deleted, or, when it ignores ACPI, until
// virt-handler kills it.
func (s *Simulator) guestListens(vmi *kubevirtv1.VirtualMachineInstance) bool {
	if vmi == nil || vmi.Status.Phase != kubevirtv1.Running {
		return false
	}
	return vmi.DeletionTimestamp == nil || s.hasFault(IgnoreACPI, vmi.Namespace, vmi.Name)
}
