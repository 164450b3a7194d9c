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
	"maps"
	"math"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// The PVC CDI creates for a DataVolume: same name and namespace, owned by
// the DataVolume, its spec rendered from the DataVolume's spec.pvc as is or
// from spec.storage with the StorageProfile's defaults and the filesystem
// overhead.

// Annotations and labels CDI puts on a DataVolume's PVC
// (pkg/controller/common/util.go; pkg/common/common.go).
const (
	annContentType            = "cdi.kubevirt.io/storage.contentType"
	annPodRestarts            = "cdi.kubevirt.io/storage.pod.restarts"
	annPreallocationRequested = "cdi.kubevirt.io/storage.preallocation.requested"
	annCreatedForDataVolume   = "cdi.kubevirt.io/createdForDataVolume"
	annImportSource           = "cdi.kubevirt.io/storage.import.source"
	annImportEndpoint         = "cdi.kubevirt.io/storage.import.endpoint"
	annCloneRequest           = "k8s.io/CloneRequest"
	annMinimumSupportedPVC    = "cdi.kubevirt.io/minimumSupportedPvcSize"

	labelCDI            = "app"
	labelCDIValue       = "containerized-data-importer"
	labelFillingUp      = "alerts.k8s.io/KubePersistentVolumeFillingUp"
	labelFillingUpValue = "disabled"
)

// filesystemOverhead is the share of a Filesystem volume CDI keeps for the
// file system by default (pkg/common/common.go, DefaultGlobalOverhead).
const filesystemOverhead = 0.06

// minClaimSize is the smallest disk KubeVirt and CDI accept.
const minClaimSize = 1 << 20

// renderClaimSpec is the spec of the PVC CDI creates for dv
// (pkg/controller/datavolume/util.go, renderPvcSpec, pvcFromStorage,
// renderPvcSpecVolumeModeAndAccessModesAndStorageClass,
// renderPvcSpecVolumeSize): spec.pvc as is; spec.storage with the class
// (sc: named, or CDI's default) filled in, the access and volume modes the
// class's StorageProfile prefers where the DataVolume gives none, and the
// requested size grown by the filesystem overhead on Filesystem volumes
// and raised to the profile's minimum. A clone that requests no size gets
// the source's, detected (CDI's size detection). Where CDI refuses a
// DataVolume that gives no access modes and whose class's profile names
// none (or that has no class at all), the simulator asks for
// ReadWriteOnce.
func renderClaimSpec(dv *cdiv1.DataVolume, sc *storagev1.StorageClass, profile *cdiv1.StorageProfile,
	clone bool, detected resource.Quantity) (corev1.PersistentVolumeClaimSpec, error) {
	if dv.Spec.PVC != nil {
		return *dv.Spec.PVC.DeepCopy(), nil
	}
	if dv.Spec.Storage == nil {
		return corev1.PersistentVolumeClaimSpec{}, errors.New("datavolume one of {pvc, storage} field is required")
	}
	in := dv.Spec.Storage.DeepCopy()
	spec := corev1.PersistentVolumeClaimSpec{
		AccessModes: in.AccessModes, Selector: in.Selector, Resources: in.Resources, VolumeName: in.VolumeName,
		StorageClassName: in.StorageClassName, VolumeMode: in.VolumeMode, DataSource: in.DataSource, DataSourceRef: in.DataSourceRef,
	}
	if dv.Spec.ContentType == cdiv1.DataVolumeArchive {
		if volumeModeOf(spec.VolumeMode) == corev1.PersistentVolumeBlock && spec.VolumeMode != nil {
			return spec, errors.New("ContentType Archive cannot have block volumeMode")
		}
		spec.VolumeMode = ptr.To(corev1.PersistentVolumeFilesystem)
	}
	if sc != nil {
		spec.StorageClassName = ptr.To(sc.Name)
		if profile != nil {
			applyClaimProperties(&spec, profile.Status.ClaimPropertySets)
		}
	}
	if len(spec.AccessModes) == 0 {
		spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	requested, found := spec.Resources.Requests[corev1.ResourceStorage]
	if !found {
		if !clone {
			return spec, errors.New("PVC Spec is not valid - missing storage size")
		}
		setClaimSize(&spec, detected)
		return spec, nil
	}
	if requested.Value() < minClaimSize {
		return spec, errors.New("PVC Spec is not valid - storage size should be at least 1MiB")
	}
	size := requested.Value()
	if volumeModeOf(spec.VolumeMode) == corev1.PersistentVolumeFilesystem {
		size = withOverhead(size, filesystemOverhead)
	}
	q := *resource.NewScaledQuantity(size, 0)
	if profile != nil {
		if m, err := resource.ParseQuantity(profile.Annotations[annMinimumSupportedPVC]); err == nil && q.Cmp(m) < 0 {
			q = m
		}
	}
	setClaimSize(&spec, q)
	return spec, nil
}

// applyClaimProperties fills the access and volume modes a spec leaves
// out from the profile's claim property sets: both from the first set when
// both are missing, the access modes of the first set of the spec's volume
// mode, or the volume mode of the first set sharing an access mode
// (getDefaultVolumeAndAccessMode, getDefaultAccessModes,
// getDefaultVolumeMode).
func applyClaimProperties(spec *corev1.PersistentVolumeClaimSpec, sets []cdiv1.ClaimPropertySet) {
	noMode := spec.VolumeMode == nil || *spec.VolumeMode == ""
	switch {
	case noMode && len(spec.AccessModes) == 0:
		if len(sets) > 0 && len(sets[0].AccessModes) > 0 {
			spec.AccessModes = append(spec.AccessModes, sets[0].AccessModes...)
			spec.VolumeMode = sets[0].VolumeMode
		}
	case len(spec.AccessModes) == 0:
		for _, cps := range sets {
			if cps.VolumeMode != nil && *cps.VolumeMode == *spec.VolumeMode && len(cps.AccessModes) > 0 {
				spec.AccessModes = append(spec.AccessModes, cps.AccessModes...)
				return
			}
		}
	case noMode:
		for _, cps := range sets {
			for _, m := range cps.AccessModes {
				if slices.Contains(spec.AccessModes, m) {
					spec.VolumeMode = cps.VolumeMode
					return
				}
			}
		}
	}
}

// withOverhead is the size a Filesystem volume needs for an image of size
// bytes: the size rounded up to whole MiB, plus the overhead's share
// (pkg/util/util.go, GetRequiredSpace).
func withOverhead(size int64, overhead float64) int64 {
	aligned := (size + minClaimSize - 1) / minClaimSize * minClaimSize
	return int64(math.Ceil(float64(aligned) * (1 + overhead)))
}

func setClaimSize(spec *corev1.PersistentVolumeClaimSpec, q resource.Quantity) {
	if spec.Resources.Requests == nil {
		spec.Resources.Requests = corev1.ResourceList{}
	}
	spec.Resources.Requests[corev1.ResourceStorage] = q
}

// newClaim is the PVC CDI creates for dv with spec
// (pkg/controller/datavolume/controller-base.go, newPersistentVolumeClaim;
// pkg/util/util.go, SetRecommendedLabels): the DataVolume's labels and
// annotations, CDI's own, extra (the import's source, the clone's type),
// and a controller reference to the DataVolume.
func newClaim(dv *cdiv1.DataVolume, spec corev1.PersistentVolumeClaimSpec, extra map[string]string) *corev1.PersistentVolumeClaim {
	labels := map[string]string{labelCDI: labelCDIValue}
	if volumeModeOf(spec.VolumeMode) == corev1.PersistentVolumeFilesystem {
		labels[labelFillingUp] = labelFillingUpValue
	}
	maps.Copy(labels, dv.Labels)
	labels["app.kubernetes.io/managed-by"] = "cdi-controller"
	labels["app.kubernetes.io/component"] = "storage"
	ann := maps.Clone(dv.Annotations)
	if ann == nil {
		ann = map[string]string{}
	}
	contentType := dv.Spec.ContentType
	if contentType != cdiv1.DataVolumeArchive {
		contentType = cdiv1.DataVolumeKubeVirt
	}
	ann[annPodRestarts] = "0"
	ann[annContentType] = string(contentType)
	ann[annPreallocationRequested] = strconv.FormatBool(dv.Spec.Preallocation != nil && *dv.Spec.Preallocation)
	ann[annCreatedForDataVolume] = string(dv.UID)
	maps.Copy(ann, extra)
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: dv.Namespace, Name: dv.Name, Labels: labels, Annotations: ann,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(dv, cdiv1.SchemeGroupVersion.WithKind("DataVolume"))},
		},
		Spec: spec,
	}
}

// importAnnotations are those CDI's import controller puts on the PVC of
// an import for its importer (pkg/controller/datavolume/import-controller.go,
// updateAnnotations; pkg/controller/common/util.go, UpdateHTTPAnnotations
// and the like).
func importAnnotations(src *cdiv1.DataVolumeSource) map[string]string {
	ann := map[string]string{}
	switch {
	case src == nil:
	case src.HTTP != nil:
		ann[annImportSource], ann[annImportEndpoint] = "http", src.HTTP.URL
	case src.S3 != nil:
		ann[annImportSource], ann[annImportEndpoint] = "s3", src.S3.URL
	case src.GCS != nil:
		ann[annImportSource], ann[annImportEndpoint] = "gcs", src.GCS.URL
	case src.Registry != nil:
		ann[annImportSource] = "registry"
		if src.Registry.URL != nil {
			ann[annImportEndpoint] = *src.Registry.URL
		}
	case src.Blank != nil:
		ann[annImportSource] = "none"
	}
	return ann
}

// cloneAnnotations are those a clone's PVC carries: its strategy
// (AnnCloneType) and why CDI fell back to copy, as the clone populator
// records them (pkg/controller/populators/clone-populator.go,
// initTargetClaim) or, for the legacy clone, the DataVolume controller
// with the source it asks the host-assisted cloner for
// (pkg/controller/datavolume/clone-controller-base.go,
// fallbackToHostAssisted; pvc-clone-controller.go and
// snapshot-clone-controller.go, updateAnnotations).
func cloneAnnotations(dv *cdiv1.DataVolume, src *cloneSource, choice cloneChoice) map[string]string {
	ann := map[string]string{AnnCloneType: string(choice.plan.strategy)}
	if choice.fallbackMessage != "" {
		ann[annCloneFallbackReason] = choice.fallbackMessage
	}
	if !choice.plan.populator {
		name := src.name
		if src.kind == "snapshot" {
			name = fmt.Sprintf("%s-host-assisted-source-pvc", dv.UID)
		}
		ann[annCloneRequest] = src.namespace + "/" + name
	}
	return ann
}
