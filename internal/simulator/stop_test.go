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
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/macvirt/macvirt/internal/simulator"
)

// stopURL is virt-api's stop subresource of a VirtualMachine on server.
func stopURL(server *httptest.Server, ns, name string) string {
	return fmt.Sprintf("%s/apis/subresources.kubevirt.io/v1/namespaces/%s/virtualmachines/%s/stop", server.URL, ns, name)
}

// call sends a request with an optional JSON body and returns the status
// code and the decoded metav1.Status body, if any.
func call(method, url, body string) (int, *metav1.Status) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	defer func() { ExpectWithOffset(1, resp.Body.Close()).To(Succeed()) }()
	data, err := io.ReadAll(resp.Body)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	st := &metav1.Status{}
	if json.Unmarshal(data, st) != nil || st.Kind != "Status" {
		return resp.StatusCode, nil
	}
	return resp.StatusCode, st
}

var _ = Describe("Stop endpoint", func() {
	var (
		ns     string
		server *httptest.Server
	)
	BeforeEach(func() {
		ns = newNamespace()
		server = httptest.NewServer(sim.StopHandler())
		DeferCleanup(server.Close)
	})

	It("halts a running VirtualMachine and shuts its instance down after the shutdown delay", func() {
		importedDataVolume(ns, "system")
		create(newVM(ns, "sonoma", "system"))
		Eventually(printableStatus(ns, "sonoma")).WithTimeout(timeout).Should(Equal(kubevirtv1.VirtualMachineStatusRunning))
		vmStates := record(&kubevirtv1.VirtualMachineList{}, ns, describeVM)
		vmiStates := record(&kubevirtv1.VirtualMachineInstanceList{}, ns, func(vmi *kubevirtv1.VirtualMachineInstance) string {
			return fmt.Sprintf("%s deleting=%t grace=%d", vmi.Status.Phase, vmi.DeletionTimestamp != nil,
				ptr.Deref(vmi.Spec.TerminationGracePeriodSeconds, -1))
		})

		code, _ := call(http.MethodPut, stopURL(server, ns, "sonoma"), `{"gracePeriod": 30}`)
		Expect(code).To(Equal(http.StatusAccepted))

		vm, err := getVM(ns, "sonoma")
		Expect(err).NotTo(HaveOccurred())
		Expect(vm.Spec.RunStrategy).To(Equal(ptr.To(kubevirtv1.RunStrategyHalted)))
		Eventually(vmiNotFound(ns, "sonoma")).WithTimeout(timeout).Should(BeTrue())
		Eventually(printableStatus(ns, "sonoma")).WithTimeout(timeout).Should(Equal(kubevirtv1.VirtualMachineStatusStopped))

		Eventually(vmStates.Seen).WithTimeout(timeout).Should(Equal([]string{"Running", "Stopping", "Stopped"}))
		Eventually(vmiStates.Seen).WithTimeout(timeout).Should(Equal([]string{
			"Running deleting=false grace=-1",
			"Running deleting=false grace=30",
			"Running deleting=true grace=30",
			"Succeeded deleting=true grace=30",
		}))
		Expect(sim.StopRequests()).To(ContainElement(simulator.StopRequest{Namespace: ns, Name: "sonoma", GracePeriod: ptr.To[int64](30)}))
	})

	It("answers 409 Conflict when the VirtualMachine is already stopped", func() {
		vm := newVM(ns, "mac")
		vm.Spec.RunStrategy = ptr.To(kubevirtv1.RunStrategyHalted)
		create(vm)

		code, st := call(http.MethodPut, stopURL(server, ns, "mac"), "")
		Expect(code).To(Equal(http.StatusConflict))
		Expect(st).NotTo(BeNil())
		Expect(st.Reason).To(Equal(metav1.StatusReasonConflict))
		Expect(st.Message).To(ContainSubstring("VM is not running"))
		Expect(sim.StopRequests()).To(ContainElement(simulator.StopRequest{Namespace: ns, Name: "mac"}))
	})

	It("answers 404 Not Found with a Status body when the VirtualMachine does not exist", func() {
		code, st := call(http.MethodPut, stopURL(server, ns, "ghost"), `{}`)
		Expect(code).To(Equal(http.StatusNotFound))
		Expect(st).NotTo(BeNil())
		Expect(st.Reason).To(Equal(metav1.StatusReasonNotFound))
		Expect(st.Details.Name).To(Equal("ghost"))
		Expect(st.Details.Group).To(Equal("kubevirt.io"))
	})

	It("rejects other methods, other paths and malformed bodies", func() {
		code, _ := call(http.MethodGet, stopURL(server, ns, "mac"), "")
		Expect(code).To(Equal(http.StatusMethodNotAllowed))
		code, _ = call(http.MethodPut, server.URL+"/apis/subresources.kubevirt.io/v1/namespaces/"+ns+"/virtualmachines/mac/start", "")
		Expect(code).To(Equal(http.StatusNotFound))
		code, st := call(http.MethodPut, stopURL(server, ns, "mac"), `{"gracePeriod": "soon"}`)
		Expect(code).To(Equal(http.StatusBadRequest))
		Expect(st).NotTo(BeNil())
		Expect(st.Reason).To(Equal(metav1.StatusReasonBadRequest))
	})
})
