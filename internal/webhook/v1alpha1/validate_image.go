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
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// captureConsequence is why capturing is for cluster admins only, as a
// refusal says it.
const captureConsequence = "capturing stops the Mac and publishes its disk to the whole cluster, so only cluster admins capture images"

// ValidateMacImage checks what the schema cannot say of a MacImage alone:
// its name is a DNS label (it names the DataSource), and the source and the
// storage class are well-formed names.
func ValidateMacImage(img *macvirtv1alpha1.MacImage) field.ErrorList {
	var errs field.ErrorList
	for _, e := range dnsLabel(field.NewPath("metadata", "name"), img.Name) {
		if e.Type == field.ErrorTypeInvalid {
			e.Detail += " (the name is the published DataSource's)"
		}
		errs = append(errs, e)
	}
	spec := field.NewPath("spec")
	src := img.Spec.Source
	switch {
	case (src.Claim == nil) == (src.Machine == nil):
		// The schema's CEL rule refuses this before the webhook runs.
		errs = append(errs, field.Required(spec.Child("source"), "set exactly one of source.claim or source.machine"))
	case src.Claim != nil:
		p := spec.Child("source", "claim")
		errs = append(errs, dnsLabel(p.Child("namespace"), src.Claim.Namespace)...)
		errs = append(errs, dnsSubdomain(p.Child("name"), src.Claim.Name)...)
	default:
		p := spec.Child("source", "machine")
		errs = append(errs, dnsLabel(p.Child("namespace"), src.Machine.Namespace)...)
		errs = append(errs, dnsSubdomain(p.Child("name"), src.Machine.Name)...)
	}
	if sc := img.Spec.StorageClassName; sc != nil {
		errs = append(errs, dnsSubdomain(spec.Child("storageClassName"), *sc)...)
	}
	return errs
}

// ImageEnv is what the webhook found out about a new MacImage's source and
// the user creating it. It is gathered in the order the checks are made,
// and stops at the first refusal: a user who may not read the claim learns
// nothing of it, not even whether it exists.
type ImageEnv struct {
	// User is the requesting user's name.
	User string
	// MayGetClaim says whether User may get the claim source.
	MayGetClaim bool
	// Claim is the claim source; nil when it does not exist or was not read.
	Claim *macvirtv1alpha1.MacClaim
	// MayUpdateMachine says whether User may update the captured machine
	// in its namespace.
	MayUpdateMachine bool
	// Machine is the machine captured; nil when it does not exist or was
	// not read.
	Machine *macvirtv1alpha1.MacMachine
}

// imageTarget is the machine a MacImage captures: its source machine, or
// the machine its source claim is bound to (claim may be nil when the claim
// does not exist). ok is false when there is none yet.
func imageTarget(img *macvirtv1alpha1.MacImage, claim *macvirtv1alpha1.MacClaim) (key types.NamespacedName, ok bool) {
	src := img.Spec.Source
	switch {
	case src.Machine != nil:
		return types.NamespacedName{Namespace: src.Machine.Namespace, Name: src.Machine.Name}, true
	case claim != nil && claim.Status.MachineRef != nil:
		return types.NamespacedName{Namespace: claim.Status.MachineRef.Namespace, Name: claim.Status.MachineRef.Name}, true
	}
	return types.NamespacedName{}, false
}

// ValidateMacImageSource decides whether env.User may capture the image's
// source, in the order the webhook asks: the claim source is readable,
// exists and is bound; the user may update the captured machine in its
// namespace; the machine exists. It warns when the capture stops a Mac a
// claim is using.
func ValidateMacImageSource(img *macvirtv1alpha1.MacImage, env ImageEnv) (field.ErrorList, []string) {
	src := img.Spec.Source
	var p *field.Path
	var source string
	if c := src.Claim; c != nil {
		p, source = field.NewPath("spec", "source", "claim"), c.Namespace+"/"+c.Name
		switch {
		case !env.MayGetClaim:
			return field.ErrorList{field.Forbidden(p, fmt.Sprintf("%s may not get macclaims.macvirt.io %q in namespace %s; %s",
				env.User, c.Name, c.Namespace, captureConsequence))}, nil
		case env.Claim == nil:
			return field.ErrorList{field.Invalid(p, source, fmt.Sprintf("claim %s does not exist", source))}, nil
		case env.Claim.Status.MachineRef == nil:
			return field.ErrorList{field.Invalid(p, source, fmt.Sprintf(
				"claim %s is not bound to a machine; capture it once `kubectl get macclaim` shows it Bound", source))}, nil
		}
	} else if m := src.Machine; m != nil {
		p, source = field.NewPath("spec", "source", "machine"), m.Namespace+"/"+m.Name
	} else {
		return field.ErrorList{field.Required(field.NewPath("spec", "source"), "set exactly one of source.claim or source.machine")}, nil
	}
	target, _ := imageTarget(img, env.Claim)
	switch {
	case !env.MayUpdateMachine:
		return field.ErrorList{field.Forbidden(p, fmt.Sprintf("%s may not update macmachines.macvirt.io in namespace %s; %s",
			env.User, target.Namespace, captureConsequence))}, nil
	case env.Machine == nil && src.Claim != nil:
		return field.ErrorList{field.Invalid(p, source, fmt.Sprintf("claim %s's machine %s does not exist", source, target))}, nil
	case env.Machine == nil:
		return field.ErrorList{field.Invalid(p, source, fmt.Sprintf(
			"machine %s does not exist; name a machine `kubectl get macmachines -n %s` lists", source, target.Namespace))}, nil
	}
	var warns []string
	if ref := env.Machine.Spec.ClaimRef; ref != nil && machineRuns(env.Machine) {
		warns = append(warns, fmt.Sprintf("capturing stops %s/%s's Mac until the copy is done", ref.Namespace, ref.Name))
	}
	if ref := env.Machine.Spec.ClaimRef; ref != nil {
		warns = append(warns, fmt.Sprintf("the image carries whatever %s/%s's users left on the Mac; the agent removes keys, histories, "+
			"bootstrap files and runner registrations from its clones, but not what a shell can hide elsewhere: publish it only if you trust them",
			ref.Namespace, ref.Name))
	}
	return nil, warns
}

// machineRuns says whether a machine's VM is meant to run and does, or is
// on its way up.
func machineRuns(m *macvirtv1alpha1.MacMachine) bool {
	if m.Spec.Running != nil && !*m.Spec.Running {
		return false
	}
	switch m.Status.Phase {
	case macvirtv1alpha1.MachineStarting, macvirtv1alpha1.MachineBooting, macvirtv1alpha1.MachineReady:
		return true
	}
	return false
}
