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

// Condition reasons for what CDI reports about a machine's disks and a
// class's DataSources.
const (
	// ReasonDataVolumeRetrying means CDI's importer (or clone) pod failed
	// and CDI restarts it; the machine is failed once the restarts reach
	// the limit (see ReasonDataVolumeFailed).
	ReasonDataVolumeRetrying = "DataVolumeRetrying"
	// ReasonDataVolumeQuotaExceeded means the API server refuses a disk's
	// PVC for a ResourceQuota; a human must raise the quota or free storage.
	ReasonDataVolumeQuotaExceeded = "DataVolumeQuotaExceeded"
	// ReasonDiskClaimNotValid means CDI cannot make a disk's PVC from its
	// DataVolume: the DataVolume leaves the access modes to the storage
	// class's StorageProfile, which has none (a provisioner CDI does not
	// know), or there is no storage class; a human must give the profile
	// its claimPropertySets or pick another class.
	ReasonDiskClaimNotValid = "DiskClaimNotValid"
	// ReasonImporterUnschedulable means CDI's importer pod finds no node.
	ReasonImporterUnschedulable = "ImporterUnschedulable"
	// ReasonWaitingForDiskSource means a disk's clone source (a DataSource
	// or its PVC) does not exist or is not ready, so CDI does not start.
	ReasonWaitingForDiskSource = "WaitingForDiskSource"
	// ReasonWaitingForFirstConsumer means a disk's storage class binds on
	// first consumer: CDI populates it when the machine first starts.
	ReasonWaitingForFirstConsumer = "WaitingForFirstConsumer"
	// ReasonDataSourceNotReady means a class's DataSource exists but CDI
	// does not report it Ready (no source PVC yet, an import in progress).
	ReasonDataSourceNotReady = "DataSourceNotReady"
)
