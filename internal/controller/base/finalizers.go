package base

import (
	"context"
	"fmt"
	"reflect"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// EnsureFinalizer adds the finalizer name to obj when it lacks it, in a
// merge patch of obj's metadata, so that obj's deletion waits for what the
// kind must do first (stop a Mac gracefully, release a set's runners).
// added says whether a patch was sent and accepted. A refused or failed
// patch leaves obj's finalizers as they were, so a status computed from obj
// afterwards does not claim a finalizer the API server never stored; the
// error says what was being done, in the API server's words.
func EnsureFinalizer(ctx context.Context, c client.Client, obj client.Object, name string) (added bool, err error) {
	if controllerutil.ContainsFinalizer(obj, name) {
		return false, nil
	}
	before, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return false, fmt.Errorf("adding finalizer %s: %T copies to no object", name, obj)
	}
	had := slices.Clone(obj.GetFinalizers())
	controllerutil.AddFinalizer(obj, name)
	if err := c.Patch(ctx, obj, client.MergeFrom(before)); err != nil {
		obj.SetFinalizers(had)
		return false, fmt.Errorf("adding finalizer %s to %s %s: %w", name, kindOf(obj), client.ObjectKeyFromObject(obj), err)
	}
	return true, nil
}

// RemoveFinalizer takes the finalizer name off obj when it carries it, in a
// merge patch of obj's metadata, once the kind has done what its deletion
// waited for: the API server then deletes obj. An object already gone has
// nothing left to let go of, so NotFound is no error. removed says whether
// a patch was sent and accepted (or found obj gone). A failed patch leaves
// obj's finalizers as they were.
func RemoveFinalizer(ctx context.Context, c client.Client, obj client.Object, name string) (removed bool, err error) {
	if !controllerutil.ContainsFinalizer(obj, name) {
		return false, nil
	}
	before, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return false, fmt.Errorf("removing finalizer %s: %T copies to no object", name, obj)
	}
	had := slices.Clone(obj.GetFinalizers())
	controllerutil.RemoveFinalizer(obj, name)
	if err := c.Patch(ctx, obj, client.MergeFrom(before)); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		obj.SetFinalizers(had)
		return false, fmt.Errorf("removing finalizer %s from %s %s: %w", name, kindOf(obj), client.ObjectKeyFromObject(obj), err)
	}
	return true, nil
}

// kindOf is obj's kind for messages: the one it carries, or its Go type's
// name (typed objects read through a client often carry none).
func kindOf(obj client.Object) string {
	if k := obj.GetObjectKind().GroupVersionKind().Kind; k != "" {
		return k
	}
	return reflect.Indirect(reflect.ValueOf(obj)).Type().Name()
}
