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

package sandbox

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// The Virtualization runtime in the sandbox (--runtime=vz): two fake
// Apple-silicon Macs, a class that runs on them, and a claim of it.
const (
	// VZClass is the sandbox's Virtualization class.
	VZClass = "sequoia-arm"
	// VZImage is its VM image, which the fake tart clones.
	VZImage = "ghcr.io/cirruslabs/macos-sequoia-base:latest"
	// vzHostLabel marks the sandbox's Macs, which the class selects.
	vzHostLabel = "macvirt.io/sandbox-mac"
)

// vzClaim is the claim the sandbox makes of VZClass.
var vzClaim = types.NamespacedName{Namespace: "default", Name: "arm-build"}

// VZMacs are the fake Macs' names.
var VZMacs = []string{"mac-1", "mac-2"}

// ApplyVZClass creates the Virtualization class that selects the
// sandbox's Macs.
func ApplyVZClass(ctx context.Context, c client.Client) error {
	class := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: VZClass},
		Spec: macvirtv1alpha1.MacClassSpec{
			Runtime:     macvirtv1alpha1.RuntimeVirtualization,
			Description: "macOS 15 on Apple-silicon Macs (the sandbox's fake ones), through tart",
			Image: macvirtv1alpha1.ImageSpec{DiskSource: macvirtv1alpha1.DiskSource{Source: &cdiv1.DataVolumeSource{
				Registry: &cdiv1.DataVolumeSourceRegistry{URL: ptr.To("docker://" + VZImage)}}}},
			Placement: macvirtv1alpha1.PlacementSpec{HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{vzHostLabel: "true"}}},
		}}
	if err := client.IgnoreAlreadyExists(c.Create(ctx, class)); err != nil {
		return err
	}
	// Its pool keeps six Macs warm and suspended: they hold none of the
	// four slots of the two Macs until claims resume them.
	pool := &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: VZClass},
		Spec: macvirtv1alpha1.MacPoolSpec{ClassName: VZClass, Idle: ptr.To(vzPoolIdle), IdleState: macvirtv1alpha1.IdleSuspended}}
	return client.IgnoreAlreadyExists(c.Create(ctx, pool))
}

// vzPoolIdle is the sandbox's suspended pool's idle target.
const vzPoolIdle int32 = 6

// runVZClaim claims a Mac of VZClass and says where it became Ready.
func runVZClaim(ctx context.Context, c client.Client, out io.Writer) error {
	say := func(format string, args ...any) { _, _ = fmt.Fprintf(out, "vz: "+format+"\n", args...) }
	pool := &macvirtv1alpha1.MacPool{}
	err := poll(ctx, func() (bool, error) {
		if err := c.Get(ctx, types.NamespacedName{Name: VZClass}, pool); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return pool.Status.Suspended >= vzPoolIdle, nil
	})
	if err != nil {
		return fmt.Errorf("pool %s did not suspend its %d idle Macs: %w", VZClass, vzPoolIdle, err)
	}
	hosts := &macvirtv1alpha1.MacHostList{}
	if err := c.List(ctx, hosts, client.MatchingLabels{vzHostLabel: "true"}); err != nil {
		return err
	}
	var held []string
	for _, h := range hosts.Items {
		slots := int32(0)
		if a := h.Status.Agent; a != nil {
			slots = a.Slots
		}
		held = append(held, fmt.Sprintf("%s %d machines, %d suspended, %d of %d slots held", h.Name, h.Status.Machines, h.Status.SuspendedMachines,
			h.Status.Machines-h.Status.SuspendedMachines, slots))
	}
	say("pool %s: %d idle Macs suspended; %s (kubectl get macpool,machosts)", VZClass, pool.Status.Suspended, strings.Join(held, "; "))
	start := time.Now()
	claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Namespace: vzClaim.Namespace, Name: vzClaim.Name},
		Spec: macvirtv1alpha1.MacClaimSpec{ClassName: VZClass}}
	if err := client.IgnoreAlreadyExists(c.Create(ctx, claim)); err != nil {
		return err
	}
	say("claim %s of class %s (runtime Virtualization), on fake Apple-silicon Macs %v", vzClaim, VZClass, VZMacs)
	err = poll(ctx, func() (bool, error) {
		if err := c.Get(ctx, vzClaim, claim); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		ready := meta.FindStatusCondition(claim.Status.Conditions, macvirtv1alpha1.ConditionReady)
		return ready != nil && ready.Status == metav1.ConditionTrue && claim.Status.MachineRef != nil, nil
	})
	if err != nil {
		return fmt.Errorf("claim %s was not Ready: %w", vzClaim, err)
	}
	m := &macvirtv1alpha1.MacMachine{}
	ref := claim.Status.MachineRef
	if err := c.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, m); err != nil {
		return err
	}
	vm, addr, osVersion := "", "", ""
	if h := m.Status.Host; h != nil {
		vm, addr = h.VMName, h.Address
	}
	if g := m.Status.Guest; g != nil {
		osVersion = g.OSVersion
	}
	how := "booted"
	if h := m.Status.Host; h != nil && h.ResumedAt != nil {
		how = "resumed"
	}
	say("claim %s Ready after %s: machine %s/%s %s on MacHost %s, tart VM %s at %s, macOS %s heartbeating",
		vzClaim, time.Since(start).Round(100*time.Millisecond), m.Namespace, m.Name, how, m.Spec.HostName, vm, addr, osVersion)
	return nil
}
