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
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/internal/simulator"
)

// describeRequests is a VirtualMachine's run strategy, printableStatus and
// state change requests ("Stop:<uid>", "Start").
func describeRequests(vm *kubevirtv1.VirtualMachine) string {
	reqs := []string{}
	for _, r := range vm.Status.StateChangeRequests {
		if r.UID != nil {
			reqs = append(reqs, fmt.Sprintf("%s:%s", r.Action, *r.UID))
		} else {
			reqs = append(reqs, string(r.Action))
		}
	}
	return fmt.Sprintf("%s %s [%s]", ptr.Deref(vm.Spec.RunStrategy, ""), vm.Status.PrintableStatus, strings.Join(reqs, " "))
}

// pkg/virt-api/rest/lifecycle.go (StopVMRequestHandler) and
// pkg/virt-controller/watch/vm/vm.go (syncRunStrategy, updateStatus).
var _ = Describe("Stop endpoint per run strategy", func() {
	var (
		ns     string
		server *httptest.Server
	)
	BeforeEach(func() {
		ns = newNamespace()
		server = httptest.NewServer(sim.StopHandler())
		DeferCleanup(server.Close)
	})

	// runningWith starts a VirtualMachine under Always, then switches it to
	// strategy, which leaves the running instance alone; it returns the
	// instance's UID.
	runningWith := func(name string, strategy kubevirtv1.VirtualMachineRunStrategy) string {
		importedDataVolume(ns, "system")
		create(newVM(ns, name, "system"))
		Eventually(printableStatus(ns, name)).WithTimeout(timeout).Should(Equal(kubevirtv1.VirtualMachineStatusRunning))
		vm, err := getVM(ns, name)
		Expect(err).NotTo(HaveOccurred())
		patch := client.MergeFrom(vm.DeepCopy())
		vm.Spec.RunStrategy = ptr.To(strategy)
		Expect(k8sClient.Patch(ctx, vm, patch)).To(Succeed())
		vmi, err := getVMI(ns, name)
		Expect(err).NotTo(HaveOccurred())
		return string(vmi.UID)
	}

	for _, strategy := range []kubevirtv1.VirtualMachineRunStrategy{kubevirtv1.RunStrategyManual, kubevirtv1.RunStrategyRerunOnFailure} {
		It(fmt.Sprintf("keeps %s, records a stop request that virt-controller carries out and clears, and starts nothing", strategy), func() {
			uid := runningWith("mac", strategy)
			vmStates := record(&kubevirtv1.VirtualMachineList{}, ns, describeRequests)

			code, st := call(http.MethodPut, stopURL(server, ns, "mac"), "")
			Expect(code).To(Equal(http.StatusAccepted), "%v", st)

			Eventually(vmiNotFound(ns, "mac")).WithTimeout(timeout).Should(BeTrue())
			s := string(strategy)
			// The request stays while the instance, Succeeded, waits for
			// its finalizer; whether a sync sees that is a matter of timing.
			withoutFinal := func() []string {
				return slices.DeleteFunc(vmStates.Seen(), func(st string) bool { return st == s+" Stopped [Stop:"+uid+"]" })
			}
			Eventually(withoutFinal).WithTimeout(timeout).Should(Equal([]string{
				s + " Running []",
				s + " Running [Stop:" + uid + "]",
				s + " Stopping [Stop:" + uid + "]",
				s + " Stopped []",
			}))
			// Nothing starts it again: no start request, and for
			// RerunOnFailure status.runStrategy already says so.
			Consistently(vmiNotFound(ns, "mac")).WithTimeout(4 * startDelay).Should(BeTrue())

			code, st = call(http.MethodPut, stopURL(server, ns, "mac"), "")
			Expect(code).To(Equal(http.StatusConflict))
			Expect(st.Message).To(ContainSubstring("VM is not running"))
		})
	}

	It("patches Always to Halted and records no request", func() {
		runningWith("mac", kubevirtv1.RunStrategyAlways)
		vmStates := record(&kubevirtv1.VirtualMachineList{}, ns, describeRequests)

		code, _ := call(http.MethodPut, stopURL(server, ns, "mac"), "")
		Expect(code).To(Equal(http.StatusAccepted))
		Eventually(vmiNotFound(ns, "mac")).WithTimeout(timeout).Should(BeTrue())
		Eventually(vmStates.Seen).WithTimeout(timeout).Should(Equal([]string{
			"Always Running []", "Halted Running []", "Halted Stopping []", "Halted Stopped []",
		}))
	})

	It("takes a shorter grace period for a Halted VirtualMachine still shutting down as a stop request", func() {
		uid := runningWith("mac", kubevirtv1.RunStrategyAlways)
		fault := simulator.Fault{Kind: simulator.IgnoreACPI, Namespace: ns, Name: "mac"}
		sim.Inject(fault)
		DeferCleanup(sim.Clear, fault)
		code, _ := call(http.MethodPut, stopURL(server, ns, "mac"), `{"gracePeriod": 60}`)
		Expect(code).To(Equal(http.StatusAccepted))
		vmStates := record(&kubevirtv1.VirtualMachineList{}, ns, describeRequests)

		code, st := call(http.MethodPut, stopURL(server, ns, "mac"), `{"gracePeriod": 60}`)
		Expect(code).To(Equal(http.StatusConflict))
		Expect(st.Message).To(ContainSubstring("Halted only supports manual stop requests with a shorter graceperiod"))

		code, st = call(http.MethodPut, stopURL(server, ns, "mac"), `{"gracePeriod": 1}`)
		Expect(code).To(Equal(http.StatusAccepted), "%v", st)
		Eventually(vmStates.Seen).WithTimeout(timeout).Should(ContainElement("Halted Stopping [Stop:" + uid + "]"))
	})
})

// pkg/virt-controller/watch/vm/vm.go (execute): sync creates the instance,
// then updateStatus writes the status.
var _ = Describe("VirtualMachine controller order", func() {
	It("creates the instance before the VirtualMachine's status says Starting", func() {
		ns := newNamespace()
		importedDataVolume(ns, "system")
		// Revisions of the API server's store order the writes of both kinds.
		vmStates := record(&kubevirtv1.VirtualMachineList{}, ns, func(vm *kubevirtv1.VirtualMachine) string {
			return fmt.Sprintf("%s@%s", vm.Status.PrintableStatus, vm.ResourceVersion)
		})
		vmiStates := record(&kubevirtv1.VirtualMachineInstanceList{}, ns, func(vmi *kubevirtv1.VirtualMachineInstance) string {
			return "@" + vmi.ResourceVersion
		})
		create(newVM(ns, "mac", "system"))
		Eventually(printableStatus(ns, "mac")).WithTimeout(timeout).Should(Equal(kubevirtv1.VirtualMachineStatusRunning))

		revision := func(s string) int64 {
			n, err := strconv.ParseInt(s[strings.LastIndex(s, "@")+1:], 10, 64)
			Expect(err).NotTo(HaveOccurred())
			return n
		}
		// The recorders follow watches, which may lag the reads above.
		Eventually(vmiStates.Seen).WithTimeout(timeout).ShouldNot(BeEmpty())
		created := revision(vmiStates.Seen()[0])
		startingAt := func() int64 {
			for _, s := range vmStates.Seen() {
				if strings.HasPrefix(s, string(kubevirtv1.VirtualMachineStatusStarting)+"@") {
					return revision(s)
				}
			}
			return 0
		}
		Eventually(startingAt).WithTimeout(timeout).ShouldNot(BeZero(), "no Starting status in %v", vmStates.Seen())
		starting := startingAt()
		Expect(created).To(BeNumerically("<", starting),
			"the instance (revision %d) must exist before the status says Starting (revision %d)", created, starting)
	})
})
