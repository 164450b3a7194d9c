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

// Package simulator stands in for KubeVirt's virt-controller, virt-handler
// and virt-api stop endpoint, and for CDI's DataVolume controllers, on a
// cluster that has none of them, such as envtest or a local sandbox.
//
// It acts on real DataVolume, VirtualMachine and VirtualMachineInstance
// objects through a controller-runtime client: DataVolumes advance through
// CDI's phases and progress, running VirtualMachines get a
// VirtualMachineInstance that is scheduled and boots, stopped ones are shut
// down after a simulated ACPI power-off, and VirtualMachine status follows
// virt-controller's printableStatus rules. The storage under them follows
// CDI, a provisioner and the CSI snapshotter: each DataVolume gets its PVC,
// each StorageClass a StorageProfile that decides how clones are made, and
// VolumeSnapshots of PVCs are cut and restored (storage.go). Failures (a
// failed import, an unschedulable VM, a crash loop) can be injected on
// demand.
//
// All progress is derived from the objects themselves plus the in-memory
// set of injected faults, so reconciles are idempotent and a restarted
// simulator resumes where the objects are; only the timers of the current
// step restart.
package simulator
