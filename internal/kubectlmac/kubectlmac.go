// Package kubectlmac is the kubectl mac plugin: a tenant's commands for
// claiming, reaching and releasing a Mac, with the tenant's own kubeconfig
// and RBAC (MacClaims in one namespace: everything ssh needs is in the
// claim's status, and a connection Secret is written only for a claim that
// asks for one), and a cluster admin's for capturing a Mac as a golden
// image (MacImages).
package kubectlmac

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/tunnel"
)

// Streams are a command's standard input and outputs.
type Streams struct {
	In       io.Reader
	Out, Err io.Writer
}

// Env is what a command runs against: the API server as the user, the
// namespace, and the user's home (for ~/.ssh). Tests build one directly.
type Env struct {
	// Client reads, writes and watches (wait follows a claim by a watch).
	Client    client.WithWatch
	Namespace string
	Home      string
	Streams
	// Now is the clock for ages; time.Now when nil.
	Now func() time.Time
	// PollInterval is how often release --wait and image --wait look, and
	// how long wait pauses before it watches again after a watch that ended
	// with nothing; 1 s when zero.
	PollInterval time.Duration
	// dial connects ssh; a net.Dialer with the connect timeout when nil.
	dial func(ctx context.Context, network, address string) (net.Conn, error)
	// tunnel connects to port of a claim's Mac through the API server;
	// nil when there is none (the tests' fake clients).
	tunnel func(ctx context.Context, namespace, name string, port int32) (net.Conn, error)
}

// usage is the plugin's help.
const usage = `kubectl mac: claim, reach and release macOS machines (macvirt).

Usage:
  kubectl mac claim NAME --class CLASS [--pool POOL] [--access TYPE] [--ssh-key FILE] [--wait] [--timeout 30m]
  kubectl mac get [NAME]
  kubectl mac logs NAME
  kubectl mac wait NAME [--timeout 30m]
  kubectl mac ssh NAME [-i KEY] [--via auto|tunnel|direct] [--address HOST:PORT] [-- COMMAND...]
  kubectl mac cp FILE NAME:PATH | kubectl mac cp NAME:PATH FILE   (- for stdin or stdout)
  kubectl mac port-forward NAME [LOCAL:]REMOTE... [--address 127.0.0.1]
  kubectl mac vnc NAME [--open] [--port N]
  kubectl mac release NAME [--wait] [--timeout 10m]
  kubectl mac runners [RUNNER-SET]
  kubectl mac image capture CLAIM NAME [--machine] [--storage-class SC] [--description TEXT] [--wait] [--timeout 2h]
  kubectl mac image list [NAME]

Global flags (before or after the command):
  --kubeconfig FILE   the kubeconfig to use (default: $KUBECONFIG, then ~/.kube/config)
  --context NAME      the kubeconfig context to use
  -n, --namespace NS  the namespace of the claims (default: the context's)

logs prints the end of the output of the claim's bootstrap, as the Mac's
agent reported it (the values of Secrets masked).

runners lists the namespace's GitHub Actions runner sets (MacRunnerSets),
what GitHub asks of each, and each runner with its state and job.

image capture (cluster admins) stops the Mac bound to CLAIM (in -n's
namespace, or NAMESPACE/CLAIM) gracefully, clones its system disk into the
images namespace and publishes it as the CDI DataSource NAME there, which a
MacClass names as image.sourceRef; with --machine, CLAIM is a MacMachine
(NAMESPACE/NAME). --wait follows the copy and prints how to use the image.
image list shows the cluster's images (MacImages).

ssh, cp, port-forward and vnc reach the Mac through the Kubernetes API
server (the tunnel; --via tunnel), so they work wherever kubectl does,
authorised by your rights on the claim (the role macvirt-claim-editor);
--via direct connects instead to the claim's NodePort or LoadBalancer
address, or to its in-cluster name from inside the cluster (falling back to
its address while the name does not resolve yet). --via auto, the default,
is the tunnel where the cluster serves one.

ssh connects with your own key (ssh-agent, or ~/.ssh/id_ed25519, id_ecdsa,
id_rsa, or -i) as the claim's user, and accepts only a host key that the
claim's status lists (strict host key checking). Both are in the claim's
status.connection, so nothing needs rights on Secrets. A connection Secret
is written only for a claim that sets spec.writeConnectionSecretToRef, for
tools that want one.

cp copies one file over ssh, either way (for a directory, pipe tar through
kubectl mac ssh). port-forward listens on local ports (a free one for 0)
and carries each connection to the Mac's SSH or Screen Sharing port. vnc
forwards a local port to Screen Sharing, prints its vnc:// URL (and opens
it with --open), and runs until Ctrl-C.

wait, and claim --wait, watch the claim until it is Ready and print each
step on the way.

claim checks first that its class and pool exist (when you may read them),
so a typo creates nothing; a claim that claim --wait sees needing a human
before any machine was bound to it (its namespace not admitted by the
class, say) is deleted again, and the error says why.
`

// Main runs the plugin with args (without the program name) and returns
// its exit code.
func Main(ctx context.Context, args []string, streams Streams) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		_, _ = io.WriteString(streams.Out, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, rest, found := splitCommand(args)
	if !found {
		_, _ = fmt.Fprintf(streams.Err, "kubectl mac: no command in %q; see kubectl mac --help\n", strings.Join(args, " "))
		return 2
	}
	run, ok := commands[cmd]
	if !ok {
		_, _ = fmt.Fprintf(streams.Err, "kubectl mac: unknown command %q; see kubectl mac --help\n", cmd)
		return 2
	}
	fs := flag.NewFlagSet("kubectl mac "+cmd, flag.ContinueOnError)
	fs.SetOutput(streams.Err)
	g := globalFlags(fs)
	c := run.flags(fs)
	if err := fs.Parse(interspersed(rest, fs)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	env, err := g.env(streams)
	if err != nil {
		_, _ = fmt.Fprintf(streams.Err, "kubectl mac: %v\n", err)
		return 1
	}
	code, err := c.run(ctx, env, fs.Args())
	if err = readable(err); err != nil {
		_, _ = fmt.Fprintf(streams.Err, "kubectl mac %s: %v\n", cmd, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// splitCommand finds the command in args: the first word that is neither a
// flag nor a global flag's value, so the global flags may come before it as
// kubectl's do (kubectl mac -n team get). rest is args without it.
func splitCommand(args []string) (cmd string, rest []string, found bool) {
	globalsOnly := flag.NewFlagSet("", flag.ContinueOnError)
	globalFlags(globalsOnly)
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return "", nil, false
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			return a, append(append([]string{}, args[:i]...), args[i+1:]...), true
		}
		if name := strings.TrimLeft(a, "-"); !strings.Contains(name, "=") {
			if f := globalsOnly.Lookup(name); f != nil && !isBool(f) {
				i++ // its value
			}
		}
	}
	return "", nil, false
}

// command is one subcommand: it registers its flags and returns what runs.
type command struct {
	flags func(*flag.FlagSet) runner
}

type runner interface {
	run(ctx context.Context, env *Env, args []string) (int, error)
}

var commands = map[string]command{
	"claim":        {flags: claimFlags},
	"get":          {flags: func(*flag.FlagSet) runner { return getCmd{} }},
	"logs":         {flags: func(*flag.FlagSet) runner { return logsCmd{} }},
	"runners":      {flags: func(*flag.FlagSet) runner { return runnersCmd{} }},
	"image":        {flags: imageFlags},
	"wait":         {flags: waitFlags},
	"ssh":          {flags: sshFlags},
	"vnc":          {flags: vncFlags},
	"port-forward": {flags: portForwardFlags},
	"cp":           {flags: cpFlags},
	"release":      {flags: releaseFlags},
}

type globals struct {
	kubeconfig, context, namespace string
}

func globalFlags(fs *flag.FlagSet) *globals {
	g := &globals{}
	fs.StringVar(&g.kubeconfig, "kubeconfig", "", "the kubeconfig to use")
	fs.StringVar(&g.context, "context", "", "the kubeconfig context to use")
	fs.StringVar(&g.namespace, "namespace", "", "the namespace of the claims")
	fs.StringVar(&g.namespace, "n", "", "the namespace of the claims (short)")
	return g
}

// env connects as the kubeconfig's user.
func (g *globals) env(streams Streams) (*Env, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = g.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: g.context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	ns := g.namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, fmt.Errorf("reading the kubeconfig's namespace: %w", err)
		}
	}
	c, err := NewClient(cfg)
	if err != nil {
		return nil, err
	}
	home, _ := os.UserHomeDir()
	dialTunnel := func(ctx context.Context, namespace, name string, port int32) (net.Conn, error) {
		return tunnel.Dial(ctx, cfg, namespace, name, port)
	}
	return &Env{Client: c, Namespace: ns, Home: home, Streams: streams, tunnel: dialTunnel}, nil
}

// NewClient is a client for what the plugin reads, writes and watches.
func NewClient(cfg *rest.Config) (client.WithWatch, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := macvirtv1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "kubectl-mac"
	return client.NewWithWatch(cfg, client.Options{Scheme: s})
}

// interspersed moves flags after positional arguments to the front, so that
// "ssh NAME -i key -- cmd" parses; everything after "--" stays as is.
func interspersed(args []string, fs *flag.FlagSet) []string {
	var flags, positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			positional = append(positional, args[i:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			positional = append(positional, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil && !isBool(f) && i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return append(flags, positional...)
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// oneName is the single NAME argument of a command.
func oneName(args []string, cmd string) (string, error) {
	if len(args) != 1 || args[0] == "" || args[0] == "--" {
		return "", fmt.Errorf("give one claim name: kubectl mac %s NAME", cmd)
	}
	return args[0], nil
}

func (e *Env) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

// dialer is how ssh connects, giving up after timeout.
func (e *Env) dialer(timeout time.Duration) func(ctx context.Context, network, address string) (net.Conn, error) {
	if e.dial != nil {
		return e.dial
	}
	d := &net.Dialer{Timeout: timeout}
	return d.DialContext
}

func (e *Env) pollInterval() time.Duration {
	if e.PollInterval > 0 {
		return e.PollInterval
	}
	return time.Second
}
