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

// Package image captures a Mac as a golden image (MacImage): it stops the
// Mac gracefully (spec.running false, the APFS-safe stop), has CDI clone
// its system disk into the images namespace, starts the Mac again if it
// stopped it, and publishes a CDI DataSource there, on a VolumeSnapshot of
// the copy where its storage class can snapshot, else on the copy's PVC.
//
// The reconciler has the shape of every kind's: gather a scope, ordered
// (proceed, err) steps, a pure computeImageStatus, one deferred status
// write without side effects.
package image
