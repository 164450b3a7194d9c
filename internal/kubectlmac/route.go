package kubectlmac

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	flag "github.com/spf13/pflag"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/tunnel"
)

// How a command reaches a Mac (--via).
const (
	// viaAuto takes the tunnel, and connects directly where the cluster
	// serves none (an operator that runs without one).
	viaAuto = "auto"
	// viaTunnel goes through the API server (the tunnel API), authorised
	// by the user's rights on the claim: it works wherever kubectl does.
	viaTunnel = "tunnel"
	// viaDirect connects to the claim's external address (NodePort,
	// LoadBalancer) when it has one, else to its in-cluster name (a CI
	// pod, a bastion), falling back to its pod address while the name does
	// not resolve yet.
	viaDirect = "direct"
)

// routeFlags choose how a command reaches the Mac.
type routeFlags struct {
	via     string
	address string
}

// register adds --via, and --address when withAddress.
func (r *routeFlags) register(fs *flag.FlagSet, withAddress bool) {
	fs.StringVar(&r.via, "via", viaAuto, "how to reach the Mac: tunnel (through the Kubernetes API server, from anywhere kubectl works), "+
		"direct (the claim's NodePort or LoadBalancer address, else its in-cluster name), or auto (the tunnel where the cluster serves one)")
	if withAddress {
		fs.StringVar(&r.address, "address", "", "connect to HOST:PORT instead (a tunnel or a bastion's forward of your own)")
	}
}

// connect opens a connection to port of claim c's Mac, and says where it
// leads (for messages).
func (r routeFlags) connect(ctx context.Context, env *Env, c *macvirtv1alpha1.MacClaim, port int32, timeout time.Duration) (net.Conn, string, error) {
	if r.address != "" {
		if _, _, err := net.SplitHostPort(r.address); err != nil {
			return nil, "", fmt.Errorf("--address %q: want HOST:PORT", r.address)
		}
		conn, err := env.dialer(timeout)(ctx, "tcp", r.address)
		if err != nil {
			return nil, "", fmt.Errorf("connecting to %s for macclaim %s/%s: %w", r.address, c.Namespace, c.Name, err)
		}
		return conn, r.address, nil
	}
	switch r.via {
	case viaAuto, viaTunnel:
		if env.tunnel == nil {
			if r.via == viaTunnel {
				return nil, "", errors.New("--via tunnel: no tunnel here (no kubeconfig)")
			}
			break
		}
		dialCtx, cancel := context.WithTimeout(ctx, timeout)
		conn, err := env.tunnel(dialCtx, c.Namespace, c.Name, port)
		cancel()
		target := fmt.Sprintf("macclaim %s/%s port %d (through the API server)", c.Namespace, c.Name, port)
		if err == nil {
			return conn, target, nil
		}
		if r.via == viaAuto && noTunnelAPI(err) {
			_, _ = fmt.Fprintf(env.Err, "kubectl mac: the cluster serves no tunnel (%s); connecting directly\n", tunnel.APIServiceName)
			break
		}
		return nil, "", fmt.Errorf("tunnel to %s: %w", target, err)
	case viaDirect:
	default:
		return nil, "", fmt.Errorf("--via %q: want auto, tunnel or direct", r.via)
	}
	return directConnect(ctx, env, c, port, timeout)
}

// noTunnelAPI says the API server does not serve the tunnel's group: a 404
// for a claim that was just read.
func noTunnelAPI(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || !apierrors.IsNotFound(err) {
		return false
	}
	d := status.Status().Details
	return d == nil || d.Group != "macvirt.io"
}

// directConnect connects without the tunnel: to the external address when
// there is one, else to the claim's in-cluster name, or its address while
// the name does not resolve yet.
func directConnect(ctx context.Context, env *Env, c *macvirtv1alpha1.MacClaim, port int32, timeout time.Duration) (net.Conn, string, error) {
	target, err := directTarget(c, port)
	if err != nil {
		return nil, "", err
	}
	dial := env.dialer(timeout)
	raw, err := dial(ctx, "tcp", target)
	if fallback := addressFallback(c, target, err); fallback != "" && ctx.Err() == nil {
		// A ClusterIP claim's name resolves a moment after it is Ready; its
		// address is the same Mac, and the host key check is the same.
		_, _ = fmt.Fprintf(env.Err, "kubectl mac: %s does not resolve (yet); connecting to macclaim %s/%s's address %s instead\n",
			c.Status.Connection.Host, c.Namespace, c.Name, fallback)
		target = fallback
		raw, err = dial(ctx, "tcp", target)
	}
	if err != nil {
		return nil, "", fmt.Errorf("connecting to %s for macclaim %s/%s: %w", target, c.Namespace, c.Name, err)
	}
	return raw, target, nil
}

// directTarget is host:port for port of the Mac without the tunnel: the
// external address (NodePort or LoadBalancer), which works from outside the
// cluster; else the claim's DNS name (status.connection.host), which works
// inside it; else its address.
func directTarget(c *macvirtv1alpha1.MacClaim, port int32) (string, error) {
	conn := c.Status.Connection
	if conn == nil {
		return "", fmt.Errorf("macclaim %s/%s has no connection yet", c.Namespace, c.Name)
	}
	if ext := conn.External; ext != nil && ext.Address != "" {
		switch {
		case port == sshPort(c) && ext.SSHPort != 0:
			return net.JoinHostPort(ext.Address, strconv.Itoa(int(ext.SSHPort))), nil
		case port == conn.VNCPort && ext.VNCPort != 0:
			return net.JoinHostPort(ext.Address, strconv.Itoa(int(ext.VNCPort))), nil
		}
	}
	host := conn.Host
	if host == "" {
		host = conn.Address
	}
	if host == "" && conn.SSHPort != 0 && c.Status.Phase == macvirtv1alpha1.ClaimReady {
		// Ready with no address: a Mac behind its Apple-silicon host's NAT.
		return "", fmt.Errorf("macclaim %s/%s's Mac has no address the cluster routes to (it runs on an Apple-silicon host): "+
			"reach it through the tunnel, --via tunnel", c.Namespace, c.Name)
	}
	if host == "" {
		return "", fmt.Errorf("macclaim %s/%s has no address yet", c.Namespace, c.Name)
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port))), nil
}

// addressFallback is where to connect when dialing target failed with err:
// the claim's address, at the same port, when target was the claim's DNS
// name (not the external address) and the name did not resolve; ""
// otherwise.
func addressFallback(c *macvirtv1alpha1.MacClaim, target string, err error) string {
	var dnsErr *net.DNSError
	if err == nil || !errors.As(err, &dnsErr) {
		return ""
	}
	conn := c.Status.Connection
	if conn == nil || conn.Host == "" || conn.Address == "" || conn.Address == conn.Host {
		return ""
	}
	host, port, splitErr := net.SplitHostPort(target)
	if splitErr != nil || host != conn.Host {
		return ""
	}
	return net.JoinHostPort(conn.Address, port)
}
