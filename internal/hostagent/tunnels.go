package hostagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestprotocol"
	"github.com/macvirt/macvirt/internal/hostagent/vz"
	"github.com/macvirt/macvirt/internal/tunnel"
)

// Tenants reach a VZ guest through the operator's tunnel
// (docs/design/apple-silicon-runtime.md, section 7). The Mac takes no
// inbound connection: the agent holds a WebSocket open to the operator's
// agent endpoint, and for each tunnel a tenant opens the operator asks on
// it for one port of one of this host's VMs. The agent connects to that
// port on the Mac's NAT network and brings the connection back on a new
// WebSocket. It carries only the SSH and Screen Sharing ports of VMs of
// machines placed on its host, whatever it is asked.

// Reconnecting: the first wait, the longest, and how long a connection
// must have lasted for the next wait to start from the first again.
const (
	tunnelRetry       = time.Second
	tunnelRetryMax    = 30 * time.Second
	tunnelHealthyFor  = time.Minute
	tunnelGuestDial   = 10 * time.Second
	tunnelQuietLimit  = 3 * time.Minute
	tunnelProblemSize = 512
)

// holdTunnels keeps the held connection open until ctx ends, reconnecting
// with a backoff.
func (a *Agent) holdTunnels(ctx context.Context) error {
	log := ctrl.Log.WithName("host-tunnel").WithValues("host", a.opts.Host)
	wait := tunnelRetry
	for {
		began := time.Now()
		err := a.holdTunnelsOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(began) > tunnelHealthyFor {
			wait = tunnelRetry
		}
		log.Info("the tunnel connection to the operator ended; tenants' ssh to this Mac's VMs waits for it", "retry-in", wait.String(), "error", errString(err))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, tunnelRetryMax)
	}
}

func errString(err error) string {
	if err == nil {
		return "closed"
	}
	return err.Error()
}

// holdTunnelsOnce holds one connection, and carries each tunnel asked on
// it, until it ends.
func (a *Agent) holdTunnelsOnce(ctx context.Context) error {
	ws, err := a.openTunnelSocket(ctx, guestprotocol.HostTunnelsPath)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = ws.Close() })
	defer stop()
	defer func() { _ = ws.Close() }()
	ctrl.Log.WithName("host-tunnel").V(1).Info("holding the tunnel connection to the operator", "host", a.opts.Host)
	ws.SetReadLimit(guestprotocol.MaxHostDialBytes)
	// The operator pings; a connection quiet for longer is dead (a NAT
	// that dropped it says nothing).
	_ = ws.SetReadDeadline(time.Now().Add(tunnelQuietLimit))
	ws.SetPingHandler(func(data string) error {
		_ = ws.SetReadDeadline(time.Now().Add(tunnelQuietLimit))
		return ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(10*time.Second))
	})
	for {
		kind, b, err := ws.ReadMessage()
		if err != nil {
			return err
		}
		_ = ws.SetReadDeadline(time.Now().Add(tunnelQuietLimit))
		var d guestprotocol.HostDial
		if kind != websocket.TextMessage || json.Unmarshal(b, &d) != nil || !guestprotocol.ValidHostDialID(d.ID) {
			continue
		}
		select {
		case a.tunnelSlots <- struct{}{}:
			go func() {
				defer func() { <-a.tunnelSlots }()
				a.carryTunnel(ctx, d, "")
			}()
		default:
			// Past the limit the agent still answers, briefly, so the
			// tenant reads why rather than waiting for nothing.
			go a.carryTunnel(ctx, d, fmt.Sprintf("the host agent of MacHost %s carries %d tunnels already, the most it may; close one and try again",
				a.opts.Host, cap(a.tunnelSlots)))
		}
	}
}

// maxTunnels bounds the tunnels the agent carries at once: each holds a
// connection to the operator and one to a guest, and the two VMs' tenants
// share the agent.
const maxTunnels = 64

// openTunnelSocket opens a WebSocket to path of the operator's endpoint as
// the host.
func (a *Agent) openTunnelSocket(ctx context.Context, path string) (*websocket.Conn, error) {
	e := a.opts.Endpoint
	cfg, err := endpointTLS(e)
	if err != nil {
		return nil, err
	}
	cfg.NextProtos = []string{"http/1.1"}
	token, err := e.Token()
	if err != nil {
		return nil, fmt.Errorf("reading the host's ServiceAccount token: %w", err)
	}
	d := &websocket.Dialer{TLSClientConfig: cfg, HandshakeTimeout: 10 * time.Second, Proxy: http.ProxyFromEnvironment,
		Subprotocols: []string{guestprotocol.HostTunnelProtocol}}
	url := "wss://" + strings.TrimPrefix(strings.TrimSuffix(e.URL, "/"), "https://") + path
	ws, resp, err := d.DialContext(ctx, url, http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		if resp != nil {
			defer func() { _ = resp.Body.Close() }()
			var p guestprotocol.Error
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
			if json.Unmarshal(b, &p) == nil && p.Message != "" {
				return nil, fmt.Errorf("the operator's endpoint refused the tunnel connection (%d %s): %s", resp.StatusCode, p.Reason, p.Message)
			}
			return nil, fmt.Errorf("the operator's endpoint refused the tunnel connection: %s", resp.Status)
		}
		return nil, fmt.Errorf("connecting to the operator's endpoint for tunnels: %w", err)
	}
	if ws.Subprotocol() != guestprotocol.HostTunnelProtocol {
		_ = ws.Close()
		return nil, errors.New("the operator's endpoint speaks no " + guestprotocol.HostTunnelProtocol + " (an older operator?)")
	}
	return ws, nil
}

// carryTunnel connects to the guest's port the dial names and brings the
// connection back to the operator, or says why not (refused, when set,
// without trying).
func (a *Agent) carryTunnel(ctx context.Context, d guestprotocol.HostDial, refused string) {
	log := ctrl.Log.WithName("host-tunnel").WithValues("host", a.opts.Host, "machine", d.Machine.Namespace+"/"+d.Machine.Name, "port", d.Port)
	var guest net.Conn
	problem := refused
	if refused == "" {
		guest, problem = a.dialGuest(ctx, d)
	}
	ws, err := a.openTunnelSocket(ctx, guestprotocol.HostTunnelPath(d.ID))
	if err != nil {
		if guest != nil {
			_ = guest.Close()
		}
		log.Info("bringing a tunnel back to the operator failed", "error", err.Error())
		return
	}
	if len(problem) > tunnelProblemSize {
		problem = problem[:tunnelProblemSize]
	}
	b, _ := json.Marshal(guestprotocol.HostDialResult{Error: problem})
	if err := ws.WriteMessage(websocket.TextMessage, b); err != nil || guest == nil {
		if problem != "" {
			log.V(1).Info("a tunnel was refused", "why", problem)
		}
		_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		_ = ws.Close()
		if guest != nil {
			_ = guest.Close()
		}
		return
	}
	log.V(1).Info("carrying a tunnel")
	tunnel.Splice(ctx, tunnel.NewConn(ws), guest)
}

// dialGuest connects to the port of the VM a dial names, when the machine
// is placed on this host, is the one of that UID, and its VM runs; the
// problem says otherwise, for the tenant.
func (a *Agent) dialGuest(ctx context.Context, d guestprotocol.HostDial) (net.Conn, string) {
	if !slices.Contains(guestprotocol.HostTunnelPorts, d.Port) {
		return nil, fmt.Sprintf("the host agent carries no tunnel to port %d of a VM (only SSH, 22, and Screen Sharing, 5900)", d.Port)
	}
	m := &macvirtv1alpha1.MacMachine{}
	err := a.client.Get(ctx, client.ObjectKey{Namespace: d.Machine.Namespace, Name: d.Machine.Name}, m)
	switch {
	case err != nil && !apierrors.IsNotFound(err):
		return nil, "reading the machine failed on the host; retry"
	case err != nil || m.Spec.HostName != a.opts.Host || string(m.UID) != d.UID:
		return nil, "no machine of that name and UID is placed on MacHost " + a.opts.Host
	case !m.DeletionTimestamp.IsZero():
		return nil, "the machine is being deleted"
	}
	vm, err := a.driver.Get(ctx, VMName(m))
	switch {
	case errors.Is(err, vz.ErrNotFound):
		return nil, "the machine's VM is not on MacHost " + a.opts.Host + " (yet)"
	case err != nil:
		// The tool's words name the Mac's paths and user: they go to the
		// agent's log, not to the tenant.
		ctrl.Log.WithName("host-tunnel").Info("reading a VM for a tunnel failed", "vm", VMName(m), "error", err.Error())
		return nil, "reading the VM on MacHost " + a.opts.Host + " failed (the host agent's log says why)"
	case vm.State != vz.StateRunning:
		return nil, fmt.Sprintf("the machine's VM is %s on MacHost %s", vm.State, a.opts.Host)
	case vm.IP == "":
		return nil, "the machine's VM has no address on MacHost " + a.opts.Host + "'s network yet (its DHCP lease is not there yet)"
	}
	dial := a.opts.DialGuest
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	dctx, cancel := context.WithTimeout(ctx, tunnelGuestDial)
	defer cancel()
	addr := net.JoinHostPort(vm.IP, strconv.Itoa(int(d.Port)))
	conn, err := dial(dctx, "tcp", addr)
	if err != nil {
		hint := ""
		if d.Port == 22 {
			hint = " (is Remote Login on in the golden image?)"
		}
		reason := "it did not answer"
		var op *net.OpError
		if errors.As(err, &op) && op.Err != nil {
			reason = op.Err.Error()
		}
		return nil, fmt.Sprintf("connecting to port %d of the guest on MacHost %s: %s%s", d.Port, a.opts.Host, reason, hint)
	}
	return conn, ""
}
