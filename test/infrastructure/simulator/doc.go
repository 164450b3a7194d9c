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

// Package simulator stands in for what runs on KubeVirt's nodes (the
// scheduler's placement of virt-launcher pods, the kubelet, virt-handler),
// for CDI's DataVolume controllers and for macOS guests, on a cluster that
// runs KubeVirt's own virt-api and virt-controller but no nodes and no CDI
// (cluster.StartWithKubeVirt): envtest, or a local sandbox.
//
// It acts on real objects through a controller-runtime client:
// DataVolumes advance through CDI's phases and progress; the launcher pods
// virt-controller creates are bound, run and end as the kubelet would; the
// instances on simulated nodes are reported Running, shut down after a
// simulated ACPI power-off, or failed, as virt-handler would, under its own
// identity. The storage under them follows CDI, a provisioner and the CSI
// snapshotter: each DataVolume gets its PVC, each StorageClass a
// StorageProfile that decides how clones are made, and VolumeSnapshots of
// PVCs are cut and restored (storage.go). Failures (a failed import, an
// unschedulable pod, a crashing domain, a lost node) can be injected on
// demand.
//
// All progress is derived from the objects themselves plus the in-memory
// set of injected faults, so reconciles are idempotent and a restarted
// simulator resumes where the objects are; only the timers of the current
// step restart.
package simulator
