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

package controllers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/internal/guestendpoint"
	"github.com/macvirt/macvirt/internal/operator"
	"github.com/macvirt/macvirt/test/harness"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

// The suite's world is a real kube-apiserver and etcd with macvirt's CRDs
// and CDI's full CRDs, KubeVirt's own virt-api and virt-controller, and the
// simulator of the nodes and CDI in its own manager, at a test's pace and
// without guests; beside it a recording proxy in front of virt-api's stop
// subresource, and the operator composed by operator.New, which tests stop
// and start again to prove recovery.
var (
	world     *harness.World
	cfg       *rest.Config
	scheme    *runtime.Scheme
	k8sClient client.Client
	sim       *simulator.Simulator
	stopAPI   *stopProxy
	clock     = &offsetClock{}
	suiteCtx  context.Context
	operators atomic.Int32
)

func TestControllers(t *testing.T) {
	cluster.NeedsAPIServer(t)
	RegisterFailHandler(Fail)
	RunSpecs(t, "Controller Suite")
}

var _ = BeforeSuite(func() {
	// Every Eventually and Consistently polls the API server at this pace
	// unless a spec says otherwise (Gomega's default is every 10 ms).
	SetDefaultEventuallyPollingInterval(interval)
	SetDefaultConsistentlyPollingInterval(interval)
	SetDefaultEventuallyTimeout(timeout)
	// Tests also read CustomResourceDefinitions, which the operator does
	// not; a wrong field name fails instead of being pruned.
	world = harness.ForTest(GinkgoT(), harness.Options{Log: GinkgoWriter,
		Scheme: []func(*runtime.Scheme) error{apiextensionsv1.AddToScheme}, StrictFieldValidation: true,
		Simulator: &simulator.Options{StepInterval: 40 * time.Millisecond, StartDelay: 60 * time.Millisecond, ShutdownDelay: 400 * time.Millisecond}})
	cfg, scheme, k8sClient, sim, suiteCtx = world.Config, world.Scheme, world.Admin, world.Simulator, world.Ctx

	var err error
	stopAPI, err = newStopProxy(cfg)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(stopAPI.Close)
	Expect(k8sClient.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}})).To(Succeed())
	// The golden images newClass refers to.
	goldenImages("macvirt-images", "sonoma", "opencore")
})

// What a spec made goes after everything else of it, its own deletions
// and its operator's stop included (sweepSpec): registered first, this
// cleanup runs last.
var _ = BeforeEach(func() {
	DeferCleanup(sweepSpec)
})

// Faults a spec injected into the simulator or the stop stand-in end with
// it, whether or not the spec cleaned up after itself.
var _ = AfterEach(func() {
	sim.ClearAll()
	stopAPI.failWith.Store(0)
})

// operatorNamespace is the namespace the tests' operators run in, where they
// keep their class snapshots.
const operatorNamespace = "macvirt-system"

// startOperator runs a fresh operator manager until the returned function
// is called, which waits for it to stop, or at the latest until the spec
// ends.
func startOperator(mods ...func(*operator.Options)) (stop func()) {
	opts := operator.Options{
		Namespace:  operatorNamespace,
		HookImage:  "ghcr.io/macvirt/macvirt-domain-hook:test",
		StopConfig: &rest.Config{Host: stopAPI.URL},
		Clock:      clock,
		NameSuffix: fmt.Sprintf("-%d", operators.Add(1)),
		Agent:      operator.AgentEndpoint{Address: &guestendpoint.Address{Endpoint: "https://agent.test:9444", CABundle: []byte("test CA bundle")}},
	}
	for _, mod := range mods {
		mod(&opts)
	}
	op, err := operator.New(suiteCtx, cfg, opts)
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(suiteCtx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer GinkgoRecover()
		defer wg.Done()
		Expect(op.Start(ctx)).To(Succeed())
	}()
	// The operator stops when the spec ends, whether or not the spec got
	// to stop it itself: a spec that fails early must not leave its
	// operator running into the specs after it.
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	DeferCleanup(stop)
	return stop
}

// offsetClock is the real clock moved forward by an offset, so tests can
// pass a boot or heartbeat timeout without waiting for it.
type offsetClock struct{ offset atomic.Int64 }

func (c *offsetClock) Now() time.Time                  { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *offsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *offsetClock) Advance(d time.Duration)         { c.offset.Add(int64(d)) }
func (c *offsetClock) Reset()                          { c.offset.Store(0) }

// stopProxy passes the operator's calls of virt-api's stop subresource on
// to the API server, recording each, or answers them all with a forced
// failure while one is set.
type stopProxy struct {
	*httptest.Server
	failWith atomic.Int32

	mu    sync.Mutex
	stops []stopRequest
}

// stopRequest is one call of the stop subresource.
type stopRequest struct {
	Namespace, Name string
	// GracePeriod is the body's gracePeriod, nil when absent.
	GracePeriod *int64
}

// stopPath is the stop subresource's path.
var stopPath = regexp.MustCompile(`^/apis/subresources\.kubevirt\.io/v1/namespaces/([^/]+)/virtualmachines/([^/]+)/stop$`)

func newStopProxy(cfg *rest.Config) (*stopProxy, error) {
	target, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = transport
	s := &stopProxy{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m := stopPath.FindStringSubmatch(r.URL.Path); m != nil && r.Method == http.MethodPut {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var opts kubevirtv1.StopOptions
			_ = json.Unmarshal(body, &opts)
			s.mu.Lock()
			s.stops = append(s.stops, stopRequest{Namespace: m[1], Name: m[2], GracePeriod: opts.GracePeriod})
			s.mu.Unlock()
		}
		if code := int(s.failWith.Load()); code != 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_, _ = fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"virtualmachines.subresources.kubevirt.io \"x\" is forbidden: User \"system:serviceaccount:macvirt-system:macvirt\" cannot update resource \"virtualmachines/stop\" in API group \"subresources.kubevirt.io\"","reason":"Forbidden","code":%d}`, code)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	return s, nil
}

// requests returns the stop calls received so far for the VM k.
func (s *stopProxy) requests(k types.NamespacedName) []stopRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []stopRequest
	for _, r := range s.stops {
		if r.Namespace == k.Namespace && r.Name == k.Name {
			out = append(out, r)
		}
	}
	return out
}

// setKubeVirtFeatureGates sets the KubeVirt CR's feature gates.
func setKubeVirtFeatureGates(gates ...string) {
	GinkgoHelper()
	Expect(cluster.SetKubeVirtFeatureGates(suiteCtx, k8sClient, gates...)).To(Succeed())
}

// newNamespace creates a namespace for one test and deletes it afterwards.
func newNamespace() string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "mm-test-"}}
	Expect(k8sClient.Create(suiteCtx, ns)).To(Succeed())
	trackNamespace(ns.Name)
	DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), ns) })
	return ns.Name
}
