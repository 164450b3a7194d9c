package kubectlmac

import (
	"context"
	"fmt"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// logsCmd prints the end of the output of a claim's bootstrap, part by
// part, as the guest agent reported it (Secrets' values masked); the whole
// output stays on the Mac.
type logsCmd struct{}

func (logsCmd) run(ctx context.Context, env *Env, args []string) (int, error) {
	name, err := oneName(args, "logs")
	if err != nil {
		return 2, err
	}
	c := &macvirtv1alpha1.MacClaim{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: name}, c); err != nil {
		return 1, err
	}
	if c.Spec.Bootstrap == nil && len(c.Status.Bootstrap) == 0 {
		return 1, fmt.Errorf("claim %s has no bootstrap", name)
	}
	if len(c.Status.Bootstrap) == 0 {
		_, _ = fmt.Fprintf(env.Out, "# the bootstrap of %s has not started: the claim is %s\n", name, orNone(string(c.Status.Phase)))
		return 0, nil
	}
	for _, p := range c.Status.Bootstrap {
		header := fmt.Sprintf("# %s's bootstrap: %s", p.Name, p.State)
		if p.ExitCode != nil {
			header += fmt.Sprintf(", exit status %d", *p.ExitCode)
		}
		if p.Duration != nil {
			header += ", after " + p.Duration.Duration.String()
		}
		// Status text goes out guestprotocol.Printable, as the agent endpoint now
		// records it: an older operator recorded the guest's escape
		// sequences, and anyone who may write a status could write some.
		if msg := guestprotocol.Printable(p.Message); msg != "" {
			header += " (" + msg + ")"
		}
		_, _ = fmt.Fprintln(env.Out, header)
		if tail := guestprotocol.Printable(p.OutputTail); tail != "" {
			_, _ = fmt.Fprint(env.Out, tail)
			if !strings.HasSuffix(tail, "\n") {
				_, _ = fmt.Fprintln(env.Out)
			}
		}
	}
	_, _ = fmt.Fprintf(env.Out, "# the whole output is on the Mac, in %s/<task>/output.log\n", guestprotocol.MacOSTaskDir)
	return 0, nil
}
