package runnerset

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/metrics"
	"github.com/macvirt/macvirt/internal/controller/runnercore"
	"github.com/macvirt/macvirt/internal/github"
)

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
	done, err := r.engine().ReleaseAll(ctx, &s.Scope)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !done {
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
	if _, err := base.RemoveFinalizer(ctx, r.Client, s.Set, finalizer); err != nil {
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
		if c, err = github.New(s.Target, *s.Credentials, r.Listeners.Client); err != nil {
			return err
		}
	}
	r.Listeners.Stop(s.Key)
	owns := func(name string) bool { return runnercore.OwnsName(s.Set.Name, name) }
	runners, err := c.ListRunners(ctx, s.Set.EffectiveScaleSetName(), owns)
	if err != nil {
		return err
	}
	for _, gr := range runners {
		if runnercore.OwnsName(s.Set.Name, gr.Name) {
			if _, err := c.RemoveScaleSetRunner(ctx, id, gr.ID, gr.Name); err != nil {
				return err
			}
		}
	}
	return c.DeleteScaleSet(ctx, id)
}
