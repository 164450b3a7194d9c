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

// Package v1alpha1 holds the macvirt.io/v1alpha1 API: MacClass and MacPool
// (cluster-scoped, written by platform admins), MacClaim (a tenant's request
// for one Mac) and MacMachine (one macOS VirtualMachine with its disks).
//
// +kubebuilder:object:generate=true
// +groupName=macvirt.io
package v1alpha1
