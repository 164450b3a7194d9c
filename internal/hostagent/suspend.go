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
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	ctrl "sigs.k8s.io/controller-runtime"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestprotocol"
	"github.com/macvirt/macvirt/internal/hostagent/vz"
)

// A suspended pool's idle machine boots once; once its guest agent has
// reported (it booted, generalised the disk and took its token), the agent
// saves the VM's memory beside its disk and stops it (tart suspend), so it
// holds no licence slot. Only a never-bound machine is suspended: its
// memory holds nothing of a tenant. A claim's binding resumes it with a new
// configuration: a new token, and the resumed file, which tells the guest
// agent it woke with the state it was saved with (its clock, its host
// keys), to renew them before it reports.

// suspendableDir, under the state directory, holds an empty file per VM
// the agent started suspendable (tart run --suspendable). tart ends a VM
// asked to suspend that was not started so, as if forced: only these are
// ever suspended. It outlives the agent, as the VMs do.
const suspendableDir = "suspendable"

// minSuspendMacOS is the first macOS whose Virtualization framework saves
// and restores a VM's state.
const minSuspendMacOS = "14"

func (a *Agent) suspendableMark(vm string) string {
	return filepath.Join(a.opts.StateDir, suspendableDir, vm)
}

// markSuspendable records whether the agent starts vm suspendable.
func (a *Agent) markSuspendable(vm string, on bool) error {
	path := a.suspendableMark(vm)
	if !on {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, nil, 0o600)
}

// startedSuspendable says whether the agent started vm suspendable.
func (a *Agent) startedSuspendable(vm string) bool {
	_, err := os.Stat(a.suspendableMark(vm))
	return err == nil
}

// hostSuspendProblem says why this host cannot suspend a VM at all: its
// tool cannot, or its macOS is older than 14; empty when it can.
func (a *Agent) hostSuspendProblem(ctx context.Context) string {
	if err := a.driver.CanSuspend(ctx); err != nil {
		return err.Error()
	}
	if a.opts.Facts == nil {
		return ""
	}
	f, _ := a.facts.get(a.clock.Now(), factsTTL, func() (Facts, error) { return a.opts.Facts(ctx), nil })
	return macOSSuspendProblem(f.MacOSVersion)
}

// macOSSuspendProblem says why a host of macOS version cannot suspend a
// VM; empty when it can, or the version is not known.
func macOSSuspendProblem(version string) string {
	if c, ok := compareVersions(version, minSuspendMacOS); ok && c < 0 {
		return fmt.Sprintf("the host runs macOS %s; the Virtualization framework saves a VM's state from macOS %s on", version, minSuspendMacOS)
	}
	return ""
}

// suspendProblem says why vm, of memory bytes, may not be suspended now:
// the host cannot, or its saved memory (about the VM's memory) would take
// the free disk below --min-free-disk, where the host reports DiskPressure
// and takes no machine.
func (a *Agent) suspendProblem(ctx context.Context, memory int64) string {
	if p := a.hostSuspendProblem(ctx); p != "" {
		return p
	}
	if a.opts.Facts == nil {
		return ""
	}
	f, _ := a.facts.get(a.clock.Now(), factsTTL, func() (Facts, error) { return a.opts.Facts(ctx), nil })
	return diskSuspendProblem(f.FreeDisk, memory, *a.opts.MinFreeDisk)
}

// diskSuspendProblem says why a VM of memory bytes may not be saved where
// free is left (nil: not read): what stays free must not fall below minFree.
func diskSuspendProblem(free *resource.Quantity, memory int64, minFree resource.Quantity) string {
	if free == nil {
		return ""
	}
	left := free.Value() - memory
	if left < minFree.Value() {
		return fmt.Sprintf("saving its memory (%s) would leave %s free, under --min-free-disk %s",
			gib(resource.NewQuantity(memory, resource.BinarySI)), gib(resource.NewQuantity(max(left, 0), resource.BinarySI)), minFree.String())
	}
	return ""
}

// classMemory is the memory a class gives its VMs, which a suspended VM's
// saved state about equals.
func classMemory(class *macvirtv1alpha1.MacClass) int64 {
	if class == nil {
		return 0
	}
	mem := class.Spec.Resources.MemoryOrDefault()
	return mem.Value()
}

// writeResumed tells the guest of a VM being resumed that it woke: the
// host's time, which it sets its clock to when behind. It is in the share
// beside the configuration, never a file the operator sends.
func writeResumed(dir string, now time.Time) error {
	if err := os.WriteFile(filepath.Join(dir, guestprotocol.ResumedFile), []byte(now.UTC().Format(time.RFC3339Nano)+"\n"), 0o600); err != nil {
		return fmt.Errorf("telling the guest it is resumed: %w", err)
	}
	return nil
}

// slotForResume says whether the host's free slots are all needed by bound
// machines whose VM waits to be resumed (a claim waits for each): an
// unbound machine's VM, a pool's warm Mac, does not start then.
func (a *Agent) slotForResume(ctx context.Context) bool {
	list := &macvirtv1alpha1.MacMachineList{}
	if err := a.client.List(ctx, list); err != nil {
		return false
	}
	waiting := 0
	for i := range list.Items {
		m := &list.Items[i]
		if m.Spec.HostName == a.opts.Host && m.Spec.ClaimRef != nil && m.DeletionTimestamp.IsZero() &&
			m.Status.Host != nil && m.Status.Host.State == macvirtv1alpha1.HostVMSuspended {
			waiting++
		}
	}
	if waiting == 0 {
		return false
	}
	s, err := a.driver.Slots(ctx)
	return err == nil && s.Running+waiting >= s.Max
}

// maxResumeFailures is how many resumes in a row may fail (for another
// reason than the VM limit) before the saved state is dropped: tart cannot
// restore a state after the VM's disk or MAC address changed, nor on
// another Mac, and would fail the same way for ever.
const maxResumeFailures = 3

// resumeFailed counts a resume of vm that failed with err (nil: it did
// not, and the count is reset). At maxResumeFailures it drops the saved
// state, so the next start boots the never-used Mac cold, and says so;
// "" otherwise.
func (a *Agent) resumeFailed(ctx context.Context, vm string, err error) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var refused *toolStartError
	if err == nil || errors.Is(err, vz.ErrVMLimit) {
		delete(a.resumeFailures, vm)
		return ""
	}
	if !errors.As(err, &refused) {
		// The configuration's fetch failed: the state is not at fault.
		return ""
	}
	a.resumeFailures[vm]++
	if a.resumeFailures[vm] < maxResumeFailures {
		return ""
	}
	if derr := a.driver.DiscardSavedState(ctx, vm); derr != nil {
		return fmt.Sprintf("resuming failed %d times in a row (%v), and dropping its saved state failed too: %v", a.resumeFailures[vm], err, derr)
	}
	delete(a.resumeFailures, vm)
	ctrl.LoggerFrom(ctx).Info("dropped a saved state that would not restore; the VM boots cold", "vm", vm, "error", err.Error())
	return fmt.Sprintf("resuming failed %d times in a row (last: %v); its saved state was dropped and the VM boots cold", maxResumeFailures, err)
}
