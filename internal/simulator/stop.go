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

package simulator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// vmNotRunning is virt-api's message for stopping a VM that is not running.
const vmNotRunning = "VM is not running"

// maxStopBody bounds the request body the stop endpoint reads.
const maxStopBody = 1 << 20

// stopPath matches virt-api's stop subresource in both served versions.
var stopPath = regexp.MustCompile(
	`^/apis/subresources\.kubevirt\.io/(?:v1|v1alpha3)/namespaces/([^/]+)/virtualmachines/([^/]+)/stop$`)

// StopRequest records one stop call received by StopHandler.
type StopRequest struct {
	Namespace string
	Name      string
	// GracePeriod is the body's gracePeriod, nil when absent.
	GracePeriod *int64
}

// StopRequests returns the well-formed stop calls received so far, in
// order, whatever their outcome.
func (s *Simulator) StopRequests() []StopRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]StopRequest, len(s.stops))
	for i, r := range s.stops {
		out[i] = r
		if r.GracePeriod != nil {
			out[i].GracePeriod = ptr.To(*r.GracePeriod)
		}
	}
	return out
}

// StopHandler serves virt-api's VirtualMachine stop subresource,
// PUT /apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachines/{name}/stop
// with an optional kubevirtv1.StopOptions body. Like virt-api it answers
// 202 Accepted and halts the VirtualMachine or records a stop request,
// according to its run strategy (see stop), 404 when it does not exist and
// 409 when it is not running; errors carry a metav1.Status body.
func (s *Simulator) StopHandler() http.Handler {
	return http.HandlerFunc(s.serveStop)
}

func (s *Simulator) serveStop(w http.ResponseWriter, req *http.Request) {
	m := stopPath.FindStringSubmatch(req.URL.Path)
	if m == nil {
		http.NotFound(w, req)
		return
	}
	if req.Method != http.MethodPut {
		w.Header().Set("Allow", http.MethodPut)
		http.Error(w, "405: Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	opts, err := decodeStopOptions(req.Body)
	if err != nil {
		writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("Can not unmarshal Request body to struct, error: %v", err)))
		return
	}
	key := types.NamespacedName{Namespace: m[1], Name: m[2]}
	s.mu.Lock()
	s.stops = append(s.stops, StopRequest{Namespace: key.Namespace, Name: key.Name, GracePeriod: opts.GracePeriod})
	s.mu.Unlock()
	if serr := s.stop(req.Context(), key, opts); serr != nil {
		writeStatus(w, serr)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

func decodeStopOptions(body io.Reader) (*kubevirtv1.StopOptions, error) {
	opts := &kubevirtv1.StopOptions{}
	if body == nil {
		return opts, nil
	}
	data, err := io.ReadAll(io.LimitReader(body, maxStopBody))
	if err != nil {
		return nil, fmt.Errorf("reading body: %w", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return opts, nil
	}
	if err := json.Unmarshal(data, opts); err != nil {
		return nil, fmt.Errorf("decoding StopOptions: %w", err)
	}
	return opts, nil
}

// jsonpatchTestErr is how the API server reports a JSON patch whose test
// operation failed; virt-api answers such a patch with a conflict.
const jsonpatchTestErr = "jsonpatch test operation does not apply"

// stop imitates virt-api's StopVMRequestHandler (pkg/virt-api/rest/lifecycle.go):
//   - a given grace period is first written to a live instance
//     (patchVMITerminationGracePeriod);
//   - Always and Once: spec.runStrategy becomes Halted, or spec.running
//     false when the VirtualMachine uses that field (getRunningPatch);
//   - RerunOnFailure and Manual: the run strategy is kept and a stop request
//     for the instance's UID is recorded in status.stateChangeRequests
//     (patchVMStatusStopped), which the VirtualMachine controller acts on;
//     409 "VM is not running" without a live instance;
//   - Halted: 409 "VM is not running" without a live instance; otherwise
//     only a grace period shorter than the instance's is accepted, and then
//     recorded as a stop request like Manual.
func (s *Simulator) stop(ctx context.Context, key types.NamespacedName, opts *kubevirtv1.StopOptions) *apierrors.StatusError {
	s.mu.Lock()
	reader := s.reader
	s.mu.Unlock()
	vm := &kubevirtv1.VirtualMachine{}
	if err := reader.Get(ctx, key, vm); err != nil {
		if apierrors.IsNotFound(err) {
			return apierrors.NewNotFound(kubevirtv1.Resource("virtualmachine"), key.Name)
		}
		return apierrors.NewInternalError(fmt.Errorf("unable to retrieve vm [%s]: %w", key.Name, err))
	}
	strategy, err := vm.RunStrategy()
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := reader.Get(ctx, key, vmi); err != nil {
		if !apierrors.IsNotFound(err) {
			return apierrors.NewInternalError(err)
		}
		vmi = nil
	}
	live := vmi != nil && !vmi.IsFinal()
	var oldGrace int64
	if live && opts.GracePeriod != nil {
		oldGrace = ptr.Deref(vmi.Spec.TerminationGracePeriodSeconds, 0)
		if err := s.patchGracePeriod(ctx, vmi, *opts.GracePeriod, opts.DryRun); err != nil {
			return apierrors.NewInternalError(err)
		}
	}
	conflict := func(msg string) *apierrors.StatusError {
		return apierrors.NewConflict(kubevirtv1.Resource("virtualmachine"), key.Name, errors.New(msg))
	}
	var patchErr error
	switch strategy {
	case kubevirtv1.RunStrategyHalted:
		if !live {
			return conflict(vmNotRunning)
		}
		if opts.GracePeriod == nil || (vmi.Spec.TerminationGracePeriodSeconds != nil && *opts.GracePeriod >= oldGrace) {
			return conflict(fmt.Sprintf("%v only supports manual stop requests with a shorter graceperiod", strategy))
		}
		patchErr = s.requestVMIStop(ctx, vm, vmi, opts.DryRun)
	case kubevirtv1.RunStrategyRerunOnFailure, kubevirtv1.RunStrategyManual:
		if !live {
			return conflict(vmNotRunning)
		}
		patchErr = s.requestVMIStop(ctx, vm, vmi, opts.DryRun)
	case kubevirtv1.RunStrategyAlways, kubevirtv1.RunStrategyOnce:
		patchErr = s.halt(ctx, vm, opts.DryRun)
	}
	if patchErr != nil {
		if strings.Contains(patchErr.Error(), jsonpatchTestErr) {
			return apierrors.NewConflict(kubevirtv1.Resource("virtualmachine"), key.Name, patchErr)
		}
		return apierrors.NewInternalError(patchErr)
	}
	ctrl.LoggerFrom(ctx).Info("Stop requested", "virtualMachine", key, "runStrategy", strategy)
	return nil
}

// halt sets the VirtualMachine's run strategy to Halted (or spec.running to
// false) with a JSON patch that first tests the old value, as virt-api's
// getRunningPatch (pkg/virt-api/rest/lifecycle.go) does.
func (s *Simulator) halt(ctx context.Context, vm *kubevirtv1.VirtualMachine, dryRun []string) error {
	var ops []jsonPatchOp
	if vm.Spec.RunStrategy != nil {
		ops = []jsonPatchOp{
			{Op: "test", Path: "/spec/runStrategy", Value: vm.Spec.RunStrategy},
			{Op: "replace", Path: "/spec/runStrategy", Value: kubevirtv1.RunStrategyHalted},
		}
	} else {
		ops = []jsonPatchOp{
			{Op: "test", Path: "/spec/running", Value: vm.Spec.Running},
			{Op: "replace", Path: "/spec/running", Value: false},
		}
	}
	return s.client.Patch(ctx, vm, jsonPatch(ops), &client.PatchOptions{DryRun: dryRun})
}

// requestVMIStop records a stop request for the instance in the
// VirtualMachine's status, replacing any pending request, and clears a
// start failure: virt-api's patchVMStatusStopped and getChangeRequestJson
// (pkg/virt-api/rest/lifecycle.go).
func (s *Simulator) requestVMIStop(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance, dryRun []string) error {
	changes := []kubevirtv1.VirtualMachineStateChangeRequest{{Action: kubevirtv1.StopRequest, UID: ptr.To(vmi.UID)}}
	var ops []jsonPatchOp
	if equality.Semantic.DeepEqual(vm.Status, kubevirtv1.VirtualMachineStatus{}) {
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/status", Value: kubevirtv1.VirtualMachineStatus{StateChangeRequests: changes}})
	} else {
		op := "replace"
		if len(vm.Status.StateChangeRequests) == 0 {
			op = "add"
		}
		ops = append(ops,
			jsonPatchOp{Op: "test", Path: "/status/stateChangeRequests", Value: vm.Status.StateChangeRequests},
			jsonPatchOp{Op: op, Path: "/status/stateChangeRequests", Value: changes})
	}
	if vm.Status.StartFailure != nil {
		ops = append(ops, jsonPatchOp{Op: "remove", Path: "/status/startFailure"})
	}
	return s.client.Status().Patch(ctx, vm, jsonPatch(ops),
		&client.SubResourcePatchOptions{PatchOptions: client.PatchOptions{DryRun: dryRun}})
}

// patchGracePeriod writes the stop's grace period to the instance, which
// bounds how long the guest is given to shut down, testing the old value
// first (pkg/virt-api/rest/lifecycle.go, patchVMITerminationGracePeriod).
func (s *Simulator) patchGracePeriod(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, grace int64, dryRun []string) error {
	ops := []jsonPatchOp{
		{Op: "test", Path: "/spec/terminationGracePeriodSeconds", Value: vmi.Spec.TerminationGracePeriodSeconds},
		{Op: "replace", Path: "/spec/terminationGracePeriodSeconds", Value: grace},
	}
	return s.client.Patch(ctx, vmi.DeepCopy(), jsonPatch(ops), &client.PatchOptions{DryRun: dryRun})
}

// jsonPatchOp is one operation of an RFC 6902 JSON patch.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// MarshalJSON keeps a null value of a test operation, which tests absence.
func (o jsonPatchOp) MarshalJSON() ([]byte, error) {
	m := map[string]any{"op": o.Op, "path": o.Path}
	if o.Op != "remove" {
		m["value"] = o.Value
	}
	return json.Marshal(m)
}

// jsonPatch encodes ops as a JSON patch; the operations only hold values
// that always encode.
func jsonPatch(ops []jsonPatchOp) client.Patch {
	data, _ := json.Marshal(ops)
	return client.RawPatch(types.JSONPatchType, data)
}

// writeStatus answers with err's metav1.Status, as virt-api does.
func writeStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	st := err.ErrStatus
	st.Kind, st.APIVersion = "Status", "v1"
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(st.Code))
	_ = json.NewEncoder(w).Encode(st)
}
