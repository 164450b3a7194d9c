package kubectlmac

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	flag "github.com/spf13/pflag"

	"golang.org/x/crypto/ssh"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// defaultPublicKeys are the public keys claim sends when --ssh-key is not
// given, the first that exists: OpenSSH's default identities.
var defaultPublicKeys = []string{"id_ed25519.pub", "id_ecdsa.pub", "id_rsa.pub"}

type claimCmd struct {
	class, pool, access, sshKey string
	wait                        bool
	timeout                     time.Duration
}

func claimFlags(fs *flag.FlagSet) runner {
	c := &claimCmd{}
	fs.StringVar(&c.class, "class", "", "the MacClass to claim a machine of (required)")
	fs.StringVar(&c.pool, "pool", "", "the MacPool to take a warm machine from (default: a machine made on demand)")
	fs.StringVar(&c.access, "access", "", "ClusterIP, NodePort or LoadBalancer, as the class allows (default: the class's)")
	fs.StringVar(&c.sshKey, "ssh-key", "", "the public key to authorize (default: ~/.ssh/id_ed25519.pub, id_ecdsa.pub or id_rsa.pub)")
	fs.BoolVar(&c.wait, "wait", false, "wait until the machine is Ready")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Minute, "how long --wait waits")
	return c
}

func (c *claimCmd) run(ctx context.Context, env *Env, args []string) (int, error) {
	name, err := oneName(args, "claim")
	if err != nil {
		return 2, err
	}
	if c.class == "" {
		return 2, errors.New("--class is required: the MacClass to claim a machine of (kubectl get macclasses lists them)")
	}
	if err := accessType(c.access); err != nil {
		return 2, err
	}
	key, err := publicKey(c.sshKey, env.Home)
	if err != nil {
		return 1, err
	}
	if err := servable(ctx, env, c.class, c.pool); err != nil {
		return 1, err
	}
	claim := &macvirtv1alpha1.MacClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: env.Namespace},
		Spec: macvirtv1alpha1.MacClaimSpec{ClassName: c.class, PoolName: c.pool,
			Access:            macvirtv1alpha1.ClaimAccess{Type: macvirtv1alpha1.AccessType(c.access)},
			SSHAuthorizedKeys: []string{key}},
	}
	if err := env.Client.Create(ctx, claim); err != nil {
		return 1, err
	}
	_, _ = fmt.Fprintf(env.Out, "macclaim %s/%s created\n", env.Namespace, name)
	if !c.wait {
		return 0, nil
	}
	code, err := waitReady(ctx, env, name, c.timeout)
	if code != 0 {
		err = withdrawUnserved(ctx, env, claim, err)
	}
	return code, err
}

// accessType checks --access against the API's access types, so that a typo
// is named here rather than in the API server's schema error.
func accessType(access string) error {
	switch macvirtv1alpha1.AccessType(access) {
	case "", macvirtv1alpha1.AccessClusterIP, macvirtv1alpha1.AccessNodePort, macvirtv1alpha1.AccessLoadBalancer:
		return nil
	}
	return fmt.Errorf("--access %q: give %s, %s or %s (one the class allows), or leave it out for the class's default",
		access, macvirtv1alpha1.AccessClusterIP, macvirtv1alpha1.AccessNodePort, macvirtv1alpha1.AccessLoadBalancer)
}

// servable checks, before anything is created, that the class and the pool
// the claim names exist and agree, so that a typo leaves no claim behind. A
// tenant who may not read the catalog (macvirt-catalog-viewer is bound
// cluster-wide, if at all) skips the check; the claim's status says it then.
func servable(ctx context.Context, env *Env, class, pool string) error {
	if pool != "" {
		p := &macvirtv1alpha1.MacPool{}
		err := env.Client.Get(ctx, client.ObjectKey{Name: pool}, p)
		switch {
		case apierrors.IsNotFound(err):
			return fmt.Errorf("--pool %s: MacPool %q does not exist (kubectl get macpools lists them); no claim was created", pool, pool)
		case err == nil && p.Spec.ClassName != class:
			return fmt.Errorf("--pool %s holds machines of MacClass %q, not %q: give --class %s, or another pool; no claim was created",
				pool, p.Spec.ClassName, class, p.Spec.ClassName)
		case err != nil && !apierrors.IsForbidden(err):
			return fmt.Errorf("reading MacPool %s: %w", pool, err)
		}
	}
	err := env.Client.Get(ctx, client.ObjectKey{Name: class}, &macvirtv1alpha1.MacClass{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("--class %s: MacClass %q does not exist (kubectl get macclasses lists them); no claim was created", class, class)
	case err != nil && !apierrors.IsForbidden(err):
		return fmt.Errorf("reading MacClass %s: %w", class, err)
	}
	return nil
}

// withdrawUnserved deletes the claim this command created when waiting for
// it ended with the claim needing a human before any machine was bound to
// it (a class or pool that does not exist, a class that does not admit the
// namespace): nothing was made for it, and a claim left behind would only
// be in the way of running the command again. The error says so.
func withdrawUnserved(ctx context.Context, env *Env, created *macvirtv1alpha1.MacClaim, waitErr error) error {
	now := &macvirtv1alpha1.MacClaim{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(created), now); err != nil || now.UID != created.UID {
		return waitErr
	}
	st := meta.FindStatusCondition(now.Status.Conditions, macvirtv1alpha1.ConditionStalled)
	if now.Status.MachineRef != nil || st == nil || st.Status != metav1.ConditionTrue {
		// Bound (its machine keeps what happened), or still in line.
		return waitErr
	}
	uid := now.UID
	if err := env.Client.Delete(ctx, now, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("%w; deleting the unserved claim failed too: %v", waitErr, err)
	}
	return fmt.Errorf("%w; the claim was deleted, as no machine was made for it: fix that and claim again", waitErr)
}

// publicKey reads the key to authorize: file, or the first of the user's
// default identities.
func publicKey(file, home string) (string, error) {
	candidates := []string{file}
	if file == "" {
		candidates = nil
		for _, f := range defaultPublicKeys {
			candidates = append(candidates, filepath.Join(home, ".ssh", f))
		}
	}
	for _, f := range candidates {
		b, err := os.ReadFile(f) //nolint:gosec // a file the user names, or their own default identity.
		if errors.Is(err, os.ErrNotExist) && file == "" {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("reading --ssh-key: %w", err)
		}
		pub, comment, _, _, err := ssh.ParseAuthorizedKey(b)
		if err != nil {
			return "", fmt.Errorf("%s is not an SSH public key (%v): give the .pub file", f, err)
		}
		line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
		if comment != "" {
			line += " " + comment
		}
		return line, nil
	}
	return "", fmt.Errorf("no SSH public key in %s (%s): make one with ssh-keygen -t ed25519, or give --ssh-key FILE",
		filepath.Join(home, ".ssh"), strings.Join(defaultPublicKeys, ", "))
}

type getCmd struct {
	output        string
	allNamespaces bool
}

func getFlags(fs *flag.FlagSet) runner {
	c := &getCmd{}
	fs.StringVarP(&c.output, "output", "o", "", "json, yaml, name, jsonpath=TEMPLATE or go-template=TEMPLATE, as kubectl get's; a table when empty")
	fs.BoolVarP(&c.allNamespaces, "all-namespaces", "A", false, "the claims of every namespace (where you may list them)")
	return c
}

func (g getCmd) run(ctx context.Context, env *Env, args []string) (int, error) {
	list := &macvirtv1alpha1.MacClaimList{}
	var one *macvirtv1alpha1.MacClaim
	switch {
	case len(args) > 1:
		return 2, errors.New("give at most one claim name: kubectl mac get [NAME]")
	case len(args) == 1 && g.allNamespaces:
		return 2, errors.New("a claim's name and -A do not go together: a name is of one namespace (-n)")
	case len(args) == 1:
		one = &macvirtv1alpha1.MacClaim{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: args[0]}, one); err != nil {
			return 1, err
		}
		list.Items = []macvirtv1alpha1.MacClaim{*one}
	default:
		ns := env.Namespace
		if g.allNamespaces {
			ns = ""
		}
		if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
			return 1, err
		}
	}
	if g.output != "" {
		var obj runtime.Object = list
		if one != nil {
			obj = one
		}
		for i := range list.Items { // typed items come without their kind
			list.Items[i].SetGroupVersionKind(macvirtv1alpha1.GroupVersion.WithKind("MacClaim"))
		}
		return printObject(env, g.output, obj)
	}
	claims := list.Items
	if len(claims) == 0 {
		if g.allNamespaces {
			_, _ = fmt.Fprintln(env.Out, "No claims.")
		} else {
			_, _ = fmt.Fprintf(env.Out, "No claims in namespace %s.\n", env.Namespace)
		}
		return 0, nil
	}
	w := tabwriter.NewWriter(env.Out, 0, 4, 3, ' ', 0)
	if g.allNamespaces {
		_, _ = fmt.Fprint(w, "NAMESPACE\t")
	}
	_, _ = fmt.Fprintln(w, "NAME\tCLASS\tPHASE\tMACHINE\tADDRESS\tEXTERNAL\tREADY\tBOOTSTRAP\tAGE")
	for i := range claims {
		c := &claims[i]
		if g.allNamespaces {
			_, _ = fmt.Fprintf(w, "%s\t", c.Namespace)
		}
		machine := "<none>"
		if c.Status.Machine != nil {
			machine = c.Status.Machine.Name
		}
		ready := "False"
		if meta.IsStatusConditionTrue(c.Status.Conditions, macvirtv1alpha1.ConditionReady) {
			ready = "True"
		}
		_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, c.Spec.ClassName, orNone(string(c.Status.Phase)), machine,
			orNone(address(c)), orNone(externalAddress(c)), ready, bootstrapColumn(c), duration.HumanDuration(env.now().Sub(c.CreationTimestamp.Time)))
	}
	if err := w.Flush(); err != nil {
		return 1, err
	}
	for i := range claims {
		if note := drainNote(&claims[i]); note != "" {
			_, _ = fmt.Fprintf(env.Out, "\n%s: %s\n", claims[i].Name, note)
		}
		if b := meta.FindStatusCondition(claims[i].Status.Conditions, macvirtv1alpha1.ConditionBootstrapSucceeded); b != nil &&
			b.Status != metav1.ConditionTrue && b.Reason != macvirtv1alpha1.ReasonBootstrapPending && b.Reason != macvirtv1alpha1.ReasonBootstrapRunning {
			_, _ = fmt.Fprintf(env.Out, "\n%s: bootstrap %s: %s\n", claims[i].Name, b.Reason, guestprotocol.Printable(b.Message))
		}
	}
	return 0, nil
}

// bootstrapColumn is the BootstrapSucceeded reason ("<none>" for a claim
// without a bootstrap), with the exit status of a part that failed.
func bootstrapColumn(c *macvirtv1alpha1.MacClaim) string {
	b := meta.FindStatusCondition(c.Status.Conditions, macvirtv1alpha1.ConditionBootstrapSucceeded)
	if b == nil {
		return "<none>"
	}
	for _, p := range c.Status.Bootstrap {
		if p.State == macvirtv1alpha1.BootstrapFailed && p.ExitCode != nil {
			return fmt.Sprintf("%s (exit %d)", b.Reason, *p.ExitCode)
		}
	}
	return b.Reason
}

// drainNote tells the tenant that their Mac's host is being drained, and
// until when it keeps running; "" when it is not.
func drainNote(c *macvirtv1alpha1.MacClaim) string {
	d := meta.FindStatusCondition(c.Status.Conditions, macvirtv1alpha1.ConditionHostDraining)
	if d == nil || d.Status != metav1.ConditionTrue {
		return ""
	}
	return "host draining (" + d.Reason + "): " + guestprotocol.Printable(d.Message) + "; save your work"
}

// address is the ADDRESS column: the Mac's address on the pod network
// (status.connection.address), as kubectl get macclaim -o wide shows it.
func address(c *macvirtv1alpha1.MacClaim) string {
	if conn := c.Status.Connection; conn != nil {
		return conn.Address
	}
	return ""
}

// externalAddress is the EXTERNAL column: where SSH answers outside the
// cluster (a NodePort's node, a load balancer), as host:port.
func externalAddress(c *macvirtv1alpha1.MacClaim) string {
	if conn := c.Status.Connection; conn != nil && conn.External != nil && conn.External.Address != "" && conn.External.SSHPort != 0 {
		return net.JoinHostPort(conn.External.Address, strconv.Itoa(int(conn.External.SSHPort)))
	}
	return ""
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

type waitCmd struct{ timeout time.Duration }

func waitFlags(fs *flag.FlagSet) runner {
	c := &waitCmd{}
	fs.DurationVar(&c.timeout, "timeout", 30*time.Minute, "how long to wait")
	return c
}

func (c *waitCmd) run(ctx context.Context, env *Env, args []string) (int, error) {
	name, err := oneName(args, "wait")
	if err != nil {
		return 2, err
	}
	return waitReady(ctx, env, name, c.timeout)
}

// waitReady follows the claim by a watch until it is Ready, printing each
// new step of its progress; it gives up when the claim is Stalled (a human
// must act), Lost or gone, or after timeout. A watch that ends is watched
// again from the last version seen; one whose version is too old (410 Gone)
// starts over with a fresh list.
func waitReady(ctx context.Context, env *Env, name string, timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w := &claimWaiter{env: env, name: name, start: env.now()}
	code, done, err := w.wait(ctx)
	if done || ctx.Err() == nil {
		return code, err
	}
	return 1, fmt.Errorf("macclaim %s/%s is not Ready after %s: %s", env.Namespace, name, timeout, w.last)
}

// claimWaiter is the state of one waitReady.
type claimWaiter struct {
	env   *Env
	name  string
	start time.Time
	// last is the step printed last.
	last string
}

// wait follows the claim until it settles (done: Ready, Stalled, Lost or
// gone) or an error ends waiting.
func (w *claimWaiter) wait(ctx context.Context) (code int, done bool, err error) {
	f := &follower{env: w.env, namespace: w.env.Namespace, name: w.name, kind: "macclaim",
		newList: func() client.ObjectList { return &macvirtv1alpha1.MacClaimList{} },
		settle: func(obj client.Object, deleted bool) (int, bool, error) {
			switch c, _ := obj.(*macvirtv1alpha1.MacClaim); {
			case c != nil:
				return claimSettled(w.env, c, w.start, &w.last)
			case deleted:
				return 1, true, fmt.Errorf("macclaim %s/%s was deleted", w.env.Namespace, w.name)
			default:
				return 1, true, fmt.Errorf("macclaim %s/%s does not exist", w.env.Namespace, w.name)
			}
		}}
	return f.run(ctx)
}

// claimSettled prints the claim's progress when it changed and says whether
// waiting is over.
func claimSettled(env *Env, c *macvirtv1alpha1.MacClaim, start time.Time, last *string) (int, bool, error) {
	ready := meta.FindStatusCondition(c.Status.Conditions, macvirtv1alpha1.ConditionReady)
	if ready != nil && ready.ObservedGeneration == c.Generation && ready.Status == metav1.ConditionTrue {
		_, _ = fmt.Fprintf(env.Out, "macclaim %s/%s is Ready after %s: kubectl mac ssh %s\n", c.Namespace, c.Name,
			env.now().Sub(start).Round(time.Second), c.Name)
		return 0, true, nil
	}
	if st := meta.FindStatusCondition(c.Status.Conditions, macvirtv1alpha1.ConditionStalled); st != nil && st.Status == metav1.ConditionTrue {
		return 1, true, fmt.Errorf("macclaim %s/%s needs a human (%s): %s", c.Namespace, c.Name, st.Reason, guestprotocol.Printable(st.Message))
	}
	if c.Status.Phase.Ended() {
		return 1, true, fmt.Errorf("macclaim %s/%s is %s: delete it and claim again", c.Namespace, c.Name, c.Status.Phase)
	}
	step := "waiting for the operator"
	if ready != nil {
		step = fmt.Sprintf("%s: %s", ready.Reason, guestprotocol.Printable(ready.Message))
	}
	if step != *last {
		_, _ = fmt.Fprintf(env.Out, "  %s\n", step)
		*last = step
	}
	return 0, false, nil
}

type releaseCmd struct {
	wait    bool
	timeout time.Duration
}

func releaseFlags(fs *flag.FlagSet) runner {
	c := &releaseCmd{}
	fs.BoolVar(&c.wait, "wait", false, "wait until the claim is gone")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Minute, "how long --wait waits")
	return c
}

func (c *releaseCmd) run(ctx context.Context, env *Env, args []string) (int, error) {
	name, err := oneName(args, "release")
	if err != nil {
		return 2, err
	}
	claim := &macvirtv1alpha1.MacClaim{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: name}, claim); err != nil {
		return 1, err
	}
	if err := env.Client.Delete(ctx, claim, client.Preconditions{UID: &claim.UID}); err != nil {
		return 1, err
	}
	_, _ = fmt.Fprintf(env.Out, "macclaim %s/%s released: %s\n", env.Namespace, name, releaseFate(claim))
	if !c.wait {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	f := &follower{env: env, namespace: env.Namespace, name: name, kind: "macclaim",
		newList: func() client.ObjectList { return &macvirtv1alpha1.MacClaimList{} },
		settle: func(obj client.Object, _ bool) (int, bool, error) {
			// Gone; a claim of the same name made since is another one.
			if obj == nil || obj.GetUID() != claim.UID {
				_, _ = fmt.Fprintf(env.Out, "macclaim %s/%s is gone\n", env.Namespace, name)
				return 0, true, nil
			}
			return 0, false, nil
		}}
	code, done, err := f.run(ctx)
	if !done && ctx.Err() != nil {
		return 1, fmt.Errorf("macclaim %s/%s still exists after %s", env.Namespace, name, c.timeout)
	}
	if err != nil && !done {
		return 1, fmt.Errorf("waiting for macclaim %s/%s to go: %w", env.Namespace, name, err)
	}
	return code, err
}

// releaseFate says what releasing the claim does to its machine, if it has
// one.
func releaseFate(c *macvirtv1alpha1.MacClaim) string {
	if c.Status.MachineRef == nil {
		return "no machine was bound to it"
	}
	m := c.Status.MachineRef.Namespace + "/" + c.Status.MachineRef.Name
	if c.Spec.ReclaimPolicy == macvirtv1alpha1.ReclaimRetain {
		return fmt.Sprintf("its machine %s is stopped gracefully and kept with its disks (reclaimPolicy Retain)", m)
	}
	return fmt.Sprintf("its machine %s is stopped gracefully, then deleted", m)
}
