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
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// +kubebuilder:webhook:path=/validate-macvirt-io-v1alpha1-macimage,mutating=false,failurePolicy=fail,sideEffects=None,groups=macvirt.io,resources=macimages,verbs=create,versions=v1alpha1,name=vmacimage-v1alpha1.macvirt.io,admissionReviewVersions=v1,timeoutSeconds=10

// imageWebhook validates new MacImages, and that whoever creates one may
// capture its source: get the claim named, and update the machine captured
// in its namespace (a SubjectAccessReview of the requesting user). RBAC on
// MacImages alone is not enough: capturing stops someone's Mac and
// publishes its disk to every class of the cluster.
type imageWebhook struct {
	lookup *lookup
	// reviews creates SubjectAccessReviews.
	reviews client.Client
}

func (w *imageWebhook) ValidateCreate(ctx context.Context, img *macvirtv1alpha1.MacImage) (admission.Warnings, error) {
	if errs := ValidateMacImage(img); len(errs) > 0 {
		return nil, invalid("MacImage", img.Name, errs)
	}
	env, err := w.env(ctx, img)
	if err != nil {
		return nil, err
	}
	errs, warns := ValidateMacImageSource(img, env)
	return warns, invalid("MacImage", img.Name, errs)
}

// ValidateUpdate admits every update: the webhook's rules match only
// creation, and the spec cannot change.
func (w *imageWebhook) ValidateUpdate(context.Context, *macvirtv1alpha1.MacImage, *macvirtv1alpha1.MacImage) (admission.Warnings, error) {
	return nil, nil
}

func (w *imageWebhook) ValidateDelete(context.Context, *macvirtv1alpha1.MacImage) (admission.Warnings, error) {
	return nil, nil
}

// env asks and reads, in order, what ValidateMacImageSource decides on,
// and stops at the first refusal.
func (w *imageWebhook) env(ctx context.Context, img *macvirtv1alpha1.MacImage) (ImageEnv, error) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return ImageEnv{}, fmt.Errorf("the admission request carries no user to check the capture for: %w", err)
	}
	u := req.UserInfo
	env := ImageEnv{User: u.Username}
	if c := img.Spec.Source.Claim; c != nil {
		if env.MayGetClaim, err = w.may(ctx, u, authorizationv1.ResourceAttributes{Namespace: c.Namespace, Verb: "get",
			Group: macvirtv1alpha1.GroupVersion.Group, Resource: "macclaims", Name: c.Name}); err != nil || !env.MayGetClaim {
			return env, err
		}
		claim := &macvirtv1alpha1.MacClaim{}
		ok, err := w.lookup.get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, claim)
		if err != nil || !ok {
			return env, err
		}
		env.Claim = claim
	}
	target, ok := imageTarget(img, env.Claim)
	if !ok {
		return env, nil
	}
	if env.MayUpdateMachine, err = w.may(ctx, u, authorizationv1.ResourceAttributes{Namespace: target.Namespace, Verb: "update",
		Group: macvirtv1alpha1.GroupVersion.Group, Resource: "macmachines", Name: target.Name}); err != nil || !env.MayUpdateMachine {
		return env, err
	}
	m := &macvirtv1alpha1.MacMachine{}
	if ok, err = w.lookup.get(ctx, target, m); err != nil || !ok {
		return env, err
	}
	env.Machine = m
	return env, nil
}

// may asks the API server whether u may do what attrs say.
func (w *imageWebhook) may(ctx context.Context, u authenticationv1.UserInfo, attrs authorizationv1.ResourceAttributes) (bool, error) {
	return userMay(ctx, w.reviews, u, attrs)
}
