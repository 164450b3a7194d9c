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
	"strings"
	"testing"
	"time"

	"github.com/macvirt/macvirt/internal/hostagent/vz"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	asked := now.Add(-time.Minute)
	longAgo := now.Add(-10 * time.Minute)
	justNow := now.Add(-time.Second)
	for name, tc := range map[string]struct {
		in          Input
		want        Action
		wantProblem bool
	}{
		"a new machine's VM is made":                       {in: Input{WantsRunning: true}, want: ActCreate},
		"a stopped VM that should run starts":              {in: Input{WantsRunning: true, Exists: true, State: vz.StateStopped}, want: ActStart},
		"a running VM that should run is left":             {in: Input{WantsRunning: true, Exists: true, State: vz.StateRunning}, want: ActNone},
		"a starting VM is left to start":                   {in: Input{WantsRunning: true, Exists: true, State: vz.StateStarting}, want: ActNone},
		"stopping asks macOS first":                        {in: Input{Exists: true, State: vz.StateRunning}, want: ActRequestStop},
		"a stopped VM that should stay stopped is left":    {in: Input{Exists: true, State: vz.StateStopped}, want: ActNone},
		"a starting VM is asked nothing until it runs":     {in: Input{Deleting: true, Exists: true, State: vz.StateStarting}, want: ActWaitStop},
		"asked to stop, it is waited for":                  {in: Input{Exists: true, State: vz.StateRunning, StopRequestedAt: &asked}, want: ActWaitStop},
		"past the grace period it is reported, not forced": {in: Input{Exists: true, State: vz.StateRunning, StopRequestedAt: &longAgo}, want: ActWaitStop, wantProblem: true},
		"a deleted machine's running VM is asked to stop":  {in: Input{Deleting: true, WantsRunning: true, Exists: true, State: vz.StateRunning}, want: ActRequestStop},
		"a deleted machine's stopped VM is deleted":        {in: Input{Deleting: true, WantsRunning: true, Exists: true, State: vz.StateStopped}, want: ActDelete},
		"a deleted machine's VM once gone is reported":     {in: Input{Deleting: true, WantsRunning: true}, want: ActDeleted},
		"a VM being made is waited for":                    {in: Input{WantsRunning: true, Creating: true}, want: ActWaitCreate},
		"a VM made but not yet sized is not started":       {in: Input{WantsRunning: true, Creating: true, Exists: true, State: vz.StateStopped}, want: ActWaitCreate},
		"a deleted machine's creation is given up":         {in: Input{Deleting: true, Creating: true}, want: ActCancelCreate},
		"a creation given up that left a VM deletes it":    {in: Input{Deleting: true, Exists: true, State: vz.StateStopped, CreateFailedAt: &asked}, want: ActDelete},
		"a failed creation is reported, and not retried at once": {
			in: Input{WantsRunning: true, CreateFailedAt: &justNow, CreateError: "tart exited 1: no space left"}, want: ActWaitCreate, wantProblem: true},
		"a failed creation is retried later": {in: Input{WantsRunning: true, CreateFailedAt: &asked, CreateError: "x"}, want: ActCreate},
		"a PowerOff class's deleted machine is forced off past the grace period": {
			in: Input{Deleting: true, Exists: true, State: vz.StateRunning, StopRequestedAt: &longAgo, PowerOff: true}, want: ActPowerOff, wantProblem: true},
		"a PowerOff class's deleted machine is waited for within the grace period": {
			in: Input{Deleting: true, Exists: true, State: vz.StateRunning, StopRequestedAt: &asked, PowerOff: true}, want: ActWaitStop},
		"an idle machine's VM is suspended once its guest reported": {
			in: Input{WantsRunning: true, Exists: true, State: vz.StateRunning, SuspendWanted: true, StartedSuspendable: true, GuestReported: true}, want: ActSuspend},
		"an idle machine's VM is not suspended before its guest reported": {
			in: Input{WantsRunning: true, Exists: true, State: vz.StateRunning, SuspendWanted: true, StartedSuspendable: true}, want: ActNone},
		"a VM not started suspendable is never suspended (tart would end it)": {
			in: Input{WantsRunning: true, Exists: true, State: vz.StateRunning, SuspendWanted: true, GuestReported: true}, want: ActNone, wantProblem: true},
		"a host that cannot suspend keeps the VM running and says why": {
			in: Input{WantsRunning: true, Exists: true, State: vz.StateRunning, SuspendWanted: true, StartedSuspendable: true, GuestReported: true,
				SuspendProblem: "the free disk would fall below 60Gi"}, want: ActNone, wantProblem: true},
		"a bound machine's VM is never suspended": {
			in: Input{WantsRunning: true, Exists: true, State: vz.StateRunning, StartedSuspendable: true, GuestReported: true}, want: ActNone},
		"an idle suspended VM stays suspended": {in: Input{WantsRunning: true, Exists: true, State: vz.StateSuspended, SuspendWanted: true}, want: ActNone},
		"a warm Mac waits while claims' Macs need the free slots to resume": {
			in: Input{WantsRunning: true, Exists: true, State: vz.StateStopped, SlotForResume: true}, want: ActNone, wantProblem: true},
		"a bound suspended VM is resumed":        {in: Input{WantsRunning: true, Exists: true, State: vz.StateSuspended}, want: ActResume},
		"a stopped machine's suspended VM stays": {in: Input{Exists: true, State: vz.StateSuspended}, want: ActNone},
		"a deleted machine's suspended VM is deleted, never resumed": {
			in: Input{Deleting: true, WantsRunning: true, Exists: true, State: vz.StateSuspended, SuspendWanted: true}, want: ActDelete},
		"a PowerOff class's machine only stopped keeps its disk, and is never forced": {
			in: Input{Exists: true, State: vz.StateRunning, StopRequestedAt: &longAgo, PowerOff: true}, want: ActWaitStop, wantProblem: true},
	} {
		t.Run(name, func(t *testing.T) {
			tc.in.Now, tc.in.Grace = now, 5*time.Minute
			got := Decide(tc.in)
			if got.Action != tc.want {
				t.Fatalf("Decide(%+v) = %s; want %s", tc.in, got.Action, tc.want)
			}
			if (got.Problem != "") != tc.wantProblem {
				t.Fatalf("problem %q; want one: %v", got.Problem, tc.wantProblem)
			}
			if tc.wantProblem && tc.want == ActWaitStop && !strings.Contains(got.Problem, "never forced") {
				t.Errorf("problem %q does not say the VM is never forced", got.Problem)
			}
		})
	}
}
