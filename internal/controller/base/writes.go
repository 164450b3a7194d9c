package base

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// WriteStatus writes obj's status as a merge patch from before, the copy
// read before the status was computed; every kind's one status write ends
// here, and it writes nothing else. With optimisticLock the patch carries
// before's resourceVersion and fails on any change since. It reports false,
// without error, when the object is gone, or is being deleted and holds no
// finalizer any more: there is nothing left to record.
func WriteStatus(ctx context.Context, c client.Client, obj, before client.Object, optimisticLock bool) (bool, error) {
	if !obj.GetDeletionTimestamp().IsZero() && len(obj.GetFinalizers()) == 0 {
		// Its last finalizer was just removed: the API server has deleted
		// it, and a patch would only be answered 404.
		return false, nil
	}
	patch := client.MergeFrom(before)
	if optimisticLock {
		patch = client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})
	}
	if err := c.Status().Patch(ctx, obj, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("patching status of %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
	}
	return true, nil
}

// GetOptional gets an object, leaving it empty when it does not exist.
func GetOptional(ctx context.Context, c client.Reader, key types.NamespacedName, obj client.Object) error {
	if err := c.Get(ctx, key, obj); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("getting %T %s: %w", obj, key, err)
	}
	return nil
}

// ControllerRef makes the macvirt object of kind named name (and pinned to
// its uid) the controller of what carries it, so the garbage collector
// deletes it with its owner.
func ControllerRef(kind, name string, uid types.UID) metav1.OwnerReference {
	t := true
	return metav1.OwnerReference{APIVersion: macvirtv1alpha1.GroupVersion.String(), Kind: kind, Name: name, UID: uid, Controller: &t}
}

// maxNoteLength is the longest note an event carries (the API's limit is 1 KiB).
const maxNoteLength = 1024

// truncateNote cuts an event note to maxNoteLength.
func truncateNote(s string) string {
	if len(s) <= maxNoteLength {
		return s
	}
	return s[:maxNoteLength]
}

// RecordEvent records an event about obj, its note cut to the API's limit.
// A nil recorder (a reconciler built by hand in a test) records nothing.
func RecordEvent(rec events.EventRecorder, obj runtime.Object, eventType, reason, action, note string) {
	if rec != nil {
		rec.Eventf(obj, nil, eventType, reason, action, "%s", truncateNote(note))
	}
}
