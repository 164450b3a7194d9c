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

package image

import (
	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// imageScope is what one reconcile of a MacImage found and did.
type imageScope struct {
	Image *macvirtv1alpha1.MacImage
	// Machine is the Mac captured; nil until found.
	Machine *macvirtv1alpha1.MacMachine
	// Problem says why the capture cannot go on now.
	Problem *base.Problem
	// Terminal: Problem will not go away by itself.
	Terminal bool
	// Stopping: the Mac was asked to stop and has not yet.
	Stopping bool
	// Copy is the DataVolume cloning the disk; nil before it exists.
	Copy *cdiv1.DataVolume
	// Snapshot is the VolumeSnapshot of the copy, where one is made.
	Snapshot *snapshotv1.VolumeSnapshot
	// SnapshotClass is the VolumeSnapshotClass the copy is snapshotted
	// with; empty when its storage class cannot snapshot.
	SnapshotClass string
	// Published is the DataSource, once written with a ready source.
	Published *cdiv1.DataSource
	// Source is the copy's source disk: the machine's system DataVolume.
	Source *cdiv1.DataVolume
}
