package kubectlmac

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	flag "github.com/spf13/pflag"

	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/tunnel"
)

// forwardTimeout is how long one forwarded connection may take to reach
// the Mac.
const forwardTimeout = 30 * time.Second

type portForwardCmd struct {
	route  routeFlags
	listen string
}

func portForwardFlags(fs *flag.FlagSet) runner {
	c := &portForwardCmd{}
	c.route.register(fs, false)
	fs.StringVar(&c.listen, "address", "127.0.0.1", "the local address to listen on, as kubectl port-forward's --address")
	return c
}

// forwardSpec is one [LOCAL:]REMOTE argument.
type forwardSpec struct {
	local  int
	remote int32
}

func parseForwardSpec(arg string) (forwardSpec, error) {
	localText, remoteText, hasLocal := strings.Cut(arg, ":")
	if !hasLocal {
		localText, remoteText = arg, arg
	}
	remote, err := strconv.ParseUint(remoteText, 10, 16)
	if err != nil || remote == 0 {
		return forwardSpec{}, fmt.Errorf("%q: want [LOCAL:]REMOTE, REMOTE a port of the Mac (22 for SSH, 5900 for Screen Sharing)", arg)
	}
	local := uint64(0)
	if localText != "" {
		if local, err = strconv.ParseUint(localText, 10, 16); err != nil {
			return forwardSpec{}, fmt.Errorf("%q: the local port %q is not a port number (0 picks a free one)", arg, localText)
		}
	}
	return forwardSpec{local: int(local), remote: int32(remote)}, nil
}

func (c *portForwardCmd) run(ctx context.Context, env *Env, args []string) (int, error) {
	if len(args) < 2 {
		return 2, errors.New("give the claim and at least one port: kubectl mac port-forward NAME [LOCAL:]REMOTE [...]")
	}
	var specs []forwardSpec
	for _, a := range args[1:] {
		s, err := parseForwardSpec(a)
		if err != nil {
			return 2, err
		}
		specs = append(specs, s)
	}
	claim, err := claimWithConnection(ctx, env, args[0])
	if err != nil {
		return 1, err
	}
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for _, s := range specs {
		l, err := net.Listen("tcp", net.JoinHostPort(c.listen, strconv.Itoa(s.local)))
		if err != nil {
			return 1, fmt.Errorf("listening for port %d: %w", s.remote, err)
		}
		listeners = append(listeners, l)
		_, _ = fmt.Fprintf(env.Out, "Forwarding from %s -> %d\n", l.Addr(), s.remote)
	}
	var wg sync.WaitGroup
	for i, l := range listeners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			serveForward(ctx, env, c.route, claim, l, specs[i].remote)
		}()
	}
	<-ctx.Done()
	for _, l := range listeners {
		_ = l.Close()
	}
	wg.Wait()
	return 0, nil
}

// claimWithConnection reads the claim and checks that it has a connection.
func claimWithConnection(ctx context.Context, env *Env, name string) (*macvirtv1alpha1.MacClaim, error) {
	c := &macvirtv1alpha1.MacClaim{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: name}, c); err != nil {
		return nil, err
	}
	if c.Status.Connection == nil {
		return nil, fmt.Errorf("macclaim %s/%s has no connection yet (phase %s): kubectl mac wait %s", c.Namespace, c.Name, orNone(string(c.Status.Phase)), c.Name)
	}
	return c, nil
}

// serveForward takes connections on l until it closes, and carries each to
// port remote of the claim's Mac by the route.
func serveForward(ctx context.Context, env *Env, route routeFlags, claim *macvirtv1alpha1.MacClaim, l net.Listener, remote int32) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		local, err := l.Accept()
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { _ = local.Close() }()
			mac, _, err := route.connect(ctx, env, claim, remote, forwardTimeout)
			if err != nil {
				_, _ = fmt.Fprintf(env.Err, "kubectl mac: port %d: %v\n", remote, readable(err))
				return
			}
			defer func() { _ = mac.Close() }()
			tunnel.Splice(ctx, local, mac)
		}()
	}
}

type vncCmd struct {
	open  bool
	port  int
	route routeFlags
}

func vncFlags(fs *flag.FlagSet) runner {
	c := &vncCmd{}
	fs.BoolVar(&c.open, "open", false, "open the URL with the desktop's viewer (open on macOS, xdg-open elsewhere)")
	fs.IntVar(&c.port, "port", 0, "the local port to forward Screen Sharing from (a free one when 0)")
	c.route.register(fs, false)
	return c
}

func (c *vncCmd) run(ctx context.Context, env *Env, args []string) (int, error) {
	name, err := oneName(args, "vnc")
	if err != nil {
		return 2, err
	}
	claim := &macvirtv1alpha1.MacClaim{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: name}, claim); err != nil {
		return 1, err
	}
	url, err := vncURL(claim)
	if err != nil {
		return 1, err
	}
	if c.route.via == viaDirect || (c.route.via == viaAuto && env.tunnel == nil) {
		// The Mac's own address: no forwarding to keep up.
		_, _ = fmt.Fprintln(env.Out, url)
		return c.openURL(ctx, url)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)))
	if err != nil {
		return 1, fmt.Errorf("listening for Screen Sharing: %w", err)
	}
	defer func() { _ = l.Close() }()
	url = "vnc://" + l.Addr().String()
	_, _ = fmt.Fprintln(env.Out, url)
	_, _ = fmt.Fprintf(env.Err, "kubectl mac: forwarding %s to macclaim %s/%s's Screen Sharing through the API server; Ctrl-C ends it\n",
		l.Addr(), claim.Namespace, claim.Name)
	if code, err := c.openURL(ctx, url); err != nil {
		return code, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		serveForward(ctx, env, c.route, claim, l, claim.Status.Connection.VNCPort)
	}()
	<-ctx.Done()
	_ = l.Close()
	<-done
	return 0, nil
}

// openURL opens url with the desktop's viewer when --open asks for it.
func (c *vncCmd) openURL(ctx context.Context, url string) (int, error) {
	if !c.open {
		return 0, nil
	}
	opener := "xdg-open"
	if runtime.GOOS == "darwin" {
		opener = "open"
	}
	if err := exec.CommandContext(ctx, opener, url).Start(); err != nil { //nolint:gosec // a vnc:// URL built from the claim's status or a local port.
		return 1, fmt.Errorf("%s %s: %w", opener, url, err)
	}
	return 0, nil
}
