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
	"fmt"
	"time"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/hostagent/vz"
)

// Action is what the agent does next with a machine's VM.
type Action string

// Actions.
const (
	// ActNone: the VM is as the machine wants it; report it.
	ActNone Action = "None"
	// ActCreate: begin making the VM from the class's image, beside the
	// loop.
	ActCreate Action = "Create"
	// ActWaitCreate: the VM is being made (its image pulled); report how
	// far.
	ActWaitCreate Action = "WaitCreate"
	// ActCancelCreate: the machine was deleted while its VM was being
	// made: give the creation up, and wait for it to end.
	ActCancelCreate Action = "CancelCreate"
	// ActStart: start the stopped VM.
	ActStart Action = "Start"
	// ActRequestStop: ask macOS to shut down (the power button).
	ActRequestStop Action = "RequestStop"
	// ActWaitStop: macOS was asked and still runs; wait for it, and never
	// force it.
	ActWaitStop Action = "WaitStop"
	// ActPowerOff: force a deleted machine's VM off, past its grace period,
	// as its class says (PowerOff).
	ActPowerOff Action = "PowerOff"
	// ActDelete: remove the stopped VM and its disk.
	ActDelete Action = "Delete"
	// ActDeleted: the machine is deleted and its VM is gone.
	ActDeleted Action = "Deleted"
	// ActSuspend: save the idle VM's memory and stop it; it then holds no
	// licence slot.
	ActSuspend Action = "Suspend"
	// ActResume: restore the suspended VM for its claim, with a new
	// configuration (a new token) that tells its guest agent it woke.
	ActResume Action = "Resume"
)

// Input is what the agent knows about one machine's VM.
type Input struct {
	Now time.Time
	// Deleting: the machine has a deletion timestamp (or is an orphan:
	// a VM of the agent's that no machine is placed for).
	Deleting bool
	// WantsRunning is the machine's spec.running.
	WantsRunning bool
	// Exists and State are what the driver reports.
	Exists bool
	State  vz.State
	// Creating: the VM is being made beside the loop (tart makes it
	// before it sets its CPUs, so it may exist already).
	Creating bool
	// CreateFailedAt is when the last creation failed, and CreateError
	// why; nil when it did not.
	CreateFailedAt *time.Time
	CreateError    string
	// StopRequestedAt is when the agent asked macOS to shut down, as the
	// machine's status records it; nil when it did not.
	StopRequestedAt *time.Time
	// Grace is the class's shutdownGracePeriod.
	Grace time.Duration
	// PowerOff: the class says a deleted machine's VM is forced off past
	// Grace (afterShutdownGracePeriod PowerOff).
	PowerOff bool
	// SuspendWanted: the machine asks to be kept suspended while idle
	// (spec.suspendWhenIdle) and was never bound, so its memory holds
	// nothing of a tenant.
	SuspendWanted bool
	// StartedSuspendable: the agent started the running VM so that it can
	// be suspended (a VM started otherwise would be ended, not saved).
	StartedSuspendable bool
	// GuestReported: the guest agent heartbeat since the VM last started
	// (it booted, generalised the disk and took its token).
	GuestReported bool
	// SuspendProblem says why this VM may not be suspended now (the host's
	// tool cannot, or its saved memory would not fit the free disk); empty
	// when it may.
	SuspendProblem string
	// SlotForResume: the host's free slots are all wanted by bound
	// machines waiting to be resumed; an unbound machine does not start.
	SlotForResume bool
}

// Decision is the next action, and a problem to report with it.
type Decision struct {
	Action Action
	// Problem is said in status.host.error (a stop past its grace period).
	Problem string
	// RecheckAfter is when to look again, for what no event reports.
	RecheckAfter time.Duration
}

// Decide picks the next step for one VM. A stop is asked of macOS; a VM
// that outlives its grace period is reported, and left, unless it is a
// deleted machine's whose class says PowerOff.
func Decide(in Input) Decision {
	stopping := in.Deleting || !in.WantsRunning
	switch {
	case in.Creating && in.Deleting:
		return Decision{Action: ActCancelCreate, RecheckAfter: stopPoll}
	case in.Creating:
		return Decision{Action: ActWaitCreate, RecheckAfter: pullPoll}
	case !in.Exists && in.Deleting:
		return Decision{Action: ActDeleted}
	case !in.Exists && in.CreateFailedAt != nil && in.Now.Sub(*in.CreateFailedAt) < createRetry:
		return Decision{Action: ActWaitCreate, Problem: in.CreateError, RecheckAfter: createRetry - in.Now.Sub(*in.CreateFailedAt)}
	case !in.Exists:
		return Decision{Action: ActCreate, RecheckAfter: pullPoll}
	case in.State == vz.StateSuspended && in.Deleting:
		// Never forced: a suspended VM does not run, and its saved memory
		// is a never-bound Mac's.
		return Decision{Action: ActDelete}
	case in.State == vz.StateSuspended && (stopping || in.SuspendWanted):
		return Decision{Action: ActNone}
	case in.State == vz.StateSuspended:
		return Decision{Action: ActResume}
	case stopping && in.State == vz.StateStopped && in.Deleting:
		return Decision{Action: ActDelete}
	case stopping && in.State == vz.StateStopped:
		return Decision{Action: ActNone}
	case stopping && in.State == vz.StateStarting:
		// Nothing to ask yet: macOS is asked once the VM runs.
		return Decision{Action: ActWaitStop, RecheckAfter: stopPoll}
	case stopping && in.StopRequestedAt == nil:
		return Decision{Action: ActRequestStop, RecheckAfter: stopPoll}
	case stopping:
		waited := in.Now.Sub(*in.StopRequestedAt)
		if waited >= in.Grace && in.PowerOff && in.Deleting {
			return Decision{Action: ActPowerOff, RecheckAfter: stopPoll, Problem: fmt.Sprintf(
				"macOS did not shut down within shutdownGracePeriod %s of being asked at %s; forced off, as the class's "+
					"afterShutdownGracePeriod PowerOff says of its deleted machines", in.Grace, in.StopRequestedAt.UTC().Format(time.RFC3339))}
		}
		if waited >= in.Grace {
			return Decision{Action: ActWaitStop, RecheckAfter: stopPoll, Problem: fmt.Sprintf(
				"macOS did not shut down within shutdownGracePeriod %s of being asked at %s (its guest agent is asked through "+
					"/Volumes/My Shared Files/macvirt/shutdown, which an agent from before that request ignores; macOS answers the power button "+
					"with a dialog); the VM is left running, never forced: log in and shut it down, or find what holds it",
				in.Grace, in.StopRequestedAt.UTC().Format(time.RFC3339))}
		}
		return Decision{Action: ActWaitStop, RecheckAfter: stopPoll}
	case in.State == vz.StateStopped && in.SlotForResume:
		return Decision{Action: ActNone, RecheckAfter: startRetry, Problem: "waiting for a slot: claims' Macs on this host resume first"}
	case in.State == vz.StateStopped:
		return Decision{Action: ActStart}
	case in.State != vz.StateRunning || !in.SuspendWanted || !in.GuestReported:
		// Not idle, or still preparing: the guest has not reported yet.
		return Decision{Action: ActNone}
	case in.SuspendProblem != "":
		return Decision{Action: ActNone, Problem: macvirtv1alpha1.HostErrorKeptRunning + in.SuspendProblem, RecheckAfter: resync}
	case !in.StartedSuspendable:
		return Decision{Action: ActNone, Problem: macvirtv1alpha1.HostErrorKeptRunning + "the VM was not started suspendable (an agent from before " +
			"suspension started it, or the host could not suspend then), and tart would end it rather than save it; stop and start the machine " +
			"(spec.running) to have it started suspendable"}
	}
	return Decision{Action: ActSuspend}
}

// pullPoll is how often a VM being made is looked at, to report its
// pull's progress; its end wakes the loop at once.
const pullPoll = 3 * time.Second

// stopPoll is how often a VM asked to stop is looked at: the tools report
// no event when it does.
const stopPoll = 2 * time.Second
