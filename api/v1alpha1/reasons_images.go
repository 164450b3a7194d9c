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

// Conditions and reasons of golden images on classes and machines.
const (
	// ConditionFastClones is True on a class whose machines' disks are
	// cloned by snapshot or CSI clone, False when each is a full copy.
	ConditionFastClones = "FastClones"

	// ReasonWaitingForImage: a machine waits for its class's first image
	// import (image.refresh).
	ReasonWaitingForImage = "WaitingForImage"
	// ReasonImageImporting: a class's refreshed image has no import yet.
	ReasonImageImporting = "ImageImporting"
	// ReasonSnapshotClone: the storage profile clones by snapshot.
	ReasonSnapshotClone = "SnapshotClone"
	// ReasonCSIClone: the storage profile clones with the CSI driver.
	ReasonCSIClone = "CSIClone"
	// ReasonCopyOnly: the storage profile can only copy: every machine's
	// disk is a full copy of the image.
	ReasonCopyOnly = "CopyOnly"
	// ReasonStorageProfileUnknown: CDI has no StorageProfile for the
	// machines' storage class yet.
	ReasonStorageProfileUnknown = "StorageProfileUnknown"
	// ReasonImageLargerThanDisk: a class's image.size is smaller than the
	// snapshot its machines are restored from.
	ReasonImageLargerThanDisk = "ImageLargerThanDisk"
	// ReasonInstaller: an installer machine expects no guest agent.
	ReasonInstaller = "Installer"
)
