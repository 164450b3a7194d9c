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

package v1alpha1

// Condition reasons of a MacMachine whose VirtualMachine cannot get to
// Running, or left it, in KubeVirt's words.
const (
	// ReasonImagePullFailed means the kubelet cannot pull an image of the
	// VM's launcher pod (KubeVirt's ErrImagePull or ImagePullBackOff), such
	// as the domain-hook sidecar image. KubeVirt keeps retrying; a human
	// must fix the image reference or the registry access.
	ReasonImagePullFailed = "ImagePullFailed"
	// ReasonStartTimeout means the VirtualMachineInstance has been Scheduled
	// (its pod placed and running) for longer than the class's bootTimeout
	// and its domain has not started, for a cause KubeVirt does not name.
	// A human must look at the virt-launcher pod.
	ReasonStartTimeout = "StartTimeout"
	// ReasonInstanceCreateFailed means KubeVirt could not create the
	// VirtualMachineInstance (the VirtualMachine's Failure condition, reason
	// FailedCreate), for example because virt-api refuses the hook sidecar
	// while the Sidecar feature gate is off.
	ReasonInstanceCreateFailed = "InstanceCreateFailed"
	// ReasonStartFailed means the VirtualMachineInstance failed before it
	// ever ran, fewer times in a row than a crash loop takes; KubeVirt
	// retries after its backoff.
	ReasonStartFailed = "StartFailed"
	// ReasonPaused means the VirtualMachineInstance is paused; a human
	// must unpause it.
	ReasonPaused = "Paused"
	// ReasonInstanceFailed means the running VirtualMachineInstance failed
	// (for example its node was lost) and KubeVirt starts a new one.
	ReasonInstanceFailed = "InstanceFailed"
)
