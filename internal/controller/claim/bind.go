package claim

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/index"
	"github.com/macvirt/macvirt/internal/controller/state"
	"github.com/macvirt/macvirt/internal/render"
	"github.com/macvirt/macvirt/internal/tenancy"
)

// bind takes an idle machine, or creates one on demand, or records why the
// claim waits. A claim that has its machine (or lost it) needs none.
func (r *Reconciler) bind(ctx context.Context, s *claimScope) (bool, error) {
	if s.machine != nil || s.lost != "" {
		return true, nil
	}
	class, p, err := r.resolveClass(ctx, s.claim)
	if err != nil || p != nil {
		s.waiting = p
		return false, err
	}
	s.class = class
	retainBounded := reclaimPolicy(s.claim) == macvirtv1alpha1.ReclaimRetain && class.Spec.Tenancy.MaxReleasedPerNamespace != nil
	if retainBounded {
		// The count and the bind it allows happen under one lock, and the
		// bind is recorded before the lock is let go.
		retainKey := index.RetainedKey(s.claim.Namespace, class.Name)
		unlock := r.retained.lock(retainKey)
		defer func() {
			if s.machine != nil {
				r.retained.record(retainKey, s.machine.UID, r.Clock.Now())
			}
			unlock()
		}()
	}
	if p, err := r.checkTenancy(ctx, s.claim, class); err != nil || p != nil {
		s.waiting = p
		return false, err
	}
	// The cache's own objects, not copies: a pool may hold a thousand idle
	// machines, and copying each one for every bind would make a bind cost
	// as much as the pool is large. They are only read here; the machine
	// tried is copied before anything is written.
	var list macvirtv1alpha1.MacMachineList
	if err := r.List(ctx, &list, client.MatchingFields{index.MachineBindable: index.BindKey(s.claim)}, client.UnsafeDisableDeepCopy); err != nil {
		return false, fmt.Errorf("listing idle machines for %s: %w", index.BindKey(s.claim), err)
	}
	pools := poolLookup{}
	if named, err := pools.get(ctx, r.Client, s.claim.Spec.PoolName); err != nil {
		return false, err
	} else if named != nil && !tenancy.PoolServes(named, s.claim) {
		// Admitted without the webhook, which refuses it.
		kind, ns, name := tenancy.PoolKeptFor(named)
		s.waiting = &base.Problem{Reason: macvirtv1alpha1.ReasonWaitingForMachine, Message: fmt.Sprintf(
			"MacPool %s keeps warm Macs for %s %s/%s, and only its runners take them: delete this claim and name another pool, or only a className",
			named.Name, kind, ns, name)}
		return true, nil
	}
	candidates := make([]*macvirtv1alpha1.MacMachine, 0, len(list.Items))
	for i := range list.Items {
		m := &list.Items[i]
		// Only a runner set's (or a queue's) own runners take its warm
		// Macs (tenancy.PoolServes); the admission webhook refuses a claim
		// naming such a pool, and this holds for one admitted without it.
		pool, err := pools.get(ctx, r.Client, m.Labels[macvirtv1alpha1.LabelPool])
		if err != nil {
			return false, err
		}
		if pool != nil && !tenancy.PoolServes(pool, s.claim) {
			continue
		}
		candidates = append(candidates, m)
	}
	if anySuspended(candidates) {
		r.resuming.Lock()
		defer r.resuming.Unlock()
	}
	free, err := r.freeSlots(ctx, candidates)
	if err != nil {
		return false, err
	}
	// Checked in the order they are tried, so a bind looks closer only at
	// the machines it tries, usually one.
	held := 0
	order, noSlot := tieredOrder(s.claim.UID, candidates, free)
	for m := range order {
		pool, err := pools.get(ctx, r.Client, m.Labels[macvirtv1alpha1.LabelPool])
		if err != nil {
			return false, err
		}
		if !tenancy.PoolHolds(pool, m) {
			ctrl.LoggerFrom(ctx).Info("skipping a machine labelled for a pool that did not make it", "machine", client.ObjectKeyFromObject(m))
			continue
		}
		held++
		key := m.UID
		switch r.inFlight.reserve(key, r.now()) {
		case alreadyWon:
			continue
		case beingBound:
			// Another worker is binding it this moment, and may lose it
			// to this very claim's binding by another operator, which
			// this claim would then adopt: look again in a moment rather
			// than bind a second machine meanwhile.
			s.waiting = &base.Problem{Reason: macvirtv1alpha1.ReasonWaitingForMachine, Message: "waiting for a machine"}
			s.retrySoon = true
			return true, nil
		}
		won, err := r.bindMachine(ctx, s, m.DeepCopy())
		if won {
			r.inFlight.won(key, r.now())
		} else {
			r.inFlight.release(key)
		}
		if err != nil || won {
			return won, err
		}
	}
	if noSlot > 0 {
		// Resumed at once when a slot frees: looked at again soon, as no
		// event of the suspended machines says so.
		s.waiting = &base.Problem{Reason: macvirtv1alpha1.ReasonWaitingForMachine, Message: fmt.Sprintf(
			"%d idle machines of %s are suspended on MacHosts with no free licence slot to resume one in; the claim binds one once a slot frees",
			noSlot, index.BindKey(s.claim))}
		s.waitSlot = true
		return true, nil
	}
	if onDemand(s.claim, class) {
		return r.createOnDemand(ctx, s)
	}
	s.waiting = &base.Problem{Reason: macvirtv1alpha1.ReasonWaitingForMachine, Message: fmt.Sprintf("no idle machine in %s yet", index.BindKey(s.claim))}
	// Every candidate taken by another claim (or changed) under us means
	// the cache may still list machines that are free: try again soon.
	s.retrySoon = held > 0
	return true, nil
}

// completeBinding completes the binding the claim's status says is in
// progress, or undoes it where it can never complete: a machine the claim
// reserved (an older operator's protocol), whose side of the binding may
// not be written yet (a crash, or another operator in the middle), or the
// machine of its own, made on demand, that it committed to. It writes the
// machine's side, the machine, or the claim's status undoing the
// reservation. A claim with no binding in progress has none to complete.
func (r *Reconciler) completeBinding(ctx context.Context, s *claimScope) (bool, error) {
	switch {
	case !bindingInProgress(s.claim):
		return true, nil
	case s.claim.Status.MachineRef != nil:
		return r.completeBind(ctx, s)
	default:
		return r.bindOnDemand(ctx, s)
	}
}

// bindOnDemand completes a claim's commitment to a machine made on demand,
// from the claim's class.
func (r *Reconciler) bindOnDemand(ctx context.Context, s *claimScope) (bool, error) {
	class, p, err := r.resolveClass(ctx, s.claim)
	if err != nil || p != nil {
		s.waiting = p
		return false, err
	}
	s.class = class
	// The class or the namespace may have changed since the claim
	// committed: create nothing they no longer allow. The commitment stays
	// (another operator may be creating this very machine); the claim says
	// why it waits.
	if !onDemand(s.claim, class) {
		s.waiting = &base.Problem{Reason: macvirtv1alpha1.ReasonWaitingForMachine,
			Message: fmt.Sprintf("committed to a machine made on demand, which MacClass %s no longer allows (tenancy.onDemand)", class.Name)}
		return false, nil
	}
	if p, err := r.checkTenancy(ctx, s.claim, class); err != nil || p != nil {
		s.waiting = p
		return false, err
	}
	return r.createOnDemand(ctx, s)
}

// createOnDemand creates a machine in the claim's namespace, pre-bound to
// it. The claim commits to it first (Bound=False reason Binding, naming no
// machine: its UID is not known yet), under the claim's resourceVersion
// like any reservation; its name is the claim's own, so a second creator
// meets the first one's machine. It is owned by the claim under the Delete
// policy only, so a cluster's garbage collector never deletes a Retained
// machine.
func (r *Reconciler) createOnDemand(ctx context.Context, s *claimScope) (bool, error) {
	claim := s.claim
	if s.class.ImageUnresolved() {
		// A machine recorded at a revision without an image would never
		// get a disk: wait for the class's first import.
		s.waiting = &base.Problem{Reason: macvirtv1alpha1.ReasonWaitingForImage,
			Message: fmt.Sprintf("MacClass %s's image is being imported from its registry for the first time", s.class.Name)}
		return false, nil
	}
	if !bindingInProgress(claim) {
		if err := r.writeReservation(ctx, s, nil, macvirtv1alpha1.ReasonBinding,
			fmt.Sprintf("creating MacMachine %s/%s for this claim", claim.Namespace, onDemandName(claim))); err != nil {
			return false, err
		}
	}
	m := &macvirtv1alpha1.MacMachine{
		ObjectMeta: metav1.ObjectMeta{
			Name: onDemandName(claim), Namespace: claim.Namespace,
			Labels:      map[string]string{macvirtv1alpha1.LabelClass: s.class.Name},
			Annotations: map[string]string{macvirtv1alpha1.AnnotationReclaimPolicy: string(reclaimPolicy(claim))},
		},
		Spec: macvirtv1alpha1.MacMachineSpec{
			ClassName: s.class.Name, ClassRevision: render.ClassRevision(s.class),
			ClaimRef: &macvirtv1alpha1.ObjectRef{Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID},
		},
	}
	if reclaimPolicy(claim) == macvirtv1alpha1.ReclaimDelete {
		m.OwnerReferences = []metav1.OwnerReference{base.ControllerRef("MacClaim", claim.Name, claim.UID)}
	}
	// A paused or stale writer must not create a machine for a claim that
	// has moved on (bound since, lost, or gone): the API server's copy of
	// the claim must still be committed to it.
	fresh := &macvirtv1alpha1.MacClaim{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(claim), fresh); err != nil {
		return false, fmt.Errorf("reading claim %s/%s before creating its machine: %w", claim.Namespace, claim.Name, err)
	}
	if fresh.UID != claim.UID || !bindingInProgress(fresh) || fresh.Status.MachineRef != nil {
		return false, apierrors.NewConflict(macvirtv1alpha1.GroupVersion.WithResource("macclaims").GroupResource(), claim.Name,
			fmt.Errorf("the claim is no longer committed to a machine made on demand"))
	}
	err := r.Create(ctx, m)
	if apierrors.IsAlreadyExists(err) {
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
			return false, fmt.Errorf("getting on-demand machine %s/%s: %w", m.Namespace, m.Name, err)
		}
	} else if err != nil {
		// A quota, an admission webhook or policy, or a webhook that is
		// down: the tenant sees the API server's words on the claim.
		// The claim stays committed (another operator may be creating the
		// same machine this instant) and tries again after backoff.
		err = fmt.Errorf("creating on-demand machine %s/%s: %w", m.Namespace, m.Name, err)
		s.writeFailed = &base.Problem{Reason: macvirtv1alpha1.ReasonCreateFailed, Message: err.Error()}
		base.RecordEvent(r.Recorder, claim, corev1.EventTypeWarning, macvirtv1alpha1.ReasonCreateFailed, "Bind", err.Error())
		return false, err
	}
	if m.Spec.ClaimRef == nil || m.Spec.ClaimRef.UID != claim.UID {
		// A machine of that name made by someone else: it is not this
		// claim's, and never will be.
		if _, err := r.undoReservation(ctx, s, fmt.Sprintf("machine %s exists and belongs to another claim", m.Name)); err != nil {
			return false, err
		}
		s.retrySoon = false
		s.waiting = &base.Problem{Reason: macvirtv1alpha1.ReasonWaitingForMachine, Message: fmt.Sprintf("machine %s exists and belongs to another claim", m.Name)}
		return true, nil
	}
	ctrl.LoggerFrom(ctx).Info("created on-demand machine", "machine", m.Name)
	s.machine, s.retrySoon = m, false
	return true, nil
}

// resolveClass finds the claim's class, through its pool when it names one.
func (r *Reconciler) resolveClass(ctx context.Context, claim *macvirtv1alpha1.MacClaim) (*macvirtv1alpha1.MacClass, *base.Problem, error) {
	className := claim.Spec.ClassName
	if claim.Spec.PoolName != "" {
		pool := &macvirtv1alpha1.MacPool{}
		if err := r.Get(ctx, types.NamespacedName{Name: claim.Spec.PoolName}, pool); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, &base.Problem{Reason: macvirtv1alpha1.ReasonPoolNotFound, Message: fmt.Sprintf("MacPool %q does not exist", claim.Spec.PoolName)}, nil
			}
			return nil, nil, fmt.Errorf("getting MacPool %s: %w", claim.Spec.PoolName, err)
		}
		if className != "" && className != pool.Spec.ClassName {
			return nil, &base.Problem{Reason: macvirtv1alpha1.ReasonClassMismatch, Message: fmt.Sprintf(
				"spec.className %q differs from pool %q's class %q; drop spec.className or name a pool of that class",
				className, pool.Name, pool.Spec.ClassName)}, nil
		}
		className = pool.Spec.ClassName
	}
	class := &macvirtv1alpha1.MacClass{}
	if err := r.Get(ctx, types.NamespacedName{Name: className}, class); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &base.Problem{Reason: macvirtv1alpha1.ReasonClassNotFound, Message: fmt.Sprintf("MacClass %q does not exist", className)}, nil
		}
		return nil, nil, fmt.Errorf("getting MacClass %s: %w", className, err)
	}
	return class, nil, nil
}

// checkTenancy keeps a claim the class does not admit waiting, by the
// policy the admission webhook applies (internal/tenancy): the namespace's
// labels or the class may have changed since admission. A claim asking for
// Retain also waits while its namespace holds the class's
// maxReleasedPerNamespace released machines.
func (r *Reconciler) checkTenancy(ctx context.Context, claim *macvirtv1alpha1.MacClaim, class *macvirtv1alpha1.MacClass) (*base.Problem, error) {
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, types.NamespacedName{Name: claim.Namespace}, ns); err != nil {
		return nil, fmt.Errorf("getting namespace %s for tenancy: %w", claim.Namespace, err)
	}
	policy := reclaimPolicy(claim)
	if refusal := tenancy.Check(class, claim.Namespace, ns.Labels, policy); refusal != nil {
		return &base.Problem{Reason: refusal.Reason, Message: refusal.Message}, nil
	}
	if policy != macvirtv1alpha1.ReclaimRetain || class.Spec.Tenancy.MaxReleasedPerNamespace == nil {
		return nil, nil
	}
	var released macvirtv1alpha1.MacMachineList
	if err := r.List(ctx, &released, client.MatchingFields{index.MachineRetainedFor: index.RetainedKey(claim.Namespace, class.Name)}); err != nil {
		return nil, fmt.Errorf("counting the released machines of namespace %s: %w", claim.Namespace, err)
	}
	counted, err := r.mayServe(ctx, claim.Namespace, released.Items)
	if err != nil {
		return nil, err
	}
	uids := make([]types.UID, 0, len(counted))
	seen := make(map[types.UID]bool, len(counted))
	for _, m := range counted {
		uids = append(uids, m.UID)
		seen[m.UID] = true
	}
	count := r.retained.count(index.RetainedKey(claim.Namespace, class.Name), uids, r.Clock.Now())
	pending, err := r.retainsInProgress(ctx, claim, class.Name)
	if err != nil {
		return nil, err
	}
	for _, uid := range pending {
		if !seen[uid] {
			count++
		}
	}
	if refusal := tenancy.ReleasedFull(class, claim.Namespace, count); refusal != nil {
		return &base.Problem{Reason: refusal.Reason, Message: refusal.Message}, nil
	}
	return nil, nil
}

// retainsInProgress lists, for the Retain bound of claim's namespace and
// class, the bindings other Retain claims there have begun and not
// recorded: each reserved machine's UID, or the committed claim's own UID
// for a machine still to be made on demand. A binding begun by another
// worker or operator (or before a crash) counts before it completes.
func (r *Reconciler) retainsInProgress(ctx context.Context, claim *macvirtv1alpha1.MacClaim, class string) ([]types.UID, error) {
	var claims macvirtv1alpha1.MacClaimList
	if err := r.List(ctx, &claims, client.InNamespace(claim.Namespace)); err != nil {
		return nil, fmt.Errorf("listing the claims of namespace %s: %w", claim.Namespace, err)
	}
	var out []types.UID
	for i := range claims.Items {
		c := &claims.Items[i]
		if c.UID == claim.UID || reclaimPolicy(c) != macvirtv1alpha1.ReclaimRetain || !bindingInProgress(c) {
			continue
		}
		ref := c.Status.MachineRef
		if ref == nil {
			if c.Spec.ClassName == class {
				out = append(out, c.UID)
			}
			continue
		}
		m := &macvirtv1alpha1.MacMachine{}
		if err := base.GetOptional(ctx, r.Client, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, m); err != nil {
			return nil, err
		}
		if m.Name != "" && m.Spec.ClassName == class {
			out = append(out, ref.UID)
		}
	}
	return out, nil
}

// +kubebuilder:rbac:groups=macvirt.io,resources=machosts,verbs=list;watch

// anySuspended says whether a candidate is suspended.
func anySuspended(candidates []*macvirtv1alpha1.MacMachine) bool {
	for _, m := range candidates {
		if m.Status.Phase == macvirtv1alpha1.MachineSuspended {
			return true
		}
	}
	return false
}

// freeSlots reads, for the hosts of the suspended candidates, how many
// licence slots are free to resume one in: the host's slots less the
// machines placed on it that hold one (state.HoldsSlot). A host not read
// counts none free; its machines are tried last. Called with r.resuming
// held.
func (r *Reconciler) freeSlots(ctx context.Context, candidates []*macvirtv1alpha1.MacMachine) (map[string]int, error) {
	free := map[string]int{}
	// Machines this process bound that the cache may not show bound yet.
	bound := map[types.UID]bool{}
	for _, m := range r.assumed.All(r.now()) {
		bound[m.UID] = true
	}
	for _, m := range candidates {
		host := m.Spec.HostName
		if m.Status.Phase != macvirtv1alpha1.MachineSuspended || host == "" {
			continue
		}
		if _, done := free[host]; done {
			continue
		}
		free[host] = 0
		h := &macvirtv1alpha1.MacHost{}
		if err := r.Get(ctx, types.NamespacedName{Name: host}, h); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("reading MacHost %s: %w", host, err)
		}
		if h.Status.Agent == nil {
			continue
		}
		var on macvirtv1alpha1.MacMachineList
		if err := r.List(ctx, &on, client.MatchingFields{index.MachineHost: host}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("listing the machines on MacHost %s: %w", host, err)
		}
		held := 0
		for i := range on.Items {
			if state.HoldsSlot(&on.Items[i]) || bound[on.Items[i].UID] {
				held++
			}
		}
		free[host] = max(0, int(h.Status.Agent.Slots)-max(held, int(h.Status.Agent.RunningVMs)))
	}
	return free, nil
}
