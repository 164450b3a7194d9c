package kubectlmac

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// runnersCmd lists the namespace's runner sets, what GitHub asks of each,
// and each runner with the job it runs.
type runnersCmd struct{}

func (runnersCmd) run(ctx context.Context, env *Env, args []string) (int, error) {
	var sets []macvirtv1alpha1.MacRunnerSet
	switch len(args) {
	case 0:
		var list macvirtv1alpha1.MacRunnerSetList
		if err := env.Client.List(ctx, &list, client.InNamespace(env.Namespace)); err != nil {
			return 1, err
		}
		sets = list.Items
	case 1:
		s := &macvirtv1alpha1.MacRunnerSet{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: args[0]}, s); err != nil {
			return 1, err
		}
		sets = []macvirtv1alpha1.MacRunnerSet{*s}
	default:
		return 2, errors.New("give at most one runner set: kubectl mac runners [NAME]")
	}
	if len(sets) == 0 {
		_, _ = fmt.Fprintf(env.Out, "No runner sets in namespace %s.\n", env.Namespace)
		return 0, nil
	}
	w := tabwriter.NewWriter(env.Out, 0, 4, 3, ' ', 0)
	_, _ = fmt.Fprintln(w, "RUNNER SET\tSCALE SET\tJOBS\tDESIRED\tPENDING\tIDLE\tRUNNING\tMAX\tREADY")
	for i := range sets {
		s := &sets[i]
		ready := "<none>"
		if c := meta.FindStatusCondition(s.Status.Conditions, macvirtv1alpha1.ConditionReady); c != nil {
			ready = string(c.Status) + " (" + c.Reason + ")"
		}
		_, _ = fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", s.Name, s.EffectiveScaleSetName(), s.Status.AssignedJobs,
			s.Status.Desired, s.Status.Pending, s.Status.Idle, s.Status.Running, s.Spec.MaxRunners, ready)
	}
	if err := w.Flush(); err != nil {
		return 1, err
	}
	for i := range sets {
		s := &sets[i]
		if c := meta.FindStatusCondition(s.Status.Conditions, macvirtv1alpha1.ConditionReady); c != nil && c.Reason != macvirtv1alpha1.ReasonListening {
			_, _ = fmt.Fprintf(env.Out, "\n%s: %s\n", s.Name, guestprotocol.Printable(c.Message))
		}
		if e := s.Status.LastGitHubError; e != nil {
			_, _ = fmt.Fprintf(env.Out, "\n%s: GitHub said at %s: %s\n", s.Name, e.Time.UTC().Format("15:04:05"), guestprotocol.Printable(e.Message))
		}
		if len(s.Status.RunnerStatuses) == 0 {
			continue
		}
		_, _ = fmt.Fprintf(env.Out, "\n%s's runners:\n", s.Name)
		w := tabwriter.NewWriter(env.Out, 0, 4, 3, ' ', 0)
		_, _ = fmt.Fprintln(w, "RUNNER\tSTATE\tJOB\tREPOSITORY\tFOR\tMESSAGE")
		for _, r := range s.Status.RunnerStatuses {
			job, repo := "<none>", "<none>"
			if r.Job != nil {
				job = r.Job.ID
				if r.Job.DisplayName != "" {
					job += " (" + guestprotocol.Printable(r.Job.DisplayName) + ")"
				}
				repo = orNone(r.Job.Repository)
			}
			since := "-"
			if r.Since != nil {
				since = duration.HumanDuration(env.now().Sub(r.Since.Time))
			}
			_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.State, job, repo, since, guestprotocol.Printable(r.Message))
		}
		if err := w.Flush(); err != nil {
			return 1, err
		}
	}
	return 0, nil
}
