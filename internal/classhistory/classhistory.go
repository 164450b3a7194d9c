// Package classhistory keeps what each MacClass revision was, the way a
// StatefulSet keeps its history: one apps/v1 ControllerRevision per
// revision, named <class>-<revision>, labelled with the class and the
// revision, holding the class spec. Snapshots live in the operator's
// namespace, where tenants cannot edit them, and have no owner: a
// cluster-scoped class cannot own namespaced objects, and deleting the
// class must not delete them.
//
// The MacClass controller writes the current revision's snapshot and prunes
// those no machine records. A Resolver answers, for the machine controller
// and the guest-agent endpoint alike, which class a machine is made of: the
// snapshot of its recorded revision once the class is deleted or has moved
// on.
package classhistory

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/render"
)

// Name is the name of the snapshot of a class revision. A class name too
// long for it is shortened, with a hash of the whole name.
func Name(class, revision string) string {
	return shorten(class, validation.DNS1123SubdomainMaxLength-len(revision)-1) + "-" + revision
}

// ClassLabel is the macvirt.io/class label of a class's snapshots.
func ClassLabel(class string) string {
	return shorten(class, validation.LabelValueMaxLength)
}

// Shorten is shorten, for other objects named after a class.
func Shorten(s string, n int) string { return shorten(s, n) }

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

// New is the snapshot of class at its current revision, in namespace.
func New(namespace string, class *macvirtv1alpha1.MacClass, revision string) (*appsv1.ControllerRevision, error) {
	data, err := json.Marshal(snapshotSpec(class))
	if err != nil {
		return nil, fmt.Errorf("encoding MacClass %s spec: %w", class.Name, err)
	}
	return &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name: Name(class.Name, revision), Namespace: namespace,
			Labels: map[string]string{
				macvirtv1alpha1.LabelClass:         ClassLabel(class.Name),
				macvirtv1alpha1.LabelClassRevision: revision,
			},
		},
		Data:     runtime.RawExtension{Raw: data},
		Revision: class.Generation,
	}, nil
}

// Decode is the class named name as its snapshot recorded it.
func Decode(name string, snap *appsv1.ControllerRevision) (*macvirtv1alpha1.MacClass, error) {
	class := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: snap.Revision}}
	if err := json.Unmarshal(snap.Data.Raw, &class.Spec); err != nil {
		return nil, fmt.Errorf("decoding class snapshot %s/%s: %w", snap.Namespace, snap.Name, err)
	}
	return class, nil
}

// Holds reports whether snap holds class's current spec.
func Holds(snap *appsv1.ControllerRevision, class *macvirtv1alpha1.MacClass) bool {
	kept, err := Decode(class.Name, snap)
	return err == nil && equality.Semantic.DeepEqual(kept.Spec, snapshotSpec(class))
}

// snapshotSpec is the spec a snapshot keeps: the class's, with its hardware
// as rendered (unset fields filled from its macOS release's table), so an
// old revision renders as it did even if a later operator's table differs,
// and its image as resolved (a refreshed image's import).
func snapshotSpec(class *macvirtv1alpha1.MacClass) macvirtv1alpha1.MacClassSpec {
	spec := *class.Spec.DeepCopy()
	spec.Hardware = spec.EffectiveHardware()
	// A refreshed image is kept as the import the revision resolved to.
	spec.Image = class.EffectiveImage()
	return spec
}

// Resolver finds the class a machine is made of.
type Resolver struct {
	// Classes reads MacClasses.
	Classes client.Reader
	// Snapshots reads the snapshots in Namespace, the operator's namespace;
	// when nil, a class that changed or went is not looked up in history.
	Snapshots client.Reader
	Namespace string
}

// Resolution is what a machine is made of.
type Resolution struct {
	// Class is what the machine renders and observes from: its live class
	// while that has the machine's revision (or the machine records none
	// yet); else the snapshot of the machine's revision; else, for a
	// revision never kept, the live class as it is now. Nil when none of
	// these exists.
	Class *macvirtv1alpha1.MacClass
	// Live is the class as it is now, and LiveRevision its revision; nil
	// and empty once the class is deleted.
	Live         *macvirtv1alpha1.MacClass
	LiveRevision string
	// Kept is true when Class is the snapshot of the machine's revision.
	Kept bool
}

// Resolve reads the machine's class and, if it is gone or at another
// revision than the machine's, the snapshot of the machine's revision.
func (r Resolver) Resolve(ctx context.Context, m *macvirtv1alpha1.MacMachine) (Resolution, error) {
	name, rev := m.Spec.ClassName, m.Spec.ClassRevision
	var res Resolution
	live := &macvirtv1alpha1.MacClass{}
	switch err := r.Classes.Get(ctx, types.NamespacedName{Name: name}, live); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return res, fmt.Errorf("getting MacClass %s: %w", name, err)
	default:
		res.Live, res.LiveRevision = live, render.ClassRevision(live)
	}
	if rev == "" || res.LiveRevision == rev {
		res.Class = res.Live
		return res, nil
	}
	kept, err := r.snapshot(ctx, name, rev)
	if err != nil {
		return res, err
	}
	res.Class, res.Kept = kept, kept != nil
	if kept == nil {
		res.Class = res.Live
	}
	return res, nil
}

// Kept reports whether the snapshot of a class revision exists (as far as
// Snapshots knows).
func (r Resolver) Kept(ctx context.Context, class, revision string) (bool, error) {
	kept, err := r.snapshot(ctx, class, revision)
	return kept != nil, err
}

// snapshot reads the snapshot of a class revision; nil when there is none.
func (r Resolver) snapshot(ctx context.Context, class, revision string) (*macvirtv1alpha1.MacClass, error) {
	if r.Snapshots == nil {
		return nil, nil
	}
	snap := &appsv1.ControllerRevision{}
	key := types.NamespacedName{Namespace: r.Namespace, Name: Name(class, revision)}
	if err := r.Snapshots.Get(ctx, key, snap); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading the snapshot of MacClass %s revision %s: %w", class, revision, err)
	}
	if snap.Labels[macvirtv1alpha1.LabelClassRevision] != revision {
		return nil, nil
	}
	return Decode(class, snap)
}
