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
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/hostagent/vz"
	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
)

// listDriver is a driver that only lists VMs.
type listDriver struct {
	vz.Driver
	vms []vz.VM
}

func (d listDriver) List(context.Context) ([]vz.VM, error) { return d.vms, nil }

// Only a VM the agent made, whose machine exists nowhere in the cluster,
// is an orphan: never a user's VM named like the agent's, one it did not
// make, or one whose machine is placed on another Mac.
func TestOnlyVMsTheAgentMadeForMachinesGoneAreOrphans(t *testing.T) {
	const (
		gone      = "0b9c2f3e-0000-4000-8000-000000000001"
		elsewhere = "0b9c2f3e-0000-4000-8000-000000000002"
		notMade   = "0b9c2f3e-0000-4000-8000-000000000003"
	)
	scheme, err := macvirtscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	machine := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "m", UID: elsewhere},
		Spec: macvirtv1alpha1.MacMachineSpec{ClassName: "arm", HostName: "another-mac"}}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(machine).Build()
	d := listDriver{vms: []vz.VM{{Name: VMPrefix + gone}, {Name: VMPrefix + elsewhere}, {Name: VMPrefix + notMade}, {Name: VMPrefix + "dev"}}}
	a := &Agent{opts: Options{StateDir: t.TempDir()}, driver: d, reader: reader}
	if err := os.MkdirAll(filepath.Join(a.opts.StateDir, madeDir), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{VMPrefix + gone, VMPrefix + elsewhere, VMPrefix + "dev"} {
		if err := a.recordMade(name); err != nil {
			t.Fatal(err)
		}
	}
	got, err := a.orphans(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{VMPrefix + gone}; !slices.Equal(got, want) {
		t.Fatalf("orphans = %v; want %v", got, want)
	}
}

// What a heartbeat reads of the Mac is read again only once its time is
// up; a failed read is never kept, and a clock set back reads anew.
func TestCachedReadsAgainOnlyWhenDue(t *testing.T) {
	var c cached[string]
	reads := 0
	read := func() (string, error) { reads++; return fmt.Sprint("v", reads), nil }
	t0 := time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
	for _, step := range []struct {
		at   time.Duration
		want string
	}{{0, "v1"}, {59 * time.Second, "v1"}, {time.Minute, "v2"}, {90 * time.Second, "v2"}, {-time.Second, "v3"}} {
		if got, _ := c.get(t0.Add(step.at), time.Minute, read); got != step.want {
			t.Fatalf("at %s: %q, want %q", step.at, got, step.want)
		}
	}
	failing := cached[string]{}
	if _, err := failing.get(t0, time.Minute, func() (string, error) { return "", errors.New("tart: not found") }); err == nil {
		t.Fatal("a failed read was not reported")
	}
	if got, err := failing.get(t0, time.Minute, func() (string, error) { return "2.32.1", nil }); err != nil || got != "2.32.1" {
		t.Fatalf("after a failed read: %q, %v; want a new read", got, err)
	}
}
