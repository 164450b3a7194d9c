package class

import (
	"context"
	"fmt"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/classhistory"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/index"
	"github.com/macvirt/macvirt/internal/controller/state"
)

// ensureSnapshot answers: is the class's current revision kept, with the
// class's current spec? A spec change the revision does not hash (a
// timeout, the tenancy) replaces the snapshot, whose data is immutable, so
// machines left with the snapshot keep the class's last word.
func (r *Reconciler) ensureSnapshot(ctx context.Context, s *classScope) (bool, error) {
	if s.Class == nil {
		return true, nil
	}
	if s.Image != nil {
		// The revision follows the import the refreshed image resolves to.
		s.Revision = revisionOf(s.Class, s.Image)
	}
	effective := withImage(s.Class, s.Image)
	want, err := classhistory.New(r.Namespace, effective, s.Revision)
	if err != nil {
		return false, err
	}
	have := &appsv1.ControllerRevision{}
	if err := base.GetOptional(ctx, r.APIReader, client.ObjectKeyFromObject(want), have); err != nil {
		return false, err
	}
	switch {
	case have.Name != "" && classhistory.Holds(have, effective):
		return true, nil
	case have.Name != "":
		uid := have.UID
		if err := r.Delete(ctx, have, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("replacing class snapshot %s/%s: %w", have.Namespace, have.Name, err)
		}
	}
	if err := r.Create(ctx, want); apierrors.IsAlreadyExists(err) {
		// A machine kept its revision in the meantime, perhaps from an
		// older cached copy of the class: look again before trusting it.
		return false, fmt.Errorf("class snapshot %s/%s was created concurrently; checking it again: %w", want.Namespace, want.Name, err)
	} else if err != nil {
		return false, fmt.Errorf("creating class snapshot %s/%s: %w", want.Namespace, want.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("kept class revision", "revision", s.Revision, "snapshot", want.Name, "replaced", have.Name != "")
	return true, nil
}

// checkSources answers: do the class's DataSources and OSK Secret exist,
// and has CDI something to clone from each DataSource?
func (r *Reconciler) checkSources(ctx context.Context, s *classScope) (bool, error) {
	if s.Class == nil {
		return true, nil
	}
	for _, ref := range state.DataSourceRefs(s.Class) {
		ds := &cdiv1.DataSource{}
		if err := r.Get(ctx, ref, ds); err != nil {
			if !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("getting DataSource %s: %w", ref, err)
			}
			s.Missing = append(s.Missing, "DataSource "+ref.String())
			continue
		}
		if why, ok := dataSourceNotReady(ds); ok {
			s.NotReady = append(s.NotReady, fmt.Sprintf("DataSource %s (%s)", ref, why))
		}
		if img := s.Class.Spec.Image.SourceRef; img != nil && ref.Name == img.Name && ds.Spec.Source.Snapshot != nil {
			if err := r.checkImageSize(ctx, s, ds); err != nil {
				return false, err
			}
		}
	}
	if smc := s.Class.Spec.Hardware.SMC; smc.Mode == macvirtv1alpha1.SMCModeAppleSMC && smc.OSKSecretRef != nil {
		key := types.NamespacedName{Namespace: smc.OSKSecretRef.Namespace, Name: smc.OSKSecretRef.Name}
		if err := r.APIReader.Get(ctx, key, &corev1.Secret{}); err != nil {
			s.Missing = append(s.Missing, fmt.Sprintf("OSK Secret %s (%s)", key, reasonOf(err)))
		}
	}
	s.SourcesChecked = true
	return true, nil
}

// pruneSnapshots answers: are the class's snapshots only those still
// needed, the current revision's and those its machines record? A deleted
// class keeps the snapshots its machines record until they go.
func (r *Reconciler) pruneSnapshots(ctx context.Context, s *classScope) (bool, error) {
	var snaps appsv1.ControllerRevisionList
	if err := r.APIReader.List(ctx, &snaps, client.InNamespace(r.Namespace),
		client.MatchingLabels{macvirtv1alpha1.LabelClass: classhistory.ClassLabel(s.Name)}); err != nil {
		return false, fmt.Errorf("listing snapshots of MacClass %s: %w", s.Name, err)
	}
	if len(snaps.Items) == 0 {
		return true, nil
	}
	var machines macvirtv1alpha1.MacMachineList
	if err := r.List(ctx, &machines, client.MatchingFields{index.MachineClass: s.Name}); err != nil {
		return false, fmt.Errorf("listing machines of MacClass %s: %w", s.Name, err)
	}
	keep := map[string]bool{}
	if s.Revision != "" {
		keep[s.Revision] = true
	}
	for i := range machines.Items {
		keep[machines.Items[i].Spec.ClassRevision] = true
	}
	for i := range snaps.Items {
		snap := &snaps.Items[i]
		rev := snap.Labels[macvirtv1alpha1.LabelClassRevision]
		if keep[rev] || snap.Name != classhistory.Name(s.Name, rev) {
			continue
		}
		uid := snap.UID
		if err := r.Delete(ctx, snap, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("pruning class snapshot %s/%s: %w", snap.Namespace, snap.Name, err)
		}
		ctrl.LoggerFrom(ctx).Info("pruned class revision no machine records", "revision", rev, "snapshot", snap.Name)
	}
	return true, nil
}

// checkImageSize refuses, in status, a system disk smaller than the
// snapshot it is restored from: CDI would refuse every machine's clone
// (a snapshot restores into a volume at least its restoreSize).
func (r *Reconciler) checkImageSize(ctx context.Context, s *classScope, ds *cdiv1.DataSource) error {
	src := ds.Spec.Source.Snapshot
	ns := src.Namespace
	if ns == "" {
		ns = ds.Namespace
	}
	snap := &snapshotv1.VolumeSnapshot{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: src.Name}, snap); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return nil
		}
		return fmt.Errorf("getting VolumeSnapshot %s/%s of the image: %w", ns, src.Name, err)
	}
	if snap.Status == nil || snap.Status.RestoreSize == nil {
		return nil
	}
	size := s.Class.Spec.Image.SizeOrDefault()
	if snap.Status.RestoreSize.Cmp(size) > 0 {
		const gi = 1 << 30
		need := resource.NewQuantity((snap.Status.RestoreSize.Value()+gi-1)/gi*gi, resource.BinarySI)
		s.SizeProblem = &base.Problem{Reason: macvirtv1alpha1.ReasonImageLargerThanDisk, Message: fmt.Sprintf(
			"spec.image.size %s is smaller than the image, VolumeSnapshot %s/%s of about %s, which CDI restores only into a disk at least as large: "+
				"set spec.image.size to %s or more", size.String(), ns, src.Name, need.String(), need.String())}
	}
	return nil
}
