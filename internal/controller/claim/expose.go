package claim

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/tenancy"
)

// ensureService answers: does the bound claim's Service route to its
// machine? A Service or EndpointSlice of the name that the claim does not
// control is left alone and recorded; a refused write shows in status.
func (r *Reconciler) ensureService(ctx context.Context, s *claimScope) (bool, error) {
	if s.machine == nil || s.lost != "" {
		return true, nil
	}
	class := s.class
	if class == nil {
		class = &macvirtv1alpha1.MacClass{}
		if err := r.Get(ctx, types.NamespacedName{Name: s.machine.Spec.ClassName}, class); err != nil {
			if !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("getting MacClass %s: %w", s.machine.Spec.ClassName, err)
			}
			class = nil
		}
		s.class = class
	}
	want := desiredService(s.claim, class)
	if _, refusal := tenancy.Access(class, s.claim.Spec.Access.Type); refusal != nil {
		s.serviceProblem = &base.Problem{Reason: refusal.Reason, Message: refusal.Message + "; the Service is ClusterIP meanwhile"}
	}
	svc, err := r.writeOwned(ctx, s, "Service", want, &corev1.Service{}, func(have, want client.Object) bool {
		h, w := have.(*corev1.Service), want.(*corev1.Service)
		if h.Spec.Type == w.Spec.Type && equality.Semantic.DeepEqual(servicePorts(h), servicePorts(w)) {
			return false
		}
		h.Spec.Type, h.Spec.Ports = w.Spec.Type, mergePorts(h, w)
		return true
	})
	if err != nil || svc == nil {
		return err == nil, err
	}
	s.service = svc.(*corev1.Service)
	nodeErr := r.readNodeAddress(ctx, s)
	wantSlice := desiredSlice(s.claim, s.service, s.machine)
	slice, err := r.writeOwned(ctx, s, "EndpointSlice", wantSlice, &discoveryv1.EndpointSlice{}, func(have, want client.Object) bool {
		h, w := have.(*discoveryv1.EndpointSlice), want.(*discoveryv1.EndpointSlice)
		if h.AddressType == w.AddressType && equality.Semantic.DeepEqual(h.Endpoints, w.Endpoints) && equality.Semantic.DeepEqual(h.Ports, w.Ports) {
			return false
		}
		// The address type is immutable: a machine that moved families
		// gets its slice recreated (a conflict below, then a create).
		if h.AddressType != w.AddressType {
			return false
		}
		h.Endpoints, h.Ports = w.Endpoints, w.Ports
		return true
	})
	if err != nil || slice == nil {
		return err == nil, err
	}
	s.endpointsReady = true
	return true, nodeErr
}

// readNodeAddress reads the address of the node a NodePort claim's machine
// runs on. A failed read leaves the Service and its EndpointSlice working,
// only the external address unknown: the claim says so, in the API
// server's words, and the error is returned for a retry with backoff.
func (r *Reconciler) readNodeAddress(ctx context.Context, s *claimScope) error {
	if s.service.Spec.Type != corev1.ServiceTypeNodePort || s.machine.Status.NodeName == "" {
		return nil
	}
	node := &corev1.Node{}
	err := r.Get(ctx, types.NamespacedName{Name: s.machine.Status.NodeName}, node)
	switch {
	case err == nil:
		s.nodeAddress = nodeAddress(node)
		return nil
	case apierrors.IsNotFound(err):
		return nil
	}
	err = fmt.Errorf("reading Node %s, whose address reaches the claim's NodePort: %w", s.machine.Status.NodeName, err)
	s.writeFailed = &base.Problem{Reason: macvirtv1alpha1.ReasonNodeUnreadable, Message: err.Error() + "; the external address is unknown until it can be read"}
	return err
}

// writeOwned makes the object named like want, of want's kind, what want
// says: created when missing, updated (with its resourceVersion) when
// changed says so, left alone and recorded when the claim does not control
// it. It returns the object as it is now, nil when it is not the claim's.
func (r *Reconciler) writeOwned(ctx context.Context, s *claimScope, kind string, want, have client.Object,
	changed func(have, want client.Object) bool) (client.Object, error) {
	key := client.ObjectKeyFromObject(want)
	err := r.Get(ctx, key, have)
	if apierrors.IsNotFound(err) {
		// Not in the cache, which holds only the claims' own: create it,
		// and learn from the API server whether one of that name exists.
		err = r.Create(ctx, want)
		switch {
		case err == nil:
			ctrl.LoggerFrom(ctx).Info("created the claim's "+kind, "name", key.Name)
			return want, nil
		case apierrors.IsAlreadyExists(err):
			if err := r.APIReader.Get(ctx, key, have); err != nil {
				return nil, fmt.Errorf("reading %s %s: %w", kind, key, err)
			}
		case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
			// The namespace is going, and the claim with it: nothing to
			// route to, and nothing to retry.
			return nil, nil
		default:
			err = fmt.Errorf("creating %s %s: %w", kind, key, err)
			s.writeFailed = &base.Problem{Reason: macvirtv1alpha1.ReasonCreateFailed, Message: err.Error()}
			base.RecordEvent(r.Recorder, s.claim, corev1.EventTypeWarning, macvirtv1alpha1.ReasonCreateFailed, "Expose", err.Error())
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("getting %s %s: %w", kind, key, err)
	}
	if !metav1.IsControlledBy(have, s.claim) {
		s.serviceProblem = &base.Problem{Reason: macvirtv1alpha1.ReasonServiceConflict, Message: fmt.Sprintf(
			"%s %s exists and is not controlled by this claim; it is left as it is, and the Mac is reachable only at its address: "+
				"rename or delete that %s to have the claim's written", kind, key, kind)}
		return nil, nil
	}
	if !changed(have, want) {
		return have, nil
	}
	if err := r.Update(ctx, have); err != nil {
		if apierrors.IsConflict(err) {
			return nil, err
		}
		err = fmt.Errorf("updating %s %s: %w", kind, key, err)
		s.writeFailed = &base.Problem{Reason: macvirtv1alpha1.ReasonUpdateFailed, Message: err.Error()}
		base.RecordEvent(r.Recorder, s.claim, corev1.EventTypeWarning, macvirtv1alpha1.ReasonUpdateFailed, "Expose", err.Error())
		return nil, err
	}
	ctrl.LoggerFrom(ctx).Info("updated the claim's "+kind, "name", key.Name)
	return have, nil
}
