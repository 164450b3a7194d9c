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
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
// 202 Accepted and halts the VirtualMachine, 404 when it does not exist and
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

// stop applies virt-api's stop semantics. A supplied grace period is first
// written to a live instance. A VirtualMachine already Halted only accepts a
// shorter grace period for an instance still shutting down. Otherwise the
// VirtualMachine is halted: spec.runStrategy becomes Halted, or spec.running
// false when the VirtualMachine uses that field. For RerunOnFailure and
// Manual, which virt-api stops through a status change request instead, the
// simulator halts the VirtualMachine too, once it checked that it runs.
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
			return apierrors.NewInternalError(fmt.Errorf("unable to retrieve vmi [%s]: %w", key.Name, err))
		}
		vmi = nil
	}
	live := vmi != nil && !vmi.IsFinal()
	var oldGrace *int64
	if live && opts.GracePeriod != nil {
		oldGrace = vmi.Spec.TerminationGracePeriodSeconds
		if serr := s.patchGracePeriod(ctx, vmi, *opts.GracePeriod, opts.DryRun); serr != nil {
			return serr
		}
	}
	conflict := func(msg string) *apierrors.StatusError {
		return apierrors.NewConflict(kubevirtv1.Resource("virtualmachine"), key.Name, errors.New(msg))
	}
	switch strategy {
	case kubevirtv1.RunStrategyHalted:
		if !live {
			return conflict(vmNotRunning)
		}
		if opts.GracePeriod == nil || (oldGrace != nil && *opts.GracePeriod >= *oldGrace) {
			return conflict(fmt.Sprintf("%v only supports manual stop requests with a shorter graceperiod", strategy))
		}
		return nil
	case kubevirtv1.RunStrategyRerunOnFailure, kubevirtv1.RunStrategyManual:
		if !live {
			return conflict(vmNotRunning)
		}
	}
	return s.halt(ctx, vm, opts.DryRun)
}

// halt sets the VirtualMachine's run strategy to Halted (or spec.running to
// false), failing with a conflict if the VirtualMachine changed meanwhile.
func (s *Simulator) halt(ctx context.Context, vm *kubevirtv1.VirtualMachine, dryRun []string) *apierrors.StatusError {
	base := vm.DeepCopy()
	if vm.Spec.Running != nil {
		vm.Spec.Running = ptr.To(false)
	} else {
		vm.Spec.RunStrategy = ptr.To(kubevirtv1.RunStrategyHalted)
	}
	patch := client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})
	if err := s.client.Patch(ctx, vm, patch, dryRunOpts(dryRun)...); err != nil {
		if apierrors.IsConflict(err) {
			return apierrors.NewConflict(kubevirtv1.Resource("virtualmachine"), vm.Name, err)
		}
		return apierrors.NewInternalError(fmt.Errorf("halting VirtualMachine %s/%s: %w", vm.Namespace, vm.Name, err))
	}
	ctrl.LoggerFrom(ctx).Info("Stop requested", "virtualMachine", client.ObjectKeyFromObject(vm))
	return nil
}

// patchGracePeriod writes the stop's grace period to the instance, which
// bounds how long the guest is given to shut down.
func (s *Simulator) patchGracePeriod(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, grace int64, dryRun []string) *apierrors.StatusError {
	base := vmi.DeepCopy()
	vmi.Spec.TerminationGracePeriodSeconds = ptr.To(grace)
	patch := client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})
	if err := s.client.Patch(ctx, vmi, patch, dryRunOpts(dryRun)...); err != nil {
		if apierrors.IsConflict(err) {
			return apierrors.NewConflict(kubevirtv1.Resource("virtualmachineinstance"), vmi.Name, err)
		}
		return apierrors.NewInternalError(fmt.Errorf("setting grace period of VirtualMachineInstance %s/%s: %w", vmi.Namespace, vmi.Name, err))
	}
	return nil
}

func dryRunOpts(dryRun []string) []client.PatchOption {
	if slices.Contains(dryRun, metav1.DryRunAll) {
		return []client.PatchOption{client.DryRunAll}
	}
	return nil
}

// writeStatus answers with err's metav1.Status, as virt-api does.
func writeStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	st := err.ErrStatus
	st.Kind, st.APIVersion = "Status", "v1"
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(st.Code))
	_ = json.NewEncoder(w).Encode(st)
}
