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

package class

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/classhistory"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/render"
)

// +kubebuilder:rbac:groups=cdi.kubevirt.io,resources=dataimportcrons,verbs=list;watch;create;update;delete
// +kubebuilder:rbac:groups=cdi.kubevirt.io,resources=storageprofiles,verbs=list;watch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=list;watch

// labelDataImportCron is CDI's label on the objects a DataImportCron made
// (pkg/controller/common/util.go, LabelDataImportCronName).
const labelDataImportCron = "cdi.kubevirt.io/dataImportCron"

// annDesiredDigest is the annotation CDI keeps on a DataImportCron with the
// digest it last polled (pkg/controller/common/util.go,
// AnnSourceDesiredDigest).
const annDesiredDigest = "cdi.kubevirt.io/storage.import.sourceDesiredDigest"

// ImportName is the name of the DataImportCron, and of the DataSource it
// keeps, of a class's refreshed image, in the images namespace.
func ImportName(class string) string {
	return classhistory.Shorten(class, 63-len("-image")) + "-image"
}

// ensureImageImport keeps the DataImportCron of a class whose image is
// refreshed from a registry, and resolves the import machines clone (the
// managed DataSource's source) into s.Image. A class without refresh has
// none; its cron is removed with the owner reference's garbage collection
// when the class goes, and here when refresh is turned off.
func (r *Reconciler) ensureImageImport(ctx context.Context, s *classScope) (bool, error) {
	if s.Class == nil || r.ImagesNamespace == "" {
		return true, nil
	}
	key := types.NamespacedName{Namespace: r.ImagesNamespace, Name: ImportName(s.Class.Name)}
	have := &cdiv1.DataImportCron{}
	if err := base.GetOptional(ctx, r.Client, key, have); err != nil {
		return false, err
	}
	refresh := s.Class.Spec.Image.Refresh
	if refresh == nil || s.Class.Spec.OnHosts() {
		// A Virtualization class's hosts pull the image again themselves.
		if have.Name != "" && metav1.IsControlledBy(have, s.Class) {
			if err := r.Delete(ctx, have); err != nil && !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("deleting DataImportCron %s of a class no longer refreshed: %w", key, err)
			}
		}
		return true, nil
	}
	want := desiredImport(s.Class, key)
	switch {
	case have.Name == "":
		if err := r.Create(ctx, want); apierrors.IsNotFound(err) {
			s.ImageProblem = &base.Problem{Reason: macvirtv1alpha1.ReasonImageImporting,
				Message: fmt.Sprintf("the images namespace %s does not exist: create it (kubectl create namespace %s)", key.Namespace, key.Namespace)}
			return true, nil
		} else if err != nil && !apierrors.IsAlreadyExists(err) {
			return false, fmt.Errorf("creating DataImportCron %s: %w", key, err)
		}
		ctrl.LoggerFrom(ctx).Info("created DataImportCron for the class's registry image", "dataImportCron", key)
		have = want
	case !metav1.IsControlledBy(have, s.Class):
		s.ImageProblem = &base.Problem{Reason: macvirtv1alpha1.ReasonNotOwned,
			Message: fmt.Sprintf("DataImportCron %s exists and is not this class's; delete or rename it", key)}
		return true, nil
	case !equality.Semantic.DeepEqual(have.Spec, want.Spec):
		have.Spec = want.Spec
		if err := r.Update(ctx, have); err != nil {
			return false, fmt.Errorf("updating DataImportCron %s: %w", key, err)
		}
	}
	img := &macvirtv1alpha1.ClassImageStatus{DataImportCron: key.Name, DataSource: key.Name, Digest: have.Annotations[annDesiredDigest]}
	if prev := s.Class.Status.Image; prev != nil {
		// Until the DataSource points at a ready import, machines keep
		// cloning the one resolved before.
		img.Resolved = prev.Resolved
	}
	ds := &cdiv1.DataSource{}
	if err := base.GetOptional(ctx, r.Client, key, ds); err != nil {
		return false, err
	}
	switch {
	case ds.Name != "" && ds.Labels[labelDataImportCron] != key.Name:
		// Not the cron's: a DataSource of that name made otherwise (a
		// MacImage of that name, say) must not become the class's image.
		s.ImageProblem = &base.Problem{Reason: macvirtv1alpha1.ReasonNotOwned, Message: fmt.Sprintf(
			"DataSource %s is not the one DataImportCron %s keeps (CDI labels its own %s=%s); delete or rename it", key, key.Name, labelDataImportCron, key.Name)}
	case resolvedSource(ds) != nil:
		img.Resolved = resolvedSource(ds)
	}
	s.Image = img
	return true, nil
}

// desiredImport is the DataImportCron of a class's refreshed image: it
// polls the registry on the class's schedule and imports each new digest
// at the class's size and storage class, keeping importsToKeep imports.
func desiredImport(class *macvirtv1alpha1.MacClass, key types.NamespacedName) *cdiv1.DataImportCron {
	img := class.Spec.Image
	keep := macvirtv1alpha1.DefaultImportsToKeep
	if img.Refresh.ImportsToKeep != nil {
		keep = *img.Refresh.ImportsToKeep
	}
	size := img.SizeOrDefault()
	gc := cdiv1.DataImportCronGarbageCollectOutdated
	return &cdiv1.DataImportCron{
		ObjectMeta: metav1.ObjectMeta{
			Name: key.Name, Namespace: key.Namespace,
			Labels: map[string]string{macvirtv1alpha1.LabelClass: classhistory.ClassLabel(class.Name)},
			// Without blockOwnerDeletion, which where OwnerReferencesPermissionEnforcement
			// is on (OpenShift) would need update on macclasses/finalizers,
			// a right the operator has no other use for.
			OwnerReferences: []metav1.OwnerReference{base.ControllerRef("MacClass", class.Name, class.UID)},
		},
		Spec: cdiv1.DataImportCronSpec{
			Template: cdiv1.DataVolume{
				Spec: cdiv1.DataVolumeSpec{
					Source: &cdiv1.DataVolumeSource{Registry: img.Source.Registry.DeepCopy()},
					Storage: &cdiv1.StorageSpec{
						Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
						StorageClassName: img.StorageClassName,
					},
				},
			},
			Schedule:          img.Refresh.Schedule,
			GarbageCollect:    &gc,
			ImportsToKeep:     ptr.To(keep),
			ManagedDataSource: key.Name,
		},
	}
}

// resolvedSource is the import a DataSource points at, once CDI reports
// it Ready; nil before.
func resolvedSource(ds *cdiv1.DataSource) *macvirtv1alpha1.ResolvedImage {
	if ds.Name == "" {
		return nil
	}
	if _, notReady := dataSourceNotReady(ds); notReady {
		return nil
	}
	ns := func(n string) string {
		if n == "" {
			return ds.Namespace
		}
		return n
	}
	switch src := ds.Spec.Source; {
	case src.PVC != nil:
		return &macvirtv1alpha1.ResolvedImage{Kind: macvirtv1alpha1.ImagePublishedAsPVC, Namespace: ns(src.PVC.Namespace), Name: src.PVC.Name}
	case src.Snapshot != nil:
		return &macvirtv1alpha1.ResolvedImage{Kind: macvirtv1alpha1.ImagePublishedAsSnapshot, Namespace: ns(src.Snapshot.Namespace), Name: src.Snapshot.Name}
	}
	return nil
}

// observeCloneStrategy reads how CDI will clone the class's image for each
// machine: the StorageProfile of the machines' storage class (the image's,
// else the cluster's default).
func (r *Reconciler) observeCloneStrategy(ctx context.Context, s *classScope) (bool, error) {
	if s.Class == nil {
		return true, nil
	}
	name := ptr.Deref(s.Class.Spec.Image.StorageClassName, "")
	if name == "" {
		def, err := base.DefaultStorageClass(ctx, r.Client)
		if err != nil {
			return false, err
		}
		if def != nil {
			name = def.Name
		}
	}
	s.StorageClass = name
	if name == "" {
		return true, nil
	}
	profile := &cdiv1.StorageProfile{}
	if err := base.GetOptional(ctx, r.Client, types.NamespacedName{Name: name}, profile); err != nil {
		if apierrors.IsForbidden(err) {
			return true, nil
		}
		return false, err
	}
	if profile.Name != "" && profile.Status.CloneStrategy != nil {
		s.CloneStrategy = string(*profile.Status.CloneStrategy)
	}
	return true, nil
}

// withImage is the class as machines of its current revision see it: its
// refreshed image resolved as s.Image says.
func withImage(class *macvirtv1alpha1.MacClass, img *macvirtv1alpha1.ClassImageStatus) *macvirtv1alpha1.MacClass {
	if class.Spec.Image.Refresh == nil || class.Spec.OnHosts() {
		return class
	}
	c := class.DeepCopy()
	c.Status.Image = img
	return c
}

// revisionOf is the class's revision with its image resolved.
func revisionOf(class *macvirtv1alpha1.MacClass, img *macvirtv1alpha1.ClassImageStatus) string {
	return render.ClassRevision(withImage(class, img))
}
