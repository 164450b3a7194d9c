package claim

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/render"
	"github.com/macvirt/macvirt/internal/tenancy"
)

// loadMachineClass reads, once per reconcile, the class the bound machine
// was made of: its recorded revision, from the class's history when the
// class changed or went (Classes), as the machine itself does. The claim's
// Service and access follow it, so deleting or changing a class does not
// turn a bound claim's LoadBalancer into a ClusterIP, drop its Screen
// Sharing port, or lose a cloud address for good. Nil when neither the
// class nor a snapshot of its revision exists.
func (r *Reconciler) loadMachineClass(ctx context.Context, s *claimScope) error {
	if s.machineClassLoaded {
		return nil
	}
	if r.Classes.Snapshots != nil {
		res, err := r.Classes.Resolve(ctx, s.machine)
		if err != nil {
			return fmt.Errorf("finding the class machine %s/%s was made of: %w", s.machine.Namespace, s.machine.Name, err)
		}
		s.machineClass, s.machineClassLoaded = accessOf(res.Class, res.Live, res.Kept), true
		return nil
	}
	class := &macvirtv1alpha1.MacClass{}
	if err := r.Get(ctx, types.NamespacedName{Name: s.machine.Spec.ClassName}, class); err != nil {
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("getting MacClass %s: %w", s.machine.Spec.ClassName, err)
		}
		s.machineClassLoaded = true
		return nil
	}
	s.machineClass, s.machineClassLoaded = class, true
	return nil
}

// accessOf is the class a bound claim's access follows: the revision its
// machine was made of (kept), with only the access types the live class
// still allows when it exists, so an admin who takes an access type away
// takes it from bound claims too, while deleting a class takes nothing.
func accessOf(made, live *macvirtv1alpha1.MacClass, kept bool) *macvirtv1alpha1.MacClass {
	if made == nil || !kept || live == nil {
		return made
	}
	out := made.DeepCopy()
	var allowed []macvirtv1alpha1.AccessType
	for _, t := range made.Spec.Tenancy.AccessTypes() {
		if live.Spec.Tenancy.AllowsAccess(t) {
			allowed = append(allowed, t)
		}
	}
	out.Spec.Tenancy.AllowedAccessTypes = allowed
	if len(allowed) == 0 {
		out.Spec.Tenancy.AllowedAccessTypes = []macvirtv1alpha1.AccessType{macvirtv1alpha1.AccessClusterIP}
	}
	return out
}

// checkExposure answers: does the bound machine's NetworkPolicy, which its
// exposure controller writes from the binding, let the claim's namespace
// in? Until it does the Mac cannot be reached, and the claim is not Ready.
func (r *Reconciler) checkExposure(ctx context.Context, s *claimScope) (bool, error) {
	if s.machine == nil || s.lost != "" {
		return true, nil
	}
	if s.machine.Spec.HostName != "" {
		// A Mac of the Virtualization runtime has no NetworkPolicy: its
		// VMs sit behind the Mac's NAT, which is the weaker promise
		// docs/design/apple-silicon-runtime.md (section 7) states.
		s.exposed = true
		return true, nil
	}
	np := &networkingv1.NetworkPolicy{}
	err := r.Get(ctx, types.NamespacedName{Namespace: s.machine.Namespace, Name: render.NetworkPolicyName(s.machine)}, np)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("getting the NetworkPolicy of machine %s/%s: %w", s.machine.Namespace, s.machine.Name, err)
	}
	s.exposed = metav1.IsControlledBy(np, s.machine) && render.AdmitsNamespace(np, s.claim.Namespace)
	return true, nil
}

// ensureService answers: does the claim's own Service route to its
// machine? NodePort and LoadBalancer claims have one; a ClusterIP claim has
// none (its name is published under the namespace Service once it is
// Ready, publishName) unless an older operator made it one, which is kept
// as it was. A Service or EndpointSlice of the name that the claim does not
// control is left alone and recorded; a refused write shows in status.
func (r *Reconciler) ensureService(ctx context.Context, s *claimScope) (bool, error) {
	if s.lost != "" {
		// Lost: the Service stays (its node port or cloud address is the
		// tenant's), but routes nowhere, as the machine's address may be
		// another pod's tomorrow.
		return true, r.emptySlices(ctx, s, serviceName(s.claim))
	}
	if s.machine == nil {
		return true, nil
	}
	if err := r.loadMachineClass(ctx, s); err != nil {
		return false, err
	}
	access, refusal := tenancy.Access(s.accessClass(), s.claim.Spec.Access.Type)
	if refusal != nil {
		s.serviceProblem = &base.Problem{Reason: refusal.Reason, Message: refusal.Message + "; the Mac is reachable inside the cluster meanwhile"}
	}
	if access == macvirtv1alpha1.AccessClusterIP {
		kept := &corev1.Service{}
		err := r.Get(ctx, types.NamespacedName{Namespace: s.claim.Namespace, Name: serviceName(s.claim)}, kept)
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil:
			return false, fmt.Errorf("getting Service %s/%s: %w", s.claim.Namespace, serviceName(s.claim), err)
		case !metav1.IsControlledBy(kept, s.claim):
			return true, nil
		}
	}
	want := desiredService(s.claim, s.accessClass())
	if refusal != nil {
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
	slice, err := r.writeSlice(ctx, s, desiredSlice(s.claim, s.service, s.machine))
	if err != nil || slice == nil {
		return err == nil, err
	}
	s.endpointsReady = true
	return true, nodeErr
}

// publishName answers: does the claim's name resolve, as
// <claim>.macs.<namespace>.svc, to its Mac? Only for ClusterIP claims
// without a Service of their own, and only once the claim is Ready: the
// namespace's headless Service (made once, for every claim there) and the
// claim's EndpointSlice are not on the way to Ready, which the address in
// the status already gives. A slice once written follows the machine (its
// address, its readiness) from then on.
func (r *Reconciler) publishName(ctx context.Context, s *claimScope) (bool, error) {
	c := s.claim
	if s.lost != "" || s.service != nil {
		// Lost, or reached through a Service of its own now: a name left
		// behind would follow no machine (its address may be another pod's
		// tomorrow), so it has no endpoint any more.
		return true, r.unpublishName(ctx, s)
	}
	if s.machine != nil && s.machine.Spec.HostName != "" {
		// A Mac on an Apple-silicon host has no address in the cluster for
		// a name to resolve to: it is reached through the tunnel only.
		return true, r.unpublishName(ctx, s)
	}
	if s.machine == nil || s.writeFailed != nil ||
		s.serviceProblem != nil && s.serviceProblem.Reason != macvirtv1alpha1.ReasonAccessTypeNotAllowed {
		return true, nil
	}
	if access, _ := tenancy.Access(s.accessClass(), c.Spec.Access.Type); access != macvirtv1alpha1.AccessClusterIP {
		return true, r.unpublishName(ctx, s)
	}
	want := desiredNameSlice(c, s.accessClass(), s.machine)
	if c.Status.Phase != macvirtv1alpha1.ClaimReady {
		have := &discoveryv1.EndpointSlice{}
		if err := r.Get(ctx, client.ObjectKeyFromObject(want), have); apierrors.IsNotFound(err) {
			return true, nil
		} else if err != nil {
			return false, fmt.Errorf("getting EndpointSlice %s/%s: %w", want.Namespace, want.Name, err)
		}
	}
	s.dns = &dnsOutcome{}
	if ok, err := r.ensureNamespaceService(ctx, s); err != nil || !ok {
		return err == nil, err
	}
	notAllowed := s.serviceProblem
	s.serviceProblem = nil
	slice, err := r.writeSlice(ctx, s, want)
	if p := s.serviceProblem; p != nil {
		// A slice of that name the claim does not control.
		s.dns.problem = p
	}
	s.serviceProblem = notAllowed
	if err != nil || slice == nil {
		return err == nil, err
	}
	s.dns.published = true
	return true, nil
}

// unpublishName empties the claim's EndpointSlice under the namespace
// Service, if it has one: the name then resolves to nothing.
func (r *Reconciler) unpublishName(ctx context.Context, s *claimScope) error {
	if err := r.emptySlices(ctx, s, nameSliceName(s.claim)); err != nil {
		return err
	}
	return nil
}

// emptySlices takes every endpoint out of the claim's EndpointSlices of
// that name, in either address family (familySliceName): they then route
// nowhere. The operator cannot delete EndpointSlices; emptied, they go
// with the claim.
func (r *Reconciler) emptySlices(ctx context.Context, s *claimScope, name string) error {
	for _, n := range []string{name, familySliceName(name, discoveryv1.AddressTypeIPv4), familySliceName(name, discoveryv1.AddressTypeIPv6)} {
		if err := r.emptySlice(ctx, s, types.NamespacedName{Namespace: s.claim.Namespace, Name: n}); err != nil {
			return err
		}
	}
	return nil
}

// emptySlice empties one EndpointSlice the claim controls, if it has
// endpoints.
func (r *Reconciler) emptySlice(ctx context.Context, s *claimScope, key types.NamespacedName) error {
	have := &discoveryv1.EndpointSlice{}
	if err := r.Get(ctx, key, have); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(have, s.claim) || len(have.Endpoints) == 0 {
		return nil
	}
	have.Endpoints = nil
	if err := r.Update(ctx, have); err != nil {
		return fmt.Errorf("emptying EndpointSlice %s: %w", key, err)
	}
	ctrl.LoggerFrom(ctx).Info("emptied the claim's EndpointSlice", "endpointSlice", key.Name)
	return nil
}

// familySliceName is the name of a claim's slice for an address family
// other than the one its first slice was made for: a slice's address type
// is immutable, and the operator may not delete one.
func familySliceName(name string, family discoveryv1.AddressType) string {
	return name + "." + strings.ToLower(string(family))
}

// ensureNamespaceService makes the namespace's headless Service, macs,
// when it is missing. It has no selector, no cluster IP and no owner: it
// serves every claim of the namespace and stays when they are gone. One of
// that name that macvirt did not make is left alone, and the claim says so.
func (r *Reconciler) ensureNamespaceService(ctx context.Context, s *claimScope) (bool, error) {
	want := desiredNamespaceService(s.claim.Namespace)
	have := &corev1.Service{}
	err := r.Get(ctx, client.ObjectKeyFromObject(want), have)
	foreign := func() (bool, error) {
		s.dns.problem = &base.Problem{Reason: macvirtv1alpha1.ReasonServiceConflict, Message: fmt.Sprintf(
			"Service %s/%s exists and is not macvirt's headless Service, so the Mac has no DNS name; it is reachable at its address: "+
				"rename or delete that Service to have the name published", want.Namespace, want.Name)}
		return false, nil
	}
	if apierrors.IsNotFound(err) {
		// Made, or found someone else's, by this process a moment ago,
		// which the cache (it holds macvirt's Services only) does not show
		// yet, or never will: claims of one namespace turning Ready
		// together would otherwise each try to create it.
		if isForeign, _, seen := r.namespaceServices.Get(want.Namespace, r.now()); seen && isForeign {
			return foreign()
		} else if seen {
			return true, nil
		}
	}
	if apierrors.IsNotFound(err) {
		err = r.Create(ctx, want)
		if err == nil {
			r.namespaceServices.Assume(want.Namespace, false, r.now(), reservationTTL)
		}
		switch {
		case err == nil:
			ctrl.LoggerFrom(ctx).Info("created the namespace's Service for its Macs' names", "service", want.Name)
			return true, nil
		case apierrors.IsAlreadyExists(err):
			err = r.APIReader.Get(ctx, client.ObjectKeyFromObject(want), have)
		case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
			return false, nil
		default:
			// A quota or an admission policy: the claim says so, in the
			// API server's words, and the create is retried with backoff.
			err = fmt.Errorf("creating Service %s/%s: %w", want.Namespace, want.Name, err)
			s.writeFailed = &base.Problem{Reason: macvirtv1alpha1.ReasonCreateFailed, Message: err.Error()}
			s.dns.problem = s.writeFailed
			base.RecordEvent(r.Recorder, s.claim, corev1.EventTypeWarning, macvirtv1alpha1.ReasonCreateFailed, "Expose", err.Error())
			return false, err
		}
	}
	if err != nil {
		return false, fmt.Errorf("reading Service %s/%s: %w", want.Namespace, want.Name, err)
	}
	if !isNamespaceService(have) {
		r.namespaceServices.Assume(want.Namespace, true, r.now(), reservationTTL)
		return foreign()
	}
	return true, nil
}

// writeSlice writes an EndpointSlice the claim controls (writeOwned). A
// slice's address type is immutable: when the machine's address is of
// another family than the slice of want's name (its instance came back
// with an IPv6 address, say), that slice is emptied and the endpoint goes
// to a slice of the family's own name; the other name's slice is kept
// empty, so no slice routes to an address the machine no longer has.
func (r *Reconciler) writeSlice(ctx context.Context, s *claimScope, want *discoveryv1.EndpointSlice) (client.Object, error) {
	first := client.ObjectKeyFromObject(want)
	spare := types.NamespacedName{Namespace: want.Namespace, Name: familySliceName(want.Name, want.AddressType)}
	have := &discoveryv1.EndpointSlice{}
	switch err := r.Get(ctx, first, have); {
	case err == nil && metav1.IsControlledBy(have, s.claim) && have.AddressType != want.AddressType:
		if err := r.emptySlice(ctx, s, first); err != nil {
			return nil, err
		}
		want = want.DeepCopy()
		want.Name = spare.Name
	case err != nil && !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("getting EndpointSlice %s: %w", first, err)
	default:
		for _, family := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6} {
			if err := r.emptySlice(ctx, s, types.NamespacedName{Namespace: want.Namespace, Name: familySliceName(want.Name, family)}); err != nil {
				return nil, err
			}
		}
	}
	return r.writeOwned(ctx, s, "EndpointSlice", want, &discoveryv1.EndpointSlice{}, func(have, want client.Object) bool {
		h, w := have.(*discoveryv1.EndpointSlice), want.(*discoveryv1.EndpointSlice)
		if h.AddressType != w.AddressType || equality.Semantic.DeepEqual(h.Endpoints, w.Endpoints) && equality.Semantic.DeepEqual(h.Ports, w.Ports) {
			return false
		}
		h.Endpoints, h.Ports = w.Endpoints, w.Ports
		return true
	})
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
