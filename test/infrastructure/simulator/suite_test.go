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

package simulator_test

import (
	"context"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gcustom"
	"github.com/onsi/gomega/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/test/harness"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

// Simulated timings for the suite: short enough for a quick run, long enough
// that each intermediate state is visible on a busy machine.
const (
	importSteps      = 4
	stepInterval     = 50 * time.Millisecond
	startDelay       = 150 * time.Millisecond
	shutdownDelay    = time.Second
	crashLoopBackoff = 500 * time.Millisecond
	// Clone and snapshot timings, in proportion: a snapshot clone takes
	// snapshotClone whatever its size, a copy copyPerGiB per GiB (a 64 GiB
	// copy 640 ms).
	snapshotClone = 400 * time.Millisecond
	csiClone      = 300 * time.Millisecond
	copyPerGiB    = 10 * time.Millisecond
	snapshotDelay = 200 * time.Millisecond
	// goldenFile is a file of the golden image, which an imported volume
	// holds and a blank one does not.
	goldenFile = "System/Library/CoreServices/SystemVersion.plist"

	// timeout bounds every wait in the suite.
	timeout = 30 * time.Second
)

// The suite's world: a test cluster with KubeVirt's own virt-api and
// virt-controller (the hook sidecar's gate on), under the simulator alone,
// at a test's pace.
var (
	world     *harness.World
	ctx       context.Context
	k8sClient client.WithWatch // strict field validation
	sim       *simulator.Simulator
)

func TestSimulator(t *testing.T) {
	cluster.NeedsAPIServer(t)
	RegisterFailHandler(Fail)
	RunSpecs(t, "Simulator Suite")
}

var _ = BeforeSuite(func() {
	// Polled once per 50 ms, not Gomega's 10 ms: a spec's Eventually must
	// not be what loads the API server.
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	SetDefaultConsistentlyPollingInterval(50 * time.Millisecond)
	world = harness.ForTest(GinkgoT(), harness.Options{Log: GinkgoWriter, StrictFieldValidation: true,
		Simulator: &simulator.Options{
			ImportSteps:    importSteps,
			StepInterval:   stepInterval,
			StartDelay:     startDelay,
			ShutdownDelay:  shutdownDelay,
			Guests:         true,
			GuestBootDelay: 50 * time.Millisecond,
			GuestFiles:     map[string]simulator.GuestFile{goldenFile: {Mode: 0o644, Content: []byte("macOS 14.5")}},
			CloneDurations: map[cdiv1.CDICloneStrategy]time.Duration{
				cdiv1.CloneStrategySnapshot:     snapshotClone,
				cdiv1.CloneStrategyCsiClone:     csiClone,
				cdiv1.CloneStrategyHostAssisted: copyPerGiB,
			},
			SnapshotDelay: snapshotDelay,
		}})
	ctx, k8sClient, sim = world.Ctx, world.Admin, world.Simulator
})

// newNamespace creates a namespace for one test and deletes it afterwards.
func newNamespace() string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "sim-"}}
	Expect(k8sClient.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, ns))).To(Succeed())
	})
	return ns.Name
}

// recorder collects a description of every state the watched objects of a
// namespace go through, consecutive repeats folded.
type recorder struct {
	mu   sync.Mutex
	seen []string
}

// record watches list's kind in ns until the test ends. It returns once the
// watch is established, so no later change is missed.
func record[T client.Object](list client.ObjectList, ns string, describe func(T) string) *recorder {
	w, err := k8sClient.Watch(ctx, list, client.InNamespace(ns))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(w.Stop)
	r := &recorder{}
	go func() {
		for ev := range w.ResultChan() {
			if obj, ok := ev.Object.(T); ok {
				r.add(describe(obj))
			}
		}
	}()
	return r
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.seen); n == 0 || r.seen[n-1] != s {
		r.seen = append(r.seen, s)
	}
}

// Seen returns the states recorded so far.
func (r *recorder) Seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

// Reported returns the states recorded so far, without the empty
// printableStatus a VirtualMachine has before virt-controller reports on it
// and the Stopped it writes in the sync that creates the instance (from
// the instance it saw before: none).
func (r *recorder) Reported() []string {
	var out []string
	for _, s := range r.Seen() {
		if s != "" && (len(out) > 0 || s != string(kubevirtv1.VirtualMachineStatusStopped)) {
			out = append(out, s)
		}
	}
	return out
}

// inOrder matches a list that holds want in that order, other elements
// between them allowed.
func inOrder(want ...string) types.GomegaMatcher {
	return gcustom.MakeMatcher(func(got []string) (bool, error) {
		i := 0
		for _, s := range got {
			if i < len(want) && s == want[i] {
				i++
			}
		}
		return i == len(want), nil
	}).WithTemplate("Expected\n{{.FormattedActual}}\n{{.To}} hold, in this order,\n{{format .Data 1}}").WithTemplateData(want)
}
