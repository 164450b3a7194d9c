package tunnel

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// HostsConnected is the number of host agents holding their tunnel
// connection to this operator.
var HostsConnected = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "macvirt_tunnel_hosts_connected",
	Help: "Apple-silicon host agents holding their tunnel connection to this operator replica.",
})

// Hosts carries tenants' tunnels to the guests of Apple-silicon hosts.
// A Mac takes no inbound connection: its host agent holds a WebSocket open
// to the operator's agent endpoint (guestprotocol.HostTunnelsPath), which
// Serve keeps; Dial asks the host agent, on it, to connect to a port of
// one of its VMs, and waits for the agent to bring that connection back on
// a WebSocket of its own (Accept). The zero value is ready to use.
type Hosts struct {
	// DialTimeout bounds a Dial that the host agent does not answer;
	// dialTimeout when zero.
	DialTimeout time.Duration
	// PingInterval is how often a held connection is pinged, so that NAT
	// and load balancers keep it; pingInterval when zero.
	PingInterval time.Duration

	// MaxPerHost bounds the tunnels one host carries at once, so that
	// tenants of one Mac cannot flood the agent it shares with the other
	// VM's tenant; DefaultMaxTunnelsPerHost when zero.
	MaxPerHost int

	mu      sync.Mutex
	held    map[string]*heldHost
	pending map[string]*pendingDial
	active  map[string]int
	stopped bool
}

// DefaultMaxTunnelsPerHost is how many tunnels one host carries at once by
// default: plenty for two VMs' ssh, cp and port-forwards.
const DefaultMaxTunnelsPerHost = 64

// maxDialResultBytes bounds the first message a host agent sends back, and
// maxDialProblem the part of its words a tenant reads.
const (
	maxDialResultBytes = 4 << 10
	maxDialProblem     = 512
)

// heldHost is a host agent's held connection.
type heldHost struct {
	dials chan guestprotocol.HostDial
	done  chan struct{}
	once  sync.Once
}

// end marks the held connection ended: dials waiting on it give up at once.
func (c *heldHost) end() { c.once.Do(func() { close(c.done) }) }

// Start implements manager.Runnable: when the manager stops, every held
// connection ends (a hijacked connection outlives its HTTP server's
// shutdown otherwise), and no new one is held.
func (h *Hosts) Start(ctx context.Context) error {
	<-ctx.Done()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	for _, c := range h.held {
		c.end()
	}
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica holds the connections made to it.
func (h *Hosts) NeedLeaderElection() bool { return false }

// pendingDial waits for the host agent's connection.
type pendingDial struct {
	host string
	conn chan *websocket.Conn
}

// Connected says whether host's agent holds its connection here.
func (h *Hosts) Connected(host string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held[host] != nil
}

// Serve keeps host's held connection until it ends or ctx does. A newer
// connection of the same host replaces it (the agent reconnected after a
// network change it saw before the operator did).
func (h *Hosts) Serve(ctx context.Context, host string, ws *websocket.Conn) {
	me := &heldHost{dials: make(chan guestprotocol.HostDial, 16), done: make(chan struct{})}
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		_ = ws.Close()
		return
	}
	if h.held == nil {
		h.held = map[string]*heldHost{}
	}
	if old := h.held[host]; old != nil {
		old.end()
	} else {
		HostsConnected.Inc()
	}
	h.held[host] = me
	h.mu.Unlock()
	defer func() {
		me.end()
		h.mu.Lock()
		if h.held[host] == me {
			delete(h.held, host)
			HostsConnected.Dec()
		}
		h.mu.Unlock()
		_ = ws.Close()
	}()
	interval := h.PingInterval
	if interval == 0 {
		interval = pingInterval
	}
	// The agent sends nothing but pongs and its close: a connection that
	// answers no ping for three intervals is gone (a Mac off the network
	// says nothing).
	ws.SetReadLimit(1 << 10)
	quiet := 3 * interval
	_ = ws.SetReadDeadline(time.Now().Add(quiet))
	ws.SetPongHandler(func(string) error { return ws.SetReadDeadline(time.Now().Add(quiet)) })
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		for {
			if _, _, err := ws.NextReader(); err != nil {
				return
			}
		}
	}()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-me.done:
			return
		case <-gone:
			return
		case d := <-me.dials:
			b, err := json.Marshal(d)
			if err != nil {
				continue
			}
			_ = ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if err := ws.WriteMessage(websocket.TextMessage, b); err != nil {
				return
			}
		case <-t.C:
			if err := ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(10*time.Second)); err != nil {
				return
			}
		}
	}
}

// Accept hands the connection host's agent brought back for the dial id
// to the Dial waiting for it. A dial of another host, or none, is refused:
// a host agent brings back only what it was asked for.
func (h *Hosts) Accept(host, id string, ws *websocket.Conn) error {
	h.mu.Lock()
	p := h.pending[id]
	if p != nil && p.host == host {
		delete(h.pending, id)
	}
	h.mu.Unlock()
	if p == nil || p.host != host {
		return fmt.Errorf("no tunnel %s waits for host %s (it ended, or it was another host's)", id, host)
	}
	p.conn <- ws // buffered: never blocks
	return nil
}

// Dial asks host's agent for a connection to port of the VM of machine
// namespace/name (of uid), and returns it once the agent brought it back
// and said the guest's port answered.
func (h *Hosts) Dial(ctx context.Context, host string, machine guestprotocol.MachineRef, uid string, port int32) (net.Conn, error) {
	raw := make([]byte, guestprotocol.HostDialIDLength/2)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	id := hex.EncodeToString(raw)
	p := &pendingDial{host: host, conn: make(chan *websocket.Conn, 1)}
	limit := h.MaxPerHost
	if limit <= 0 {
		limit = DefaultMaxTunnelsPerHost
	}
	h.mu.Lock()
	held, busy := h.held[host], h.active[host] >= limit
	if held != nil && !busy {
		if h.pending == nil {
			h.pending = map[string]*pendingDial{}
		}
		if h.active == nil {
			h.active = map[string]int{}
		}
		h.pending[id] = p
		h.active[host]++
	}
	h.mu.Unlock()
	switch {
	case held == nil:
		return nil, fmt.Errorf("the host agent of MacHost %s holds no tunnel connection to this operator: is it running, "+
			"and does it reach the agent endpoint? (macvirt-host-agent doctor on the Mac says)", host)
	case busy:
		return nil, fmt.Errorf("MacHost %s carries %d tunnels already, the most it may; close one and try again", host, limit)
	}
	carried := false
	defer func() {
		h.mu.Lock()
		delete(h.pending, id)
		if !carried {
			h.active[host]--
		}
		h.mu.Unlock()
		if !carried {
			// Accept may have handed the connection over just as the dial
			// gave up: it is nobody's then.
			select {
			case ws := <-p.conn:
				_ = ws.Close()
			default:
			}
		}
	}()
	timeout := h.DialTimeout
	if timeout == 0 {
		timeout = dialTimeout
	}
	wait := time.NewTimer(timeout)
	defer wait.Stop()
	d := guestprotocol.HostDial{ID: id, Machine: machine, UID: uid, Port: port}
	select {
	case held.dials <- d:
	case <-held.done:
		return nil, fmt.Errorf("the host agent of MacHost %s reconnected; try again", host)
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-wait.C:
		return nil, fmt.Errorf("the host agent of MacHost %s takes no tunnel request (its connection is stuck)", host)
	}
	var ws *websocket.Conn
	select {
	case ws = <-p.conn:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-wait.C:
		return nil, fmt.Errorf("the host agent of MacHost %s did not bring the connection back within %s", host, timeout)
	}
	var result guestprotocol.HostDialResult
	// The agent's first message is its answer, small; a tenant who gave up
	// stops the wait.
	ws.SetReadLimit(maxDialResultBytes)
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = ws.SetReadDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = ws.SetReadDeadline(time.Now()) })
	kind, b, err := ws.ReadMessage()
	stop()
	if err == nil && kind != websocket.TextMessage {
		err = errors.New("its first message is not the dial's result")
	}
	if err == nil {
		err = json.Unmarshal(b, &result)
	}
	if err != nil {
		_ = ws.Close()
		return nil, fmt.Errorf("the host agent of MacHost %s: %w", host, err)
	}
	if result.Error != "" {
		_ = ws.Close()
		if len(result.Error) > maxDialProblem {
			result.Error = result.Error[:maxDialProblem] + "..."
		}
		return nil, fmt.Errorf("the host agent of MacHost %s: %s", host, strings.ToValidUTF8(result.Error, "?"))
	}
	_ = ws.SetReadDeadline(time.Time{})
	ws.SetReadLimit(0)
	carried = true
	return &countedConn{Conn: NewConn(ws), done: func() {
		h.mu.Lock()
		h.active[host]--
		h.mu.Unlock()
	}}, nil
}

// countedConn gives its host's tunnel back when it closes.
type countedConn struct {
	net.Conn
	once sync.Once
	done func()
}

func (c *countedConn) Close() error {
	c.once.Do(c.done)
	return c.Conn.Close()
}

// Active is how many tunnels host carries now.
func (h *Hosts) Active(host string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.active[host]
}

// NewConn is a tunnel's WebSocket as a net.Conn (binary messages carry the
// bytes), pinged every pingInterval while it is open.
func NewConn(ws *websocket.Conn) net.Conn {
	c := &wsConn{ws: ws, done: make(chan struct{})}
	go c.keepAlive(pingInterval)
	return c
}
