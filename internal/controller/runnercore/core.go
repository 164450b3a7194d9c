package runnercore

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// Set is a runner set as the core sees it, whichever kind holds it and
// whichever CI system it serves.
type Set struct {
	// Object is the set itself: the owner of its claims and the subject of
	// its events.
	Object client.Object
	// Kind is Object's kind, for its claims' owner references.
	Kind string
	// Label is the label key that names the set on its claims.
	Label string
	// System names the CI system in messages ("GitHub").
	System string
	// ServiceErrorReason is the reason of the Warning event WriteStatus
	// records when the CI system answers a new error ("GitHubError").
	ServiceErrorReason string
	// ClassName or PoolName is where each runner's Mac comes from.
	ClassName, PoolName string
	MaxRunners, MinIdle int32
	JobTimeout          time.Duration
	RegistrationTimeout time.Duration
	// OwnedPool is the name of the set's own warm pool (cluster-scoped,
	// so it carries the namespace), and PoolLabels the labels that mark a
	// pool of that name as the set's.
	OwnedPool  string
	PoolLabels map[string]string
}

// OwnsPool reports whether the set keeps a warm pool of its class.
func (s *Set) OwnsPool() bool {
	return s.ClassName != "" && s.MinIdle > 0
}

// Key is the set's namespace and name.
func (s *Set) Key() types.NamespacedName {
	return types.NamespacedName{Namespace: s.Object.GetNamespace(), Name: s.Object.GetName()}
}

// Backend is what a CI system gives the core: how a Mac is handed its
// job, and how a runner's registration is removed. Where demand comes
// from is the Facts and Assigned the kind's plan step reads from it.
type Backend interface {
	// Task is the guest task that runs the runner named name on its Mac:
	// one job, then it exits. It reads what Hand writes.
	Task(name string) macvirtv1alpha1.Bootstrap
	// Hand gives claim's Mac its job when it can (GitHub registers a
	// just-in-time runner and writes its configuration to a Secret the
	// task reads). done: the Mac has what it needs, or surely will
	// without another Hand. proceed false ends the reconcile's steps (the
	// CI system refused; the backend recorded why). fresh: the claim was
	// made in this reconcile, so nothing was handed to it yet; Create
	// hands fresh claims over from several goroutines at once, so what
	// Hand records of a fresh claim it guards.
	Hand(ctx context.Context, claim *macvirtv1alpha1.MacClaim, fresh bool) (done, proceed bool, err error)
	// Unregister removes a released runner's registration from the CI
	// system: ErrBusy when the system says a job runs on it, another
	// error (recorded by the backend) when the call failed.
	Unregister(ctx context.Context, name string) error
	// Forget removes the registration of a runner no claim backs: gone
	// when it was removed, ErrBusy as above.
	Forget(ctx context.Context, reg Registration) (gone bool, err error)
}

// Registration is a runner the CI system lists.
type Registration struct {
	ID   int64
	Name string
}

// ErrBusy is a backend's answer when the CI system will not let go of a
// runner that runs a job.
var ErrBusy = errors.New("the runner runs a job")

// Scope is the core's part of one reconcile of a set: its claims, the
// plan, and what blocked or failed.
type Scope struct {
	Of Set
	// Assigned is the jobs the CI system wants Macs for, as the plan
	// read them.
	Assigned int
	// Blocked is a problem that needs a human: the address, the
	// credentials, the class.
	Blocked *base.Problem
	// Claims are the set's runners' claims, by name.
	Claims []macvirtv1alpha1.MacClaim
	Plan   Plan
	// Failed is the first write or CI call of this reconcile that failed,
	// in its own words.
	Failed *base.Problem
	// Pool is the set's own warm pool, when it has one.
	Pool *macvirtv1alpha1.MacPool
}

// Fail records the first failure of the reconcile.
func (s *Scope) Fail(reason, msg string) {
	if s.Failed == nil {
		s.Failed = &base.Problem{Reason: reason, Message: msg}
	}
}

// Claim is the scope's claim named name.
func (s *Scope) Claim(name string) *macvirtv1alpha1.MacClaim {
	for i := range s.Claims {
		if s.Claims[i].Name == name {
			return &s.Claims[i]
		}
	}
	return nil
}

// Decision is the plan's decision about the runner named name.
func (s *Scope) Decision(name string) *Decision {
	for i := range s.Plan.Runners {
		if s.Plan.Runners[i].Name == name {
			return &s.Plan.Runners[i]
		}
	}
	return nil
}

// Record is the claims whose Mac was handed its job, by UID, until their
// release, so a busy set does not ask again on every reconcile: what was
// handed over (a Secret the operator may not cache, a CI system's
// registration) is not in the cache to be read back.
type Record = base.Assumed[types.UID, struct{}]
