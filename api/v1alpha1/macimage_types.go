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

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// ImagePhase is where a capture stands.
// +kubebuilder:validation:Enum=Pending;Stopping;Copying;Publishing;Ready;Failed
type ImagePhase string

// Image phases.
const (
	// ImagePending: the source is being looked up.
	ImagePending ImagePhase = "Pending"
	// ImageStopping: the source Mac is being stopped gracefully.
	ImageStopping ImagePhase = "Stopping"
	// ImageCopying: CDI is cloning the stopped Mac's system disk.
	ImageCopying ImagePhase = "Copying"
	// ImagePublishing: the copy is done; it is being snapshotted or its
	// DataSource written.
	ImagePublishing ImagePhase = "Publishing"
	// ImageReady: the DataSource is published; classes may use it.
	ImageReady ImagePhase = "Ready"
	// ImageFailed: the capture cannot finish (the message says why).
	ImageFailed ImagePhase = "Failed"
)

// Image publication kinds.
const (
	// ImagePublishedAsPVC: the DataSource names the cloned PVC.
	ImagePublishedAsPVC = "PersistentVolumeClaim"
	// ImagePublishedAsSnapshot: the DataSource names a VolumeSnapshot of
	// the cloned PVC, where its storage class can snapshot.
	ImagePublishedAsSnapshot = "VolumeSnapshot"
)

// Image reasons (condition Ready).
const (
	// ReasonSourceNotFound: the claim or machine to capture does not exist
	// or has no machine.
	ReasonSourceNotFound = "SourceNotFound"
	// ReasonSourceNotCapturable: the machine is being deleted, failed, or
	// never provisioned a system disk.
	ReasonSourceNotCapturable = "SourceNotCapturable"
	// ReasonStoppingSource: waiting for the source Mac's graceful stop.
	ReasonStoppingSource = "StoppingSource"
	// ReasonCopying: CDI is cloning the system disk.
	ReasonCopying = "Copying"
	// ReasonCopyFailed: CDI reports the clone failed.
	ReasonCopyFailed = "CopyFailed"
	// ReasonPublishing: snapshotting the copy or writing its DataSource.
	ReasonPublishing = "Publishing"
	// ReasonPublished: the DataSource is ready for classes.
	ReasonPublished = "Published"
)

// AnnotationCapture is set on a MacMachine, with spec.running false, by the
// MacImage that stopped it to capture it (the MacImage's name); it is
// removed, and the machine started again, once the copy no longer needs
// the disk.
const AnnotationCapture = "macvirt.io/capture"

// LabelImage names the MacImage on the objects made for it.
const LabelImage = "macvirt.io/image"

// NamespacedName names a namespaced object.
type NamespacedName struct {
	// namespace of the object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +required
	Namespace string `json:"namespace"`
	// name of the object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// ImageSource is the Mac to capture: a claim's bound machine, or a machine
// (bound or released) by name.
// +kubebuilder:validation:XValidation:rule="has(self.claim) != has(self.machine)",message="set exactly one of source.claim or source.machine"
type ImageSource struct {
	// claim is a MacClaim whose bound machine is captured.
	// +optional
	Claim *NamespacedName `json:"claim,omitempty"`
	// machine is a MacMachine, bound or released, to capture.
	// +optional
	Machine *NamespacedName `json:"machine,omitempty"`
}

// MacImageSpec says which Mac to capture.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a MacImage's spec is immutable: capture again under another name"
type MacImageSpec struct {
	// source is the Mac to capture. Capturing stops it gracefully (the
	// APFS-safe stop), copies its system disk, and starts it again if it
	// was running.
	// +required
	Source ImageSource `json:"source"`

	// storageClassName is the StorageClass of the image's volume; the
	// source disk's when empty. Pick one whose StorageProfile clones by
	// snapshot or csi-clone so machines clone fast (docs/storage.md).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`

	// description says what the image holds (macOS 15.5 + Xcode 16, say).
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Description string `json:"description,omitempty"`
}

// ImageCopyStatus is how the system disk was copied.
type ImageCopyStatus struct {
	// dataVolume is the CDI DataVolume cloning the disk, in the images
	// namespace.
	// +optional
	DataVolume string `json:"dataVolume,omitempty"`
	// cloneStrategy is what CDI used: snapshot, csi-clone or copy.
	// +optional
	CloneStrategy string `json:"cloneStrategy,omitempty"`
	// progress is CDI's progress of the copy.
	// +optional
	Progress string `json:"progress,omitempty"`
	// startedAt is when the copy was asked for.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// completedAt is when CDI reported it done.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`
}

// MacImageStatus is the capture's progress and its result.
type MacImageStatus struct {
	// observedGeneration is the generation the status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase is Pending, Stopping, Copying, Publishing, Ready or Failed.
	// +optional
	Phase ImagePhase `json:"phase,omitempty"`

	// machine is the MacMachine captured.
	// +optional
	Machine *ObjectRef `json:"machine,omitempty"`

	// copy is how the disk was copied.
	// +optional
	Copy *ImageCopyStatus `json:"copy,omitempty"`

	// publishedAs is what the DataSource names: PersistentVolumeClaim, or
	// VolumeSnapshot where the storage class can snapshot.
	// +optional
	PublishedAs string `json:"publishedAs,omitempty"`

	// dataSource is the published CDI DataSource, in the images namespace,
	// as a class's image.sourceRef names it.
	// +optional
	DataSource *NamespacedName `json:"dataSource,omitempty"`

	// size is the image's size (its volume's capacity).
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`

	// conditions: Ready, and Stalled when the capture cannot go on.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MacImage captures a Mac's system disk as a golden image: it stops the
// Mac gracefully, clones its disk into the images namespace, and publishes
// a CDI DataSource there that classes reference (image.sourceRef).
// Cluster-scoped: an image is published for every class of the cluster, so
// only admins create them (docs/golden-image.md).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=mimg,categories=macvirt
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Machine",type=string,JSONPath=`.status.machine.name`
// +kubebuilder:printcolumn:name="Strategy",type=string,JSONPath=`.status.copy.cloneStrategy`
// +kubebuilder:printcolumn:name="Progress",type=string,JSONPath=`.status.copy.progress`
// +kubebuilder:printcolumn:name="Size",type=string,JSONPath=`.status.size`
// +kubebuilder:printcolumn:name="DataSource",type=string,JSONPath=`.status.dataSource.name`
// +kubebuilder:printcolumn:name="Published",type=string,JSONPath=`.status.publishedAs`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MacImage struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says which Mac to capture.
	// +required
	Spec MacImageSpec `json:"spec"`

	// status is the capture's progress.
	// +optional
	Status MacImageStatus `json:"status,omitempty"`
}

// MacImageList is a list of MacImages.
// +kubebuilder:object:root=true
type MacImageList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the images.
	Items []MacImage `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &MacImage{}, &MacImageList{})
		return nil
	})
}
