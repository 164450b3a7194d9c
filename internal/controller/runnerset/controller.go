package runnerset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/metrics"
	"github.com/macvirt/macvirt/internal/github"
	"github.com/macvirt/macvirt/internal/tenancy"
)

// +kubebuilder:rbac:groups=macvirt.io,resources=macrunnersets,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=macvirt.io,resources=macrunnersets/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=macvirt.io,resources=macrunnersets/finalizers,verbs=update
// +kubebuilder:rbac:groups=macvirt.io,resources=macclaims,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups=macvirt.io,resources=macpools,verbs=get;list;watch;create;delete;patch

// finalizer keeps a set until its runners are released and removed from
// GitHub, and its scale set with them.
const finalizer = "macvirt.io/runner-set"

// busyRecheck is how soon a set with runners or jobs looks again: for
// timeouts and GitHub's runner list, which no event announces.
const busyRecheck = 10 * time.Second

// quietRecheck is how soon a set with nothing to do looks again, for
// orphans left on GitHub.
const quietRecheck = time.Minute

// Reconcile gathers the set's credentials, listener and claims, plans, and
// acts; it writes the status once, computed from what it saw and did.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, reterr error) {
	set := &macvirtv1alpha1.MacRunnerSet{}
	if err := r.Get(ctx, req.NamespacedName, set); err != nil {
		if apierrors.IsNotFound(err) {
			r.Listeners.Stop(req.NamespacedName)
			metrics.ForgetRunnerSet(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	s := &setScope{Set: set, Key: req.NamespacedName}
	if !set.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, s)
	}
	if !controllerutil.ContainsFinalizer(set, finalizer) {
		patch := client.MergeFrom(set.DeepCopy())
		controllerutil.AddFinalizer(set, finalizer)
		if err := r.Patch(ctx, set, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer to MacRunnerSet %s: %w", req.NamespacedName, err)
		}
	}
	defer func() {
		if err := r.patchStatus(ctx, s); err != nil && reterr == nil {
			result, reterr = ctrl.Result{}, err
		}
	}()
	err := base.RunSteps(ctx, s,
		r.loadCredentials,
		r.ensureListener,
		r.listClaims,
		r.refreshRunners,
		r.plan,
		r.recordJobs,
		r.release,
		r.ensureJIT,
		r.create,
		r.ensureWarmPool,
	)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(s.Claims) > 0 || s.Demand.Assigned > 0 || !s.Demand.Listening {
		return ctrl.Result{RequeueAfter: busyRecheck}, nil
	}
	return ctrl.Result{RequeueAfter: quietRecheck}, nil
}

// loadCredentials reads the set's address and credentials Secret.
func (r *Reconciler) loadCredentials(ctx context.Context, s *setScope) (bool, error) {
	scope, err := github.ParseScope(s.Set.Spec.GitHub.URL)
	if err != nil {
		s.Blocked = &base.Problem{Reason: macvirtv1alpha1.ReasonInvalidGitHubURL, Message: "spec.github.url: " + err.Error()}
		r.Listeners.Stop(s.Key)
		return true, nil
	}
	s.Scope = scope
	sec := &corev1.Secret{}
	key := types.NamespacedName{Namespace: s.Set.Namespace, Name: s.Set.Spec.GitHub.CredentialsSecretName}
	if err := r.APIReader.Get(ctx, key, sec); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			s.Blocked = &base.Problem{Reason: macvirtv1alpha1.ReasonCredentialsInvalid,
				Message: fmt.Sprintf("spec.github.credentialsSecretName: Secret %s does not exist; create it (docs/github-actions.md)", key)}
		case apierrors.IsForbidden(err):
			s.Blocked = &base.Problem{Reason: macvirtv1alpha1.ReasonCredentialsInvalid, Message: fmt.Sprintf(
				"spec.github.credentialsSecretName: the operator may not read Secrets in namespace %s; bind the ClusterRole "+
					"macvirt-bootstrap-source-reader to its service account there (docs/github-actions.md): %v", s.Set.Namespace, err)}
		default:
			return false, fmt.Errorf("reading Secret %s: %w", key, err)
		}
		r.Listeners.Stop(s.Key)
		return true, nil
	}
	creds, err := github.CredentialsFromSecret(sec)
	if err != nil {
		s.Blocked = &base.Problem{Reason: macvirtv1alpha1.ReasonCredentialsInvalid, Message: err.Error()}
		r.Listeners.Stop(s.Key)
		return true, nil
	}
	s.Credentials = &creds
	return true, nil
}

// ensureListener runs the set's listener with its current configuration.
func (r *Reconciler) ensureListener(_ context.Context, s *setScope) (bool, error) {
	if s.Credentials != nil {
		spec := s.Set.Spec
		labels := append([]string(nil), spec.Labels...)
		sort.Strings(labels)
		r.Listeners.Ensure(s.Key, ListenerConfig{Scope: s.Scope, Credentials: *s.Credentials, ScaleSetName: s.Set.EffectiveScaleSetName(),
			RunnerGroup: spec.GitHub.RunnerGroup, Labels: labels, MaxRunners: int(spec.MaxRunners)})
	}
	s.Demand = r.Listeners.Demand(s.Key)
	return true, nil
}

// listClaims reads the set's runners' claims.
func (r *Reconciler) listClaims(ctx context.Context, s *setScope) (bool, error) {
	var claims macvirtv1alpha1.MacClaimList
	if err := r.List(ctx, &claims, client.InNamespace(s.Set.Namespace), client.MatchingLabels{macvirtv1alpha1.LabelRunnerSet: s.Set.Name}); err != nil {
		return false, fmt.Errorf("listing the claims of MacRunnerSet %s: %w", s.Key, err)
	}
	s.Claims = claims.Items
	sort.Slice(s.Claims, func(i, j int) bool { return s.Claims[i].Name < s.Claims[j].Name })
	return true, nil
}

// refreshRunners reads GitHub's list of the scale set's runners, at most
// once per resync, and removes those no claim backs.
func (r *Reconciler) refreshRunners(ctx context.Context, s *setScope) (bool, error) {
	c := s.Demand.Client
	if c == nil || s.Demand.ScaleSetID == 0 || r.now().Sub(s.Demand.RunnersAt) < r.resync() {
		return true, nil
	}
	runners, err := c.ListRunners(ctx, s.Set.EffectiveScaleSetName())
	if err != nil {
		r.githubFailed(s, c, err)
		return true, nil
	}
	r.Listeners.RecordRunners(s.Key, runners, r.now())
	s.Demand.Runners, s.Demand.RunnersAt = runners, r.now()
	claimed := map[string]bool{}
	for _, cl := range s.Claims {
		claimed[cl.Name] = true
	}
	for _, gr := range runners {
		if claimed[gr.Name] || !ownsName(s.Set, gr.Name) {
			continue
		}
		// Not in the cache: confirm with the API server, as a claim just
		// made may not be cached yet (its runner is registered after it).
		err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: s.Set.Namespace, Name: gr.Name}, &macvirtv1alpha1.MacClaim{})
		if err == nil {
			continue
		}
		if !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("confirming claim %s/%s is gone: %w", s.Set.Namespace, gr.Name, err)
		}
		gone, err := c.RemoveRunnerByID(ctx, gr.ID, gr.Name)
		switch {
		case errors.Is(err, github.ErrBusy):
			// Its Mac is gone; GitHub fails the job once the runner is
			// lost, and the next resync removes it.
		case err != nil:
			r.githubFailed(s, c, err)
		case gone:
			metrics.RunnerSetCleanups.WithLabelValues(s.Set.Namespace, s.Set.Name, cleanupOrphan).Inc()
			base.RecordEvent(r.Recorder, s.Set, corev1.EventTypeNormal, "OrphanRunnerRemoved", "Cleanup",
				fmt.Sprintf("removed runner %s (id %d) from GitHub: no claim backs it", gr.Name, gr.ID))
		}
	}
	return true, nil
}

// plan decides from the facts.
func (r *Reconciler) plan(_ context.Context, s *setScope) (bool, error) {
	listed := map[string]github.Runner{}
	for _, gr := range s.Demand.Runners {
		listed[gr.Name] = gr
	}
	in := planInput{Now: r.now(), Known: s.Demand.Known && s.Blocked == nil, Assigned: s.Demand.Assigned,
		MaxRunners: int(s.Set.Spec.MaxRunners), MinIdle: int(s.Set.Spec.MinIdle), OwnsPool: ownsPool(s.Set),
		JobTimeout: s.Set.Spec.EffectiveJobTimeout(), RegistrationTimeout: s.Set.Spec.EffectiveRegistrationTimeout()}
	for i := range s.Claims {
		c := &s.Claims[i]
		f := runnerFacts{Name: c.Name, Created: c.CreationTimestamp.Time, Deleting: !c.DeletionTimestamp.IsZero(),
			Bound: c.Status.MachineRef != nil, Lost: c.Status.Phase == macvirtv1alpha1.ClaimLost, Result: s.Demand.Completed[c.Name]}
		if job, ok := s.Demand.Started[c.Name]; ok {
			f.Job = &job
		} else if raw := c.Annotations[macvirtv1alpha1.AnnotationRunnerJob]; raw != "" {
			var job macvirtv1alpha1.RunnerJob
			if json.Unmarshal([]byte(raw), &job) == nil {
				f.Job = &job
			}
		}
		for _, part := range c.Status.Bootstrap {
			if part.Name == macvirtv1alpha1.BootstrapPartClaim && part.State.Finished() {
				f.TaskEnded = part.State
			}
		}
		if gr, ok := listed[c.Name]; ok {
			f.Listed, f.Online, f.Busy = true, gr.Online, gr.Busy
		}
		in.Runners = append(in.Runners, f)
	}
	s.Plan = decide(in)
	return true, nil
}

// recordJobs writes on each claim the job GitHub gave its runner, so a
// restarted operator knows which runners run jobs.
func (r *Reconciler) recordJobs(ctx context.Context, s *setScope) (bool, error) {
	for i := range s.Claims {
		c := &s.Claims[i]
		job, ok := s.Demand.Started[c.Name]
		if !ok || c.Annotations[macvirtv1alpha1.AnnotationRunnerJob] != "" || !c.DeletionTimestamp.IsZero() {
			continue
		}
		raw, err := json.Marshal(job)
		if err != nil {
			return false, err
		}
		patch := client.MergeFrom(c.DeepCopy())
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[macvirtv1alpha1.AnnotationRunnerJob] = string(raw)
		if err := r.Patch(ctx, c, patch); err != nil && !apierrors.IsNotFound(err) {
			s.fail(macvirtv1alpha1.ReasonRunnerCleanup, fmt.Sprintf("recording job %s on claim %s: %v", job.ID, c.Name, err))
			return false, err
		}
	}
	return true, nil
}

// release removes each finished, dead, timed-out or surplus runner from
// GitHub and deletes its claim, which stops its Mac gracefully. A surplus
// runner GitHub says runs a job is kept.
func (r *Reconciler) release(ctx context.Context, s *setScope) (bool, error) {
	present := map[string]bool{}
	for i := range s.Claims {
		present[s.Claims[i].Name] = true
	}
	var gone []string
	for name := range s.Demand.Started {
		if !present[name] {
			gone = append(gone, name)
		}
	}
	for name := range s.Demand.Completed {
		if !present[name] {
			gone = append(gone, name)
		}
	}
	r.Listeners.Forget(s.Key, gone...)
	c := s.Demand.Client
	for i := range s.Plan.Runners {
		d := &s.Plan.Runners[i]
		if !d.Release {
			continue
		}
		if c != nil {
			_, err := c.RemoveRunner(ctx, d.Name)
			switch {
			case errors.Is(err, github.ErrBusy) && d.Cleanup == cleanupSurplus:
				d.State, d.Release, d.Cleanup, d.Message = macvirtv1alpha1.RunnerRunning, false, "", "took a job as it was released"
				continue
			case errors.Is(err, github.ErrBusy):
				// Its job cannot go on (timed out, Mac lost): release the Mac;
				// the resync removes the runner once GitHub lets go of it.
			case err != nil:
				r.githubFailed(s, c, err)
				if d.Cleanup == cleanupSurplus {
					d.State, d.Release, d.Cleanup = macvirtv1alpha1.RunnerIdle, false, ""
					continue
				}
			}
		}
		claim := s.claim(d.Name)
		if err := r.Delete(ctx, claim, client.Preconditions{UID: &claim.UID}); err != nil && !apierrors.IsNotFound(err) {
			s.fail(macvirtv1alpha1.ReasonRunnerCleanup, fmt.Sprintf("releasing claim %s: %v", d.Name, err))
			return false, fmt.Errorf("releasing claim %s/%s: %w", claim.Namespace, claim.Name, err)
		}
		r.jit.forget(claim.UID)
		if d.Cleanup != "" {
			metrics.RunnerSetCleanups.WithLabelValues(s.Set.Namespace, s.Set.Name, d.Cleanup).Inc()
			kind := corev1.EventTypeWarning
			if d.Cleanup == cleanupSurplus {
				kind = corev1.EventTypeNormal
			}
			base.RecordEvent(r.Recorder, s.Set, kind, "RunnerReleased", "Release", fmt.Sprintf("runner %s: %s", d.Name, d.Message))
		}
	}
	return true, nil
}

// claim is the scope's claim named name.
func (s *setScope) claim(name string) *macvirtv1alpha1.MacClaim {
	for i := range s.Claims {
		if s.Claims[i].Name == name {
			return &s.Claims[i]
		}
	}
	return nil
}

// ensureJIT registers a runner on GitHub for each claim that has no JIT
// Secret yet, and writes its configuration there for the Mac's task.
func (r *Reconciler) ensureJIT(ctx context.Context, s *setScope) (bool, error) {
	for i := range s.Claims {
		c := &s.Claims[i]
		if !c.DeletionTimestamp.IsZero() || r.jit.has(c.UID) {
			continue
		}
		if d := s.decision(c.Name); d == nil || d.State != macvirtv1alpha1.RunnerProvisioning {
			continue
		}
		if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, &corev1.Secret{}); err == nil {
			r.jit.add(c.UID)
			continue
		} else if !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("reading the JIT Secret of claim %s/%s: %w", c.Namespace, c.Name, err)
		}
		if proceed, err := r.registerRunner(ctx, s, c); !proceed || err != nil {
			return proceed, err
		}
	}
	return true, nil
}

// registerRunner registers claim's runner and writes its JIT Secret.
func (r *Reconciler) registerRunner(ctx context.Context, s *setScope, c *macvirtv1alpha1.MacClaim) (bool, error) {
	gh := s.Demand.Client
	if gh == nil || s.Demand.ScaleSetID == 0 {
		return true, nil
	}
	jit, err := gh.GenerateJIT(ctx, s.Demand.ScaleSetID, c.Name)
	if err != nil {
		r.githubFailed(s, gh, err)
		return false, nil
	}
	if err := r.Create(ctx, jitSecret(c, jit)); err != nil && !apierrors.IsAlreadyExists(err) {
		s.fail(macvirtv1alpha1.ReasonRunnerCleanup, fmt.Sprintf("creating the JIT Secret of runner %s: %v", c.Name, err))
		return false, fmt.Errorf("creating Secret %s/%s: %w", c.Namespace, c.Name, err)
	}
	r.jit.add(c.UID)
	return true, nil
}

// decision is the plan's decision about the runner named name.
func (s *setScope) decision(name string) *runnerDecision {
	for i := range s.Plan.Runners {
		if s.Plan.Runners[i].Name == name {
			return &s.Plan.Runners[i]
		}
	}
	return nil
}

// create adds the runners the plan asks for: the claim first, then its
// registration on GitHub and its JIT Secret, so a runner on GitHub always
// has a claim to find it by, and an orphan can be told from a new runner.
func (r *Reconciler) create(ctx context.Context, s *setScope) (bool, error) {
	if s.Plan.Create == 0 || s.Demand.Client == nil || s.Demand.ScaleSetID == 0 {
		return true, nil
	}
	for i := 0; i < s.Plan.Create; i++ {
		c := runnerClaim(s.Set, runnerName(s.Set))
		if err := r.Create(ctx, c); err != nil {
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			s.fail(macvirtv1alpha1.ReasonClassUnavailable, fmt.Sprintf("creating a runner's claim: %v", err))
			base.RecordEvent(r.Recorder, s.Set, corev1.EventTypeWarning, "ClaimRefused", "Create", err.Error())
			return false, nil
		}
		base.RecordEvent(r.Recorder, s.Set, corev1.EventTypeNormal, "RunnerCreated", "Create",
			fmt.Sprintf("claimed a Mac for runner %s: %d jobs assigned, %d runners", c.Name, s.Demand.Assigned, len(s.Claims)+i+1))
		s.Claims = append(s.Claims, *c)
		s.Plan.Runners = append(s.Plan.Runners, runnerDecision{RunnerStatus: macvirtv1alpha1.RunnerStatus{Name: c.Name,
			State: macvirtv1alpha1.RunnerProvisioning, Message: "waiting for a Mac"}})
		s.Plan.Pending++
		if proceed, err := r.registerRunner(ctx, s, c); !proceed || err != nil {
			return proceed, err
		}
	}
	return true, nil
}

// ensureWarmPool keeps the set's own pool at the planned idle target,
// where the set's namespace may claim its class.
func (r *Reconciler) ensureWarmPool(ctx context.Context, s *setScope) (bool, error) {
	if !ownsPool(s.Set) {
		return true, nil
	}
	pool := &macvirtv1alpha1.MacPool{}
	if err := base.GetOptional(ctx, r.Client, types.NamespacedName{Name: ownedPoolName(s.Set)}, pool); err != nil {
		return false, err
	}
	want := ownedPool(s.Set, s.Plan.WarmIdle)
	if pool.Name == "" {
		if p, err := r.mayClaim(ctx, s); p != nil || err != nil {
			s.Blocked = p
			return false, err
		}
		if err := r.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			s.fail(macvirtv1alpha1.ReasonClassUnavailable, fmt.Sprintf("creating the warm pool %s: %v", want.Name, err))
			return false, fmt.Errorf("creating MacPool %s: %w", want.Name, err)
		}
		s.Pool = want
		return true, nil
	}
	if pool.Labels[macvirtv1alpha1.LabelRunnerSetNamespace] != s.Set.Namespace || pool.Labels[macvirtv1alpha1.LabelRunnerSet] != s.Set.Name {
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
	if err := r.Patch(ctx, pool, patch); err != nil {
		s.fail(macvirtv1alpha1.ReasonClassUnavailable, fmt.Sprintf("moving the warm pool's idle target to %d: %v", *want.Spec.Idle, err))
		return false, fmt.Errorf("patching MacPool %s: %w", pool.Name, err)
	}
	return true, nil
}

// mayClaim refuses a warm pool of a class the set's namespace may not
// claim: owning a pool must not give the set more than its namespace has.
func (r *Reconciler) mayClaim(ctx context.Context, s *setScope) (*base.Problem, error) {
	class := &macvirtv1alpha1.MacClass{}
	if err := r.Get(ctx, types.NamespacedName{Name: s.Set.Spec.ClassName}, class); err != nil {
		if apierrors.IsNotFound(err) {
			return &base.Problem{Reason: macvirtv1alpha1.ReasonClassUnavailable,
				Message: fmt.Sprintf("spec.className: MacClass %q does not exist", s.Set.Spec.ClassName)}, nil
		}
		return nil, err
	}
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, types.NamespacedName{Name: s.Set.Namespace}, ns); err != nil {
		return nil, err
	}
	if refusal := tenancy.Check(class, s.Set.Namespace, ns.Labels, macvirtv1alpha1.ReclaimDelete); refusal != nil {
		return &base.Problem{Reason: macvirtv1alpha1.ReasonClassUnavailable, Message: "spec.className: " + refusal.Message}, nil
	}
	return nil, nil
}

// githubFailed records an error GitHub answered the reconcile with.
func (r *Reconciler) githubFailed(s *setScope, c *github.Client, err error) {
	p := Problem{Explanation: c.Explain(err), At: r.now()}
	r.Listeners.RecordError(s.Key, p)
	s.Demand.Err = &p
}

// finalize releases every runner, removes them and the scale set from
// GitHub, deletes the warm pool, and lets the set go.
func (r *Reconciler) finalize(ctx context.Context, s *setScope) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(s.Set, finalizer) {
		return ctrl.Result{}, nil
	}
	if err := base.MarkDeleting(ctx, r.Client, s.Set, &s.Set.Status.Conditions,
		"the runner set is being deleted: its runners are released and removed from GitHub"); err != nil {
		return base.DeletingResult(err)
	}
	if _, err := r.listClaims(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	for i := range s.Claims {
		c := &s.Claims[i]
		if c.DeletionTimestamp.IsZero() {
			if err := r.Delete(ctx, c); err != nil && !apierrors.IsNotFound(err) {
				return ctrl.Result{}, fmt.Errorf("releasing claim %s/%s: %w", c.Namespace, c.Name, err)
			}
		}
	}
	if ownsPool(s.Set) || s.Set.Status.WarmPoolName != "" {
		pool := &macvirtv1alpha1.MacPool{}
		if err := base.GetOptional(ctx, r.Client, types.NamespacedName{Name: ownedPoolName(s.Set)}, pool); err != nil {
			return ctrl.Result{}, err
		}
		if pool.Name != "" && pool.Labels[macvirtv1alpha1.LabelRunnerSetNamespace] == s.Set.Namespace && pool.DeletionTimestamp.IsZero() {
			if err := r.Delete(ctx, pool); err != nil && !apierrors.IsNotFound(err) {
				return ctrl.Result{}, fmt.Errorf("deleting the warm pool %s: %w", pool.Name, err)
			}
		}
	}
	if len(s.Claims) > 0 {
		return ctrl.Result{RequeueAfter: busyRecheck}, nil
	}
	if err := r.unregister(ctx, s); err != nil {
		// GitHub out of reach or the credentials gone: keep trying a while,
		// then let the set go, saying what may be left on GitHub.
		if r.now().Sub(s.Set.DeletionTimestamp.Time) < 10*time.Minute {
			return ctrl.Result{RequeueAfter: busyRecheck}, nil
		}
		base.RecordEvent(r.Recorder, s.Set, corev1.EventTypeWarning, "ScaleSetLeftOnGitHub", "Delete",
			fmt.Sprintf("could not remove the scale set %q and its runners from GitHub; remove them in the repository's or organisation's "+
				"Actions runner settings: %v", s.Set.EffectiveScaleSetName(), err))
	}
	r.Listeners.Stop(s.Key)
	patch := client.MergeFrom(s.Set.DeepCopy())
	controllerutil.RemoveFinalizer(s.Set, finalizer)
	if err := r.Patch(ctx, s.Set, patch); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	metrics.ForgetRunnerSet(s.Set.Namespace, s.Set.Name)
	return ctrl.Result{}, nil
}

// unregister removes the set's runners and its scale set from GitHub. A
// set that never registered a scale set has nothing there.
func (r *Reconciler) unregister(ctx context.Context, s *setScope) error {
	d := r.Listeners.Demand(s.Key)
	id := d.ScaleSetID
	if id == 0 {
		id = int(s.Set.Status.ScaleSetID)
	}
	if id == 0 {
		return nil
	}
	if _, err := r.loadCredentials(ctx, s); err != nil {
		return err
	}
	if s.Credentials == nil {
		return errors.New(s.Blocked.Message)
	}
	c := d.Client
	if c == nil {
		var err error
		if c, err = github.New(s.Scope, *s.Credentials, r.Listeners.Client); err != nil {
			return err
		}
	}
	r.Listeners.Stop(s.Key)
	runners, err := c.ListRunners(ctx, s.Set.EffectiveScaleSetName())
	if err != nil {
		return err
	}
	for _, gr := range runners {
		if ownsName(s.Set, gr.Name) {
			if _, err := c.RemoveRunnerByID(ctx, gr.ID, gr.Name); err != nil {
				return err
			}
		}
	}
	return c.DeleteScaleSet(ctx, id)
}

// patchStatus writes the computed status, only if it changed.
func (r *Reconciler) patchStatus(ctx context.Context, s *setScope) error {
	st := computeRunnerSetStatus(s, r.now())
	set := s.Set
	for state, n := range map[string]int{"pending": s.Plan.Pending, "idle": s.Plan.Idle, "running": s.Plan.Running, "finishing": s.Plan.Finishing} {
		metrics.RunnerSetRunners.WithLabelValues(set.Namespace, set.Name, state).Set(float64(n))
	}
	if equality.Semantic.DeepEqual(set.Status, st) {
		return nil
	}
	before := set.DeepCopy()
	set.Status = st
	if written, err := base.WriteStatus(ctx, r.Client, set, before, false); !written {
		return err
	}
	if reason, note, ok := base.TurnedStalled(before.Status.Conditions, st.Conditions); ok {
		base.RecordEvent(r.Recorder, set, corev1.EventTypeWarning, reason, "Reconcile", note)
	}
	if was, now := before.Status.LastGitHubError, st.LastGitHubError; now != nil && (was == nil || was.Message != now.Message) {
		base.RecordEvent(r.Recorder, set, corev1.EventTypeWarning, "GitHubError", "Reconcile", now.Message)
	}
	return nil
}

func (r *Reconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

func (r *Reconciler) resync() time.Duration {
	if r.Resync <= 0 {
		return 15 * time.Second
	}
	return r.Resync
}

// SetupWithManager watches runner sets, their claims, their warm pools and
// the listeners' events, and runs the listeners under the manager.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if err := mgr.Add(r.Listeners); err != nil {
		return err
	}
	name := r.ControllerName
	if name == "" {
		name = "macrunnerset"
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&macvirtv1alpha1.MacRunnerSet{}).
		Owns(&macvirtv1alpha1.MacClaim{}).
		Watches(&macvirtv1alpha1.MacPool{}, handler.EnqueueRequestsFromMapFunc(poolToSet)).
		WatchesRawSource(source.Channel(r.Listeners.Events, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Named(name).
		Complete(r)
}

func poolToSet(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[macvirtv1alpha1.LabelRunnerSet] == "" || l[macvirtv1alpha1.LabelRunnerSetNamespace] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: l[macvirtv1alpha1.LabelRunnerSetNamespace], Name: l[macvirtv1alpha1.LabelRunnerSet]}}}
}
