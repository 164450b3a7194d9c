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
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	flag "github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
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

// long is the plugin's help beyond each command's own.
const long = `kubectl mac: claim, reach and release macOS machines (macvirt).

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
status.connection, so nothing needs rights on Secrets.

wait, claim --wait, release --wait and image capture --wait watch the
object and print each step on the way.

The flags of kubectl (--kubeconfig, --context, -n, --as, ...) work here too,
before or after the command.`

// command is one subcommand: its use line and summary, and what registers
// its flags and returns what runs.
type command struct {
	use, short, long string
	flags            func(*flag.FlagSet) runner
}

type runner interface {
	run(ctx context.Context, env *Env, args []string) (int, error)
}

var commands = []command{
	{use: "claim NAME --class CLASS", short: "Claim a Mac of a class (from a pool with --pool), with your SSH key",
		long: "claim checks first that its class and pool exist (when you may read them), so a typo creates nothing; a claim that " +
			"claim --wait sees needing a human before any machine was bound to it (its namespace not admitted by the class, say) " +
			"is deleted again, and the error says why.", flags: claimFlags},
	{use: "get [NAME]", short: "List your claims: class, phase, machine, address, readiness (-o json|yaml, -A)", flags: getFlags},
	{use: "logs NAME", short: "Print the end of the claim's bootstrap output, as the Mac's agent reported it (Secrets masked)",
		flags: func(*flag.FlagSet) runner { return logsCmd{} }},
	{use: "wait NAME", short: "Wait until the claim is Ready, printing each step", flags: waitFlags},
	{use: "ssh NAME [-- COMMAND...]", short: "Log in to the claim's Mac, or run COMMAND there, with its exit status", flags: sshFlags},
	{use: "cp SRC DST", short: "Copy a file to (FILE NAME:PATH) or from (NAME:PATH FILE) the Mac; - for stdin or stdout",
		long: "cp copies one file over ssh, either way; PATH is relative to the user's home, or absolute. For a directory, " +
			"pipe tar through kubectl mac ssh.", flags: cpFlags},
	{use: "port-forward NAME [LOCAL:]REMOTE...", short: "Forward local ports to the Mac's SSH or Screen Sharing port until Ctrl-C",
		flags: portForwardFlags},
	{use: "vnc NAME", short: "Forward a local port to the Mac's Screen Sharing and print its vnc:// URL, until Ctrl-C", flags: vncFlags},
	{use: "release NAME", short: "Delete the claim: its Mac is stopped gracefully, then deleted (or kept, under reclaimPolicy Retain)",
		flags: releaseFlags},
	{use: "runners [RUNNER-SET]", short: "List the namespace's GitHub Actions runner sets and their runners",
		flags: func(*flag.FlagSet) runner { return runnersCmd{} }},
	{use: "image capture CLAIM NAME | image list [NAME]", short: "Capture a Mac as a golden image (cluster admins), or list images",
		long: "image capture stops the Mac bound to CLAIM (in -n's namespace, or NAMESPACE/CLAIM) gracefully, clones its system " +
			"disk into the images namespace and publishes it as the CDI DataSource NAME there, which a MacClass names as " +
			"image.sourceRef; with --machine, CLAIM is a MacMachine (NAMESPACE/NAME). --wait follows the copy and prints how " +
			"to use the image. image list shows the cluster's images (MacImages).", flags: imageFlags},
}

// Main runs the plugin with args (without the program name) and returns
// its exit code: the command's (ssh's is the remote command's), 2 for a
// command line it cannot read.
func Main(ctx context.Context, args []string, streams Streams) int {
	code := 0
	root := newRoot(streams, &code)
	root.SetArgs(args)
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.Err)
	if err := root.ExecuteContext(ctx); err != nil {
		_, _ = fmt.Fprintf(streams.Err, "kubectl mac: %v; see kubectl mac --help\n", err)
		return 2
	}
	return code
}

// newRoot is the plugin's command tree: kubectl's own flags (cli-runtime's
// ConfigFlags) on every command, a subcommand per entry of commands, and
// version and completion.
func newRoot(streams Streams, code *int) *cobra.Command {
	config := genericclioptions.NewConfigFlags(true)
	root := &cobra.Command{
		Use: "kubectl-mac", Short: "Claim, reach and release macOS machines (macvirt)", Long: long,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl mac"},
		SilenceErrors: true, SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			*code = 2
			cmd.SetOut(streams.Err)
			_, _ = fmt.Fprintln(streams.Err, "kubectl mac: give a command")
			return cmd.Usage()
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return err })
	config.AddFlags(root.PersistentFlags())
	for _, c := range commands {
		root.AddCommand(subcommand(c, config, streams, code))
	}
	root.AddCommand(versionCommand(config, streams, code))
	return root
}

// subcommand runs c with an Env of config's connection.
func subcommand(c command, config *genericclioptions.ConfigFlags, streams Streams, code *int) *cobra.Command {
	cmd := &cobra.Command{Use: c.use, Short: c.short, Long: c.short + ".", Args: cobra.ArbitraryArgs}
	if c.long != "" {
		cmd.Long = c.short + ".\n\n" + c.long
	}
	r := c.flags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		env, err := newEnv(config, streams)
		if err != nil {
			*code = 1
			_, _ = fmt.Fprintf(streams.Err, "kubectl mac: %v\n", err)
			return nil
		}
		n, err := r.run(cmd.Context(), env, withDash(cmd, args))
		if err = readable(err); err != nil {
			_, _ = fmt.Fprintf(streams.Err, "kubectl mac %s: %v\n", cmd.Name(), err)
			if n == 0 {
				n = 1
			}
		}
		*code = n
		return nil
	}
	if strings.Contains(c.use, "NAME") && !strings.HasPrefix(c.use, "image") {
		cmd.ValidArgsFunction = completeClaims(config)
	}
	return cmd
}

// withDash puts back the "--" cobra takes out of args, which ssh reads to
// tell its claim from the remote command.
func withDash(cmd *cobra.Command, args []string) []string {
	dash := cmd.ArgsLenAtDash()
	if dash < 0 {
		return args
	}
	return append(append(append([]string{}, args[:dash]...), "--"), args[dash:]...)
}

// newEnv connects as the kubeconfig's user, with kubectl's flags.
func newEnv(config *genericclioptions.ConfigFlags, streams Streams) (*Env, error) {
	// kubectl falls back to localhost:8080 without a kubeconfig; say what
	// is missing instead.
	if raw, err := config.ToRawKubeConfigLoader().RawConfig(); err == nil && len(raw.Clusters) == 0 &&
		(config.APIServer == nil || *config.APIServer == "") {
		return nil, errors.New("reading the kubeconfig: it names no cluster: give --kubeconfig FILE, or set KUBECONFIG (default ~/.kube/config)")
	}
	cfg, err := config.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	ns, _, err := config.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig's namespace: %w", err)
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

// completeClaims completes a claim's name from the namespace's claims.
func completeClaims(config *genericclioptions.ConfigFlags) func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveDefault
		}
		env, err := newEnv(config, Streams{})
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		list := &macvirtv1alpha1.MacClaimList{}
		if err := env.Client.List(cmd.Context(), list, client.InNamespace(env.Namespace)); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []cobra.Completion
		for _, c := range list.Items {
			if strings.HasPrefix(c.Name, toComplete) {
				names = append(names, c.Name)
			}
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// newScheme holds every kind the plugin reads.
func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, macvirtv1alpha1.AddToScheme(s)
}

// NewClient is a client for what the plugin reads, writes and watches.
func NewClient(cfg *rest.Config) (client.WithWatch, error) {
	s, err := newScheme()
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "kubectl-mac"
	return client.NewWithWatch(cfg, client.Options{Scheme: s})
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

// printObject prints obj with cli-runtime's printers, as kubectl get -o
// does (managed fields left out).
func printObject(env *Env, output string, obj runtime.Object) (int, error) {
	s, err := newScheme()
	if err != nil {
		return 1, err
	}
	flags := genericclioptions.NewPrintFlags("").WithTypeSetter(s)
	flags.OutputFormat = &output
	p, err := flags.ToPrinter()
	if err != nil {
		return 2, fmt.Errorf("-o %s: %w", output, err)
	}
	if err := p.PrintObj(obj, env.Out); err != nil {
		return 1, err
	}
	return 0, nil
}
