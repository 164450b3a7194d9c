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
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/macvirt/macvirt/internal/hostagent/vz"
)

func TestDiskSuspendProblem(t *testing.T) {
	gi := func(n int64) *resource.Quantity { return resource.NewQuantity(n<<30, resource.BinarySI) }
	minFree := resource.MustParse("60Gi")
	for name, tc := range map[string]struct {
		free *resource.Quantity
		want string
	}{
		"room for the saved memory":                  {free: gi(100)},
		"exactly the minimum left":                   {free: gi(68)},
		"the saved memory would leave too little":    {free: gi(67), want: "would leave 59.0Gi free, under --min-free-disk 60Gi"},
		"already under the minimum":                  {free: gi(4), want: "would leave 0.0Gi free"},
		"free disk not read: not judged (not macOS)": {},
	} {
		t.Run(name, func(t *testing.T) {
			got := diskSuspendProblem(tc.free, 8<<30, minFree)
			if (got == "") != (tc.want == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("diskSuspendProblem = %q; want %q", got, tc.want)
			}
		})
	}
}

func TestMacOSSuspendProblem(t *testing.T) {
	for version, refused := range map[string]bool{"13.6.1": true, "14.0": false, "15.5": false, "26.1": false, "": false} {
		if got := macOSSuspendProblem(version); (got != "") != refused {
			t.Errorf("macOS %q: %q; want refused %v", version, got, refused)
		}
	}
}

// discardDriver records the saved states dropped.
type discardDriver struct {
	vz.Driver
	dropped []string
}

func (d *discardDriver) DiscardSavedState(_ context.Context, name string) error {
	d.dropped = append(d.dropped, name)
	return nil
}

func TestResumeFailed(t *testing.T) {
	d := &discardDriver{}
	a := &Agent{driver: d, resumeFailures: map[string]int{}}
	ctx := context.Background()
	refused := &toolStartError{errors.New("tart exited 1: The virtual machine failed to restore")}
	if got := a.resumeFailed(ctx, "vm", &toolStartError{fmt.Errorf("x: %w", vz.ErrVMLimit)}); got != "" || a.resumeFailures["vm"] != 0 {
		t.Fatalf("the VM limit counted as a failed restore: %q, %d", got, a.resumeFailures["vm"])
	}
	if got := a.resumeFailed(ctx, "vm", errors.New("fetching the VM's configuration: 503")); got != "" || a.resumeFailures["vm"] != 0 {
		t.Fatalf("a failed fetch counted as a failed restore: %q, %d", got, a.resumeFailures["vm"])
	}
	for i := 1; i < maxResumeFailures; i++ {
		if got := a.resumeFailed(ctx, "vm", refused); got != "" || len(d.dropped) != 0 {
			t.Fatalf("failure %d dropped the state: %q", i, got)
		}
	}
	if got := a.resumeFailed(ctx, "vm", refused); !strings.Contains(got, "saved state was dropped") || len(d.dropped) != 1 {
		t.Fatalf("failure %d: %q, dropped %v; want the state dropped", maxResumeFailures, got, d.dropped)
	}
	if a.resumeFailures["vm"] != 0 {
		t.Fatalf("the count is %d after the drop; want it reset", a.resumeFailures["vm"])
	}
	a.resumeFailures["vm"] = 2
	if got := a.resumeFailed(ctx, "vm", nil); got != "" || a.resumeFailures["vm"] != 0 {
		t.Fatalf("a resume that worked left the count at %d", a.resumeFailures["vm"])
	}
}
