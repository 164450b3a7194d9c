package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// Class snapshots keep what each class revision was, the way a StatefulSet
// keeps its history: one apps/v1 ControllerRevision per revision, named
// <class>-<revision>, labelled with the class and the revision, holding the
// class spec. They live in the operator's namespace, where tenants cannot
// edit them, and have no owner: a cluster-scoped class cannot own
// namespaced objects, and deleting the class must not delete them. The
// MacClass controller writes the current revision's and prunes those no
// machine records; machines render and observe from the snapshot of their
// recorded revision once the class is deleted or has moved on.

// snapshotName is the name of the snapshot of a class revision. A class
// name too long for it is shortened, with a hash of the whole name.
func snapshotName(class, revision string) string {
	return shorten(class, validation.DNS1123SubdomainMaxLength-len(revision)-1) + "-" + revision
}

// classLabelValue is the macvirt.io/class label of a class's snapshots.
func classLabelValue(class string) string {
	return shorten(class, validation.LabelValueMaxLength)
}

// shorten returns s when it has at most n characters; otherwise a prefix of
// s and a hash of all of it, n characters in all. s is a DNS subdomain, and
// the result is one too and a valid label value.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	hash := hex.EncodeToString(sum[:])[:10]
	return strings.TrimRight(s[:n-len(hash)-1], "-.") + "-" + hash
}

// newSnapshot is the snapshot of class at its current revision, in namespace.
func newSnapshot(namespace string, class *macvirtv1alpha1.MacClass, revision string) (*appsv1.ControllerRevision, error) {
	data, err := json.Marshal(class.Spec)
	if err != nil {
		return nil, fmt.Errorf("encoding MacClass %s spec: %w", class.Name, err)
	}
	return &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name: snapshotName(class.Name, revision), Namespace: namespace,
			Labels: map[string]string{
				macvirtv1alpha1.LabelClass:         classLabelValue(class.Name),
				macvirtv1alpha1.LabelClassRevision: revision,
			},
		},
		Data:     runtime.RawExtension{Raw: data},
		Revision: class.Generation,
	}, nil
}

// classFromSnapshot is the class named name as its snapshot recorded it.
func classFromSnapshot(name string, snap *appsv1.ControllerRevision) (*macvirtv1alpha1.MacClass, error) {
	class := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: snap.Revision}}
	if err := json.Unmarshal(snap.Data.Raw, &class.Spec); err != nil {
		return nil, fmt.Errorf("decoding class snapshot %s/%s: %w", snap.Namespace, snap.Name, err)
	}
	return class, nil
}

// snapshotHolds reports whether snap holds class's current spec.
func snapshotHolds(snap *appsv1.ControllerRevision, class *macvirtv1alpha1.MacClass) bool {
	kept, err := classFromSnapshot(class.Name, snap)
	return err == nil && equality.Semantic.DeepEqual(kept.Spec, class.Spec)
}

// getSnapshot reads the snapshot of a class revision from r; nil when there
// is none.
func getSnapshot(ctx context.Context, r client.Reader, namespace, class, revision string) (*macvirtv1alpha1.MacClass, error) {
	snap := &appsv1.ControllerRevision{}
	if err := getOptional(ctx, r, types.NamespacedName{Namespace: namespace, Name: snapshotName(class, revision)}, snap); err != nil {
		return nil, err
	}
	if snap.Name == "" || snap.Labels[macvirtv1alpha1.LabelClassRevision] != revision {
		return nil, nil
	}
	return classFromSnapshot(class, snap)
}
