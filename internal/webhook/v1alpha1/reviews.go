package v1alpha1

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// userMay asks the API server, with a SubjectAccessReview, whether the user
// who made an admission request may do what attrs say: what an object
// makes the operator do with its own rights must be what its author could
// do.
func userMay(ctx context.Context, reviews client.Client, u authenticationv1.UserInfo, attrs authorizationv1.ResourceAttributes) (bool, error) {
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra, ResourceAttributes: &attrs}}
	if err := reviews.Create(ctx, sar); err != nil {
		return false, fmt.Errorf("asking whether %s may %s: %w", u.Username, describeRight(attrs), err)
	}
	return sar.Status.Allowed, nil
}
