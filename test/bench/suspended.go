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

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/test/harness"
	"github.com/macvirt/macvirt/test/infrastructure/faketart/build"
)

// suspendedResult is one claim at a time on a suspended pool.
type suspendedResult struct {
	n      int
	resume time.Duration
	// ready is each claim's time from its create to Ready; idleSlots the
	// slots idle Macs held when each claim came (the pool warm), and
	// preparing the most any sample of the run saw held by unbound Macs
	// (booting before they are suspended).
	ready     []time.Duration
	idleSlots []int
	preparing int
	// pool is the pool's status line while warm, and during a claim.
	warm, during string
}

// benchImage is the fake tart's image of the bench's class.
const benchImage = "ghcr.io/cirruslabs/macos-sequoia-base:latest"

// benchSuspended runs macvirt at work (the harness's world: API server,
// KubeVirt's control plane, the operator with its agent endpoint) with two
// fake Apple-silicon Macs of 2 slots each, whose fake tart takes resume to
// restore a VM, and a pool of 4 idle Macs kept suspended. It makes n
// claims one at a time, each once the pool is warm again (all 4 idle Macs
// suspended), and deletes each once it is Ready.
func benchSuspended(ctx context.Context, n int, resume time.Duration) (suspendedResult, error) {
	r := suspendedResult{n: n, resume: resume}
	dir, err := os.MkdirTemp("", "macvirt-bench-suspended-")
	if err != nil {
		return r, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	w, err := harness.Start(ctx, harness.Options{OperatorAccount: true, System: &harness.SystemOptions{Speed: 4, Network: true}})
	if err != nil {
		return r, err
	}
	defer func() { _ = w.Stop() }()
	hosts := []string{"bench-mac-a", "bench-mac-b"}
	macs, err := harness.StartMacs(ctx, w.Config, w.Admin, harness.MacsOptions{Names: hosts, Labels: map[string]string{"bench.macvirt.io/suspended": "true"},
		Lease: 10 * time.Second, Images: []string{benchImage}, Dir: dir, Endpoint: w.System.AgentEndpoint, CABundle: w.System.CABundle,
		GuestFiles: w.Simulator.GuestFiles()})
	if err != nil {
		return r, err
	}
	defer macs.Stop()
	for _, h := range hosts {
		k, err := build.ReadKnobs(macs.Home(h))
		if err != nil {
			return r, err
		}
		k.ResumeMillis = int(resume / time.Millisecond)
		if err := build.WriteKnobs(macs.Home(h), k); err != nil {
			return r, err
		}
	}
	c := w.Admin
	class := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "bench-suspended"}, Spec: macvirtv1alpha1.MacClassSpec{
		Runtime: macvirtv1alpha1.RuntimeVirtualization,
		Image: macvirtv1alpha1.ImageSpec{DiskSource: macvirtv1alpha1.DiskSource{Source: &cdiv1.DataVolumeSource{
			Registry: &cdiv1.DataVolumeSourceRegistry{URL: ptr.To("docker://" + benchImage)}}}},
		Placement: macvirtv1alpha1.PlacementSpec{HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"bench.macvirt.io/suspended": "true"}}},
		Tenancy:   macvirtv1alpha1.TenancySpec{OnDemand: ptr.To(false)},
	}}
	if err := c.Create(ctx, class); err != nil {
		return r, err
	}
	const idle = 4
	pool := &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: "bench-suspended"}, Spec: macvirtv1alpha1.MacPoolSpec{
		ClassName: class.Name, Idle: ptr.To[int32](idle), MaxMachines: ptr.To[int32](idle + 1), IdleState: macvirtv1alpha1.IdleSuspended}}
	if err := c.Create(ctx, pool); err != nil {
		return r, err
	}
	ns := "bench-suspended"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return r, err
	}
	held := func() (int, error) {
		n := 0
		for _, h := range hosts {
			k, err := macs.Running(ctx, h)
			if err != nil {
				return 0, err
			}
			n += k
		}
		return n, nil
	}
	// The most slots unbound Macs hold while the pool refills.
	sample, stopSampling := context.WithCancel(ctx)
	sampled := make(chan int, 1)
	bound := 0
	go func() {
		most := 0
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sample.Done():
				sampled <- most
				return
			case <-t.C:
			}
			if k, err := held(); err == nil {
				most = max(most, k-bound)
			}
		}
	}()
	defer stopSampling()
	poolLine := func() string {
		return fmt.Sprintf("idle %d, suspended %d, bound %d, machines %d", pool.Status.Idle, pool.Status.Suspended, pool.Status.Bound, pool.Status.Machines)
	}
	for i := range n {
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
				return false, err
			}
			return pool.Status.Suspended == idle && pool.Status.Idle == idle, nil
		}); err != nil {
			return r, fmt.Errorf("claim %d: waiting for the pool's %d idle Macs to be suspended (%s): %w", i+1, idle, poolLine(), err)
		}
		if r.warm == "" {
			r.warm = poolLine()
		}
		k, err := held()
		if err != nil {
			return r, err
		}
		r.idleSlots = append(r.idleSlots, k)
		claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("job-%d", i+1)},
			Spec: macvirtv1alpha1.MacClaimSpec{ClassName: class.Name}}
		start := time.Now()
		if err := c.Create(ctx, claim); err != nil {
			return r, err
		}
		bound = 1
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
				return false, err
			}
			return meta.IsStatusConditionTrue(claim.Status.Conditions, macvirtv1alpha1.ConditionReady), nil
		}); err != nil {
			return r, fmt.Errorf("claim %d was not Ready: %w", i+1, err)
		}
		r.ready = append(r.ready, time.Since(start))
		if r.during == "" {
			if err := c.Get(ctx, client.ObjectKeyFromObject(pool), pool); err == nil {
				r.during = poolLine()
			}
		}
		m := &macvirtv1alpha1.MacMachine{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: claim.Status.MachineRef.Namespace, Name: claim.Status.MachineRef.Name}, m); err != nil {
			return r, err
		}
		if m.Status.Host == nil || m.Status.Host.ResumedAt == nil {
			return r, fmt.Errorf("claim %d's Mac %s was not resumed: the bench measures resumes only", i+1, m.Name)
		}
		if err := c.Delete(ctx, claim); err != nil {
			return r, err
		}
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			now := &macvirtv1alpha1.MacMachine{}
			err := c.Get(ctx, client.ObjectKeyFromObject(m), now)
			return apierrors.IsNotFound(err) || (err == nil && now.UID != m.UID), client.IgnoreNotFound(err)
		}); err != nil {
			return r, fmt.Errorf("claim %d's Mac was not released: %w", i+1, err)
		}
		bound = 0
		fmt.Fprintf(os.Stderr, "bench: suspended pool, claim %d of %d Ready in %s\n", i+1, n, r.ready[i].Round(time.Millisecond))
	}
	stopSampling()
	r.preparing = <-sampled
	if len(r.ready) != n {
		return r, errors.New("not every claim was measured")
	}
	return r, nil
}

func reportSuspended(r suspendedResult) {
	over := make([]time.Duration, len(r.ready))
	for i, d := range r.ready {
		over[i] = d - r.resume
	}
	most := 0
	for _, k := range r.idleSlots {
		most = max(most, k)
	}
	p50, p99 := ms(percentile(over, 0.50)), ms(percentile(over, 0.99))
	fmt.Printf("\none claim at a time on a suspended pool (2 fake Macs of 2 slots, 4 idle Macs suspended, the fake tart's resume %s), %d claims:\n",
		r.resume, r.n)
	fmt.Printf("  claim to Ready: p50 %.0f ms, p99 %.0f ms; the operator's and agents' share above the resume: p50 %.0f ms, p99 %.0f ms (target < 500 ms: %s)\n",
		ms(percentile(r.ready, 0.50)), ms(percentile(r.ready, 0.99)), p50, p99, verdict(p99 < 500))
	fmt.Printf("  slots held by idle Macs when each claim came: at most %d (target 0: %s); by Macs being prepared (booting before "+
		"they are suspended) while the pool refilled: at most %d\n", most, verdict(most == 0), r.preparing)
	fmt.Printf("  the pool while warm: %s; during a claim: %s\n", r.warm, r.during)
}
