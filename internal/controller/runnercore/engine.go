package runnercore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/tenancy"
)

// Engine does the core's steps for a kind's reconciler: the claims, their
// release, their jobs handed over, the warm pool. Its reconciler keeps one
// and passes its scope and backend.
type Engine struct {
	Client client.Client
	// APIReader confirms a claim is gone before its runner is forgotten
	// as a leak (the cache may not hold a claim just made).
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Cleanups counts runners released early, labelled by the set's
	// namespace, its name and the reason.
	Cleanups *prometheus.CounterVec
	// Handed is the claims whose Mac has its job.
	Handed *Record
	// Now is the reconcile's time, as the reconciler's clock tells it.
	Now time.Time
}

// ListClaims reads the set's runners' claims.
func (e *Engine) ListClaims(ctx context.Context, s *Scope) (bool, error) {
	var claims macvirtv1alpha1.MacClaimList
	if err := e.Client.List(ctx, &claims, client.InNamespace(s.Of.Object.GetNamespace()),
		client.MatchingLabels{s.Of.Label: s.Of.Object.GetName()}); err != nil {
		return false, fmt.Errorf("listing the claims of %s %s: %w", s.Of.Kind, s.Of.Key(), err)
	}
	// Only the set's own claims: a tenant may label a claim of theirs
	// like a runner's, and must not get a job handed to it (or have it
	// released) that way.
	s.Claims = s.Claims[:0]
	for i := range claims.Items {
		if metav1.IsControlledBy(&claims.Items[i], s.Of.Object) {
			s.Claims = append(s.Claims, claims.Items[i])
		}
	}
	sort.Slice(s.Claims, func(i, j int) bool { return s.Claims[i].Name < s.Claims[j].Name })
	return true, nil
}

// Release removes each finished, dead, timed-out or surplus runner from
// the CI system and deletes its claim, which stops its Mac gracefully. A
// surplus runner the CI system says runs a job is kept.
func (e *Engine) Release(ctx context.Context, s *Scope, b Backend) (bool, error) {
	for i := range s.Plan.Runners {
		d := &s.Plan.Runners[i]
		if !d.Release {
			continue
		}
		err := b.Unregister(ctx, d.Name)
		switch {
		case errors.Is(err, ErrBusy) && d.Cleanup == CleanupSurplus:
			d.State, d.Release, d.Cleanup, d.Message = macvirtv1alpha1.RunnerRunning, false, "", "took a job as it was released"
			continue
		case errors.Is(err, ErrBusy):
			// Its job cannot go on (timed out, Mac lost): release the Mac;
			// the leak sweep removes the runner once the system lets go.
		case err != nil && d.Cleanup == CleanupSurplus:
			d.State, d.Release, d.Cleanup = macvirtv1alpha1.RunnerIdle, false, ""
			continue
		}
		claim := s.Claim(d.Name)
		if claim == nil {
			continue
		}
		if err := e.Client.Delete(ctx, claim, client.Preconditions{UID: &claim.UID}); err != nil && !apierrors.IsNotFound(err) {
			s.Fail(macvirtv1alpha1.ReasonRunnerCleanup, fmt.Sprintf("releasing claim %s: %v", d.Name, err))
			return false, fmt.Errorf("releasing claim %s/%s: %w", claim.Namespace, claim.Name, err)
		}
		e.Handed.Forget(claim.UID)
		if d.Cleanup != "" {
			e.cleaned(s, d.Cleanup)
			kind := corev1.EventTypeWarning
			if d.Cleanup == CleanupSurplus {
				kind = corev1.EventTypeNormal
			}
			base.RecordEvent(e.Recorder, s.Of.Object, kind, "RunnerReleased", "Release", fmt.Sprintf("runner %s: %s", d.Name, d.Message))
		}
	}
	return true, nil
}

// Hand gives each provisioning runner's Mac its job, once.
func (e *Engine) Hand(ctx context.Context, s *Scope, b Backend) (bool, error) {
	for i := range s.Claims {
		c := &s.Claims[i]
		if _, _, handed := e.Handed.Get(c.UID, e.Now); !c.DeletionTimestamp.IsZero() || handed {
			continue
		}
		if d := s.Decision(c.Name); d == nil || d.State != macvirtv1alpha1.RunnerProvisioning {
			continue
		}
		if proceed, err := e.hand(ctx, b, c, false); !proceed || err != nil {
			return proceed, err
		}
	}
	return true, nil
}

func (e *Engine) hand(ctx context.Context, b Backend, c *macvirtv1alpha1.MacClaim, fresh bool) (bool, error) {
	done, proceed, err := b.Hand(ctx, c, fresh)
	if done {
		e.Handed.Assume(c.UID, struct{}{}, e.Now, base.UntilForgotten)
	}
	return proceed, err
}

// CreateConcurrency is how many runners Create makes at once. Each is a
// few round trips that wait on nothing of another runner's (the claim,
// admitted by macvirt's webhook; the registration with the CI system; its
// Secret), so one after another a burst of jobs waits for each in turn:
// 500 jobs at once on 500 warm Macs made runners about 2 a second.
// GitHub's own scale-set controller registers 2 runners at a time by
// default and lets an admin raise it; 8 keeps a set's calls to the CI
// system well inside its limits.
const CreateConcurrency = 8

// Create adds the runners the plan asks for, CreateConcurrency at a time:
// for each, the claim first, then its job handed over, so a runner the
// CI system lists always has a claim to find it by, and a leak can be
// told from a new runner. Once a claim or a hand-over is refused, no
// further runner is started; what was made is recorded either way.
func (e *Engine) Create(ctx context.Context, s *Scope, b Backend) (bool, error) {
	type made struct {
		claim         *macvirtv1alpha1.MacClaim
		createErr     error
		started       bool
		done, proceed bool
		handErr       error
	}
	results := make([]made, max(0, s.Plan.Create))
	var refused atomic.Bool
	var g errgroup.Group
	g.SetLimit(CreateConcurrency)
	for i := range results {
		g.Go(func() error {
			if refused.Load() || ctx.Err() != nil {
				return nil
			}
			r := &results[i]
			r.started = true
			name := RunnerName(s.Of.Object.GetName())
			c := RunnerClaim(&s.Of, name, b.Task(name))
			if err := e.Client.Create(ctx, c); err != nil {
				r.createErr = err
				if !apierrors.IsAlreadyExists(err) {
					refused.Store(true)
				}
				return nil
			}
			r.claim = c
			r.done, r.proceed, r.handErr = b.Hand(ctx, c, true)
			if !r.proceed || r.handErr != nil {
				refused.Store(true)
			}
			return nil
		})
	}
	_ = g.Wait() // the workers return no error: each records its own
	proceed, handErr := true, error(nil)
	for i := range results {
		r := &results[i]
		switch {
		case !r.started || apierrors.IsAlreadyExists(r.createErr):
			continue
		case r.createErr != nil:
			if proceed {
				s.Fail(macvirtv1alpha1.ReasonClassUnavailable, fmt.Sprintf("creating a runner's claim: %v", r.createErr))
				base.RecordEvent(e.Recorder, s.Of.Object, corev1.EventTypeWarning, "ClaimRefused", "Create", r.createErr.Error())
			}
			proceed = false
			continue
		}
		c := r.claim
		base.RecordEvent(e.Recorder, s.Of.Object, corev1.EventTypeNormal, "RunnerCreated", "Create",
			fmt.Sprintf("claimed a Mac for runner %s: %d jobs assigned, %d runners", c.Name, s.Assigned, len(s.Claims)+1))
		s.Claims = append(s.Claims, *c)
		s.Plan.Runners = append(s.Plan.Runners, Decision{RunnerStatus: macvirtv1alpha1.RunnerStatus{Name: c.Name,
			State: macvirtv1alpha1.RunnerProvisioning, Message: "waiting for a Mac"}})
		s.Plan.Pending++
		if r.done {
			e.Handed.Assume(c.UID, struct{}{}, e.Now, base.UntilForgotten)
		}
		if !r.proceed {
			proceed = false
		}
		if r.handErr != nil && handErr == nil {
			handErr = r.handErr
		}
	}
	if handErr != nil {
		return false, handErr
	}
	return proceed, nil
}

// ForgetLeaked removes from the CI system each runner it lists that the
// set made and no claim backs (its claim is gone: a crash between the
// claim's deletion and the runner's removal, or a release the system
// refused while a job ran).
func (e *Engine) ForgetLeaked(ctx context.Context, s *Scope, b Backend, listed []Registration) error {
	claimed := map[string]bool{}
	for _, cl := range s.Claims {
		claimed[cl.Name] = true
	}
	ns := s.Of.Object.GetNamespace()
	for _, reg := range listed {
		if claimed[reg.Name] || !OwnsName(s.Of.Object.GetName(), reg.Name) {
			continue
		}
		// Not in the cache: confirm with the API server, as a claim just
		// made may not be cached yet (its runner is registered after it).
		err := e.APIReader.Get(ctx, types.NamespacedName{Namespace: ns, Name: reg.Name}, &macvirtv1alpha1.MacClaim{})
		if err == nil {
			continue
		}
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("confirming claim %s/%s is gone: %w", ns, reg.Name, err)
		}
		if gone, err := b.Forget(ctx, reg); err == nil && gone {
			e.cleaned(s, CleanupOrphan)
			base.RecordEvent(e.Recorder, s.Of.Object, corev1.EventTypeNormal, "OrphanRunnerRemoved", "Cleanup",
				fmt.Sprintf("removed runner %s (id %d) from %s: no claim backs it", reg.Name, reg.ID, s.Of.System))
		}
		// ErrBusy: its Mac is gone; the system fails the job once the
		// runner is lost, and the next sweep removes it. Other errors the
		// backend recorded.
	}
	return nil
}

// EnsureWarmPool keeps the set's own pool at the planned idle target,
// where the set's namespace may claim its class.
func (e *Engine) EnsureWarmPool(ctx context.Context, s *Scope) (bool, error) {
	pool := &macvirtv1alpha1.MacPool{}
	if err := base.GetOptional(ctx, e.Client, types.NamespacedName{Name: s.Of.OwnedPool}, pool); err != nil {
		return false, err
	}
	if !s.Of.OwnsPool() {
		return true, e.drainPool(ctx, s, pool)
	}
	want := OwnedPool(&s.Of, s.Plan.WarmIdle)
	if pool.Name == "" {
		if p, err := e.mayClaim(ctx, s); p != nil || err != nil {
			s.Blocked = p
			return false, err
		}
		if err := e.Client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			s.Fail(macvirtv1alpha1.ReasonClassUnavailable, fmt.Sprintf("creating the warm pool %s: %v", want.Name, err))
			return false, fmt.Errorf("creating MacPool %s: %w", want.Name, err)
		}
		s.Pool = want
		return true, nil
	}
	if !ownedBy(&s.Of, pool) {
		s.Blocked = &base.Problem{Reason: macvirtv1alpha1.ReasonClassUnavailable,
			Message: fmt.Sprintf("MacPool %s exists and is not this set's warm pool; rename the set or remove the pool", pool.Name)}
		return false, nil
	}
	s.Pool = pool
	if equality.Semantic.DeepEqual(pool.Spec.Idle, want.Spec.Idle) && equality.Semantic.DeepEqual(pool.Spec.MaxMachines, want.Spec.MaxMachines) &&
		pool.Spec.ClassName == want.Spec.ClassName {
		return true, nil
	}
	patch := client.MergeFrom(pool.DeepCopy())
	pool.Spec.Idle, pool.Spec.MaxMachines, pool.Spec.ClassName = want.Spec.Idle, want.Spec.MaxMachines, want.Spec.ClassName
	if err := e.Client.Patch(ctx, pool, patch); err != nil {
		s.Fail(macvirtv1alpha1.ReasonClassUnavailable, fmt.Sprintf("moving the warm pool's idle target to %d: %v", *want.Spec.Idle, err))
		return false, fmt.Errorf("patching MacPool %s: %w", pool.Name, err)
	}
	return true, nil
}

// drainPool sets the idle target of the set's former warm pool to 0, once
// the set keeps none (minIdle 0, or a poolName): its warm Macs go, and the
// pool itself goes with the set.
func (e *Engine) drainPool(ctx context.Context, s *Scope, pool *macvirtv1alpha1.MacPool) error {
	if pool.Name == "" || !ownedBy(&s.Of, pool) || !pool.DeletionTimestamp.IsZero() || (pool.Spec.Idle != nil && *pool.Spec.Idle == 0) {
		return nil
	}
	patch := client.MergeFrom(pool.DeepCopy())
	zero := int32(0)
	pool.Spec.Idle = &zero
	if err := e.Client.Patch(ctx, pool, patch); err != nil {
		s.Fail(macvirtv1alpha1.ReasonClassUnavailable, fmt.Sprintf("emptying the former warm pool %s: %v", pool.Name, err))
		return fmt.Errorf("patching MacPool %s: %w", pool.Name, err)
	}
	return nil
}

// mayClaim refuses a warm pool of a class the set's namespace may not
// claim: owning a pool must not give the set more than its namespace has.
func (e *Engine) mayClaim(ctx context.Context, s *Scope) (*base.Problem, error) {
	class := &macvirtv1alpha1.MacClass{}
	if err := e.Client.Get(ctx, types.NamespacedName{Name: s.Of.ClassName}, class); err != nil {
		if apierrors.IsNotFound(err) {
			return &base.Problem{Reason: macvirtv1alpha1.ReasonClassUnavailable,
				Message: fmt.Sprintf("spec.className: MacClass %q does not exist", s.Of.ClassName)}, nil
		}
		return nil, err
	}
	ns := &corev1.Namespace{}
	if err := e.Client.Get(ctx, types.NamespacedName{Name: s.Of.Object.GetNamespace()}, ns); err != nil {
		return nil, err
	}
	if refusal := tenancy.Check(class, s.Of.Object.GetNamespace(), ns.Labels, macvirtv1alpha1.ReclaimDelete); refusal != nil {
		return &base.Problem{Reason: macvirtv1alpha1.ReasonClassUnavailable, Message: "spec.className: " + refusal.Message}, nil
	}
	return nil, nil
}

// ReleaseAll deletes every claim of the set and its warm pool (or former
// one), for a set being deleted: done once no claim is left.
func (e *Engine) ReleaseAll(ctx context.Context, s *Scope) (bool, error) {
	if _, err := e.ListClaims(ctx, s); err != nil {
		return false, err
	}
	for i := range s.Claims {
		c := &s.Claims[i]
		if c.DeletionTimestamp.IsZero() {
			if err := e.Client.Delete(ctx, c); err != nil && !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("releasing claim %s/%s: %w", c.Namespace, c.Name, err)
			}
		}
	}
	pool := &macvirtv1alpha1.MacPool{}
	if err := base.GetOptional(ctx, e.Client, types.NamespacedName{Name: s.Of.OwnedPool}, pool); err != nil {
		return false, err
	}
	if pool.Name != "" && ownedBy(&s.Of, pool) && pool.DeletionTimestamp.IsZero() {
		if err := e.Client.Delete(ctx, pool); err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("deleting the warm pool %s: %w", pool.Name, err)
		}
	}
	return len(s.Claims) == 0, nil
}

func (e *Engine) cleaned(s *Scope, reason string) {
	if e.Cleanups != nil {
		e.Cleanups.WithLabelValues(s.Of.Object.GetNamespace(), s.Of.Object.GetName(), reason).Inc()
	}
}
