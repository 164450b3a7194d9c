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
	"errors"
	"fmt"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// validatePVCClone is CDI's check of a clone against its source PVC: the
// content types match and, for a spec.pvc request or a Block source, the
// target is no smaller than the source
// (pkg/controller/datavolume/pvc-clone-controller.go, validateClone).
func validatePVCClone(source *corev1.PersistentVolumeClaim, spec *cdiv1.DataVolumeSpec) error {
	srcType := cdiv1.DataVolumeContentType(source.Annotations[annContentType])
	if srcType != cdiv1.DataVolumeArchive {
		srcType = cdiv1.DataVolumeKubeVirt
	}
	dstType := spec.ContentType
	if dstType == "" {
		dstType = cdiv1.DataVolumeKubeVirt
	}
	if srcType != dstType {
		return fmt.Errorf("Source contentType (%s) and target contentType (%s) do not match", srcType, dstType) //nolint:staticcheck // CDI's words.
	}
	var target corev1.VolumeResourceRequirements
	hasSize := true
	switch {
	case spec.PVC != nil:
		target = spec.PVC.Resources
	case spec.Storage != nil:
		_, hasSize = spec.Storage.Resources.Requests[corev1.ResourceStorage]
		target = spec.Storage.Resources
	}
	if (hasSize && spec.Storage != nil && volumeModeOf(source.Spec.VolumeMode) == corev1.PersistentVolumeBlock) || spec.PVC != nil {
		return validateCloneSize(source.Spec.Resources.Requests, target.Requests)
	}
	return nil
}

// validateSnapshotClone is CDI's check of a restore against its source
// snapshot (snapshot-clone-controller.go, validateSnapshotClone;
// pkg/controller/common/util.go, IsSnapshotValidForClone). A snapshot not
// yet ready passes: CDI lets the restore wait for it.
func validateSnapshotClone(snap *snapshotv1.VolumeSnapshot, spec *cdiv1.DataVolumeSpec) error {
	if snap.Status == nil {
		return errors.New("no status on source snapshot yet")
	}
	if snap.Status.Error != nil {
		msg := "no details"
		if snap.Status.Error.Message != nil {
			msg = *snap.Status.Error.Message
		}
		return fmt.Errorf("snapshot in error state with msg: %s", msg)
	}
	if snap.Spec.VolumeSnapshotClassName == nil || *snap.Spec.VolumeSnapshotClassName == "" {
		// CDI names the snapshot name first, then its namespace.
		return fmt.Errorf("snapshot %s/%s does not have volume snap class populated, can't clone", snap.Name, snap.Namespace)
	}
	size := snap.Status.RestoreSize
	if size == nil || size.Sign() < 0 {
		return errors.New("snapshot has no restore size")
	}
	var target corev1.ResourceList
	hasSize := true
	switch {
	case spec.PVC != nil:
		target = spec.PVC.Resources.Requests
	case spec.Storage != nil:
		_, hasSize = spec.Storage.Resources.Requests[corev1.ResourceStorage]
		target = spec.Storage.Resources.Requests
	}
	switch {
	case hasSize && size.Sign() > 0:
		return validateCloneSize(corev1.ResourceList{corev1.ResourceStorage: *size}, target)
	case !hasSize && size.Sign() == 0:
		return errors.New("size not specified by user/provisioner, can't tell how much needed for restore")
	}
	return nil
}

// validateCloneSize refuses a target smaller than its source
// (pkg/controller/common/util.go, ValidateRequestedCloneSize).
func validateCloneSize(source, target corev1.ResourceList) error {
	src, hasSrc := source[corev1.ResourceStorage]
	dst, hasDst := target[corev1.ResourceStorage]
	if !hasSrc || !hasDst {
		return errors.New("source/target missing storage resource requests")
	}
	if src.Value() > dst.Value() {
		return fmt.Errorf("target resources requests storage size is smaller than the source %d < %d", dst.Value(), src.Value())
	}
	return nil
}
