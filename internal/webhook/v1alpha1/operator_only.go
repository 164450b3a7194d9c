package v1alpha1

import (
	"context"
	"errors"
	"fmt"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// What only the operator writes on a MacMachine. Each one decides who a
// machine belongs to or who may speak for it:
//
//   - spec.claimRef binds the machine to a claim: the claim's SSH keys are
//     delivered to it, and the claim's tenant is told its address and host
//     keys.
//   - the pool label and a controller reference to a macvirt object say a
//     pool (or a claim) made the machine; claims bind only a pool's own.
//   - the released label and the reclaim-policy annotation decide what
//     happens to a bound machine when its claim goes.
//   - the agent token-hash and agent Secret annotations say which guest
//     may heartbeat for the machine and which Secret its config disk is.
//   - spec.hostName places a Virtualization machine on a Mac: that Mac's
//     agent runs it, and the operator counts the Mac's slots by it.
//   - spec.suspendWhenIdle has the host agent save an unbound machine's
//     memory to the Mac's disk: only a pool's never-used machines.
//
// Anyone else, whatever RBAC grants them on MacMachines, is refused when a
// create sets one of them or an update changes one. Removing a controller
// reference is allowed (the garbage collector does that when it orphans
// dependents).

// operatorOnlyLabels and operatorOnlyAnnotations are the metadata keys only
// the operator writes.
var (
	operatorOnlyLabels      = []string{macvirtv1alpha1.LabelPool, macvirtv1alpha1.LabelReleased}
	operatorOnlyAnnotations = []string{macvirtv1alpha1.AnnotationAgentTokenHash, macvirtv1alpha1.AnnotationAgentSecret,
		macvirtv1alpha1.AnnotationReclaimPolicy}
)

// OperatorOnlyChanges lists, as field errors, what a create (old nil) or an
// update of a machine by someone other than the operator sets or changes
// that only the operator may.
func OperatorOnlyChanges(old, m *macvirtv1alpha1.MacMachine) field.ErrorList {
	if old == nil {
		old = &macvirtv1alpha1.MacMachine{}
	}
	const why = "only the macvirt operator sets this: "
	var errs field.ErrorList
	if !equality.Semantic.DeepEqual(old.Spec.ClaimRef, m.Spec.ClaimRef) {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "claimRef"),
			why+"create a MacClaim to have a machine bound to it"))
	}
	if old.Spec.SuspendWhenIdle != m.Spec.SuspendWhenIdle {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "suspendWhenIdle"),
			why+"a MacPool whose idleState is Suspended sets it on the machines it makes; a machine someone uses must never be suspended"))
	}
	if old.Spec.HostName != m.Spec.HostName {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "hostName"),
			why+"the operator places a Virtualization machine on a MacHost with a free slot; leave it unset"))
	}
	if old.Spec.ClassRevision != m.Spec.ClassRevision {
		// A kept revision of a class is rendered as it was: naming one
		// would bring back references and settings an admin has since
		// removed, or that no admission check ever saw.
		errs = append(errs, field.Forbidden(field.NewPath("spec", "classRevision"),
			why+"a machine records its class's revision when it is first reconciled; leave it unset"))
	}
	for _, k := range operatorOnlyLabels {
		if old.Labels[k] != m.Labels[k] {
			errs = append(errs, field.Forbidden(field.NewPath("metadata", "labels").Key(k),
				why+"pools label the machines they make; create a MacPool for pool machines"))
		}
	}
	renewing := old.Annotations[macvirtv1alpha1.AnnotationAgentTokenHash] != "" && m.Annotations[macvirtv1alpha1.AnnotationAgentTokenHash] == ""
	for _, k := range operatorOnlyAnnotations {
		before, after := old.Annotations[k], m.Annotations[k]
		if before == after {
			continue
		}
		// Removing the token's hash (with its Secret's name, or not) is how
		// an admin has a machine issued a new token: the operator draws it.
		if after == "" && renewing && (k == macvirtv1alpha1.AnnotationAgentTokenHash || k == macvirtv1alpha1.AnnotationAgentSecret) {
			continue
		}
		errs = append(errs, field.Forbidden(field.NewPath("metadata", "annotations").Key(k),
			why+"the operator issues agent tokens (remove macvirt.io/agent-token-sha256 to have a new one issued) and records each claim's reclaim policy"))
	}
	before := macvirtRefs(old.OwnerReferences)
	for i, ref := range m.OwnerReferences {
		if !isMacvirtRef(ref) {
			continue
		}
		if prev, ok := before[ref.UID]; !ok || !equality.Semantic.DeepEqual(prev, ref) {
			errs = append(errs, field.Forbidden(field.NewPath("metadata", "ownerReferences").Index(i),
				why+"a machine is owned by the MacPool or MacClaim that made it"))
		}
	}
	return errs
}

// isMacvirtRef reports whether an owner reference is to a macvirt object:
// of macvirt's group, or of a macvirt kind under any spelling of a group.
func isMacvirtRef(ref metav1.OwnerReference) bool {
	if ref.Kind == "MacPool" || ref.Kind == "MacClaim" || ref.Kind == "MacClass" || ref.Kind == "MacMachine" {
		return true
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err != nil || strings.EqualFold(gv.Group, macvirtv1alpha1.GroupVersion.Group) ||
		strings.EqualFold(gv.Version, macvirtv1alpha1.GroupVersion.Group)
}

func macvirtRefs(refs []metav1.OwnerReference) map[types.UID]metav1.OwnerReference {
	out := map[types.UID]metav1.OwnerReference{}
	for _, ref := range refs {
		if isMacvirtRef(ref) {
			out[ref.UID] = ref
		}
	}
	return out
}

// Identity asks the API server who the given client is (a SelfSubjectReview,
// which every authenticated user may create): the user name the operator's
// own writes arrive under, so admission can tell them from anyone else's.
func Identity(ctx context.Context, c client.Client) (string, error) {
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		return "", fmt.Errorf("asking the API server who the operator is (SelfSubjectReview): %w", err)
	}
	name := review.Status.UserInfo.Username
	if name == "" {
		return "", errors.New("the API server's SelfSubjectReview named no user for the operator")
	}
	return name, nil
}
