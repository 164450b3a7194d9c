package controller

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// writeStatus writes obj's status as a merge patch from base, the copy read
// before the status was computed; every kind's deferred status write ends
// here. With optimisticLock the patch carries base's resourceVersion and
// fails on any change since. It reports false, without error, when the
// object is gone: there is nothing left to record.
func writeStatus(ctx context.Context, c client.Client, obj, base client.Object, optimisticLock bool) (bool, error) {
	patch := client.MergeFrom(base)
	if optimisticLock {
		patch = client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})
	}
	if err := c.Status().Patch(ctx, obj, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("patching status of %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
	}
	return true, nil
}
