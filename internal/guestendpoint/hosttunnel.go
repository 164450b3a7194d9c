package guestendpoint

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// HostTunnels carries tenants' tunnels to the guests of Apple-silicon
// hosts (internal/tunnel's Hosts): Serve keeps a host agent's held
// connection, Accept takes the connection it brings back for one tunnel.
type HostTunnels interface {
	Serve(ctx context.Context, host string, ws *websocket.Conn)
	Accept(host, id string, ws *websocket.Conn) error
}

// hostTunnelRequests counts host agents' tunnel requests by result: Held
// (the connection a host agent keeps open), Carried (a connection brought
// back for a tenant's tunnel), or the refusal's reason.
var hostTunnelRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "macvirt_host_tunnel_requests_total",
	Help: "Host agents' tunnel connections, by result: Held, Carried, or the refusal's reason (Unauthorized, RateLimited, NotFound, Malformed, Unsupported).",
}, []string{"result"})

func writeTunnelProblem(w http.ResponseWriter, code int, reason, msg string) {
	hostTunnelRequests.WithLabelValues(reason).Inc()
	writeProblem(w, code, reason, msg)
}

// serveTunnel answers a host agent's held connection (HostTunnelsPath) and
// the connections it brings back (HostTunnelPath), both WebSockets of the
// host's token.
func (h *HostConfigHandler) serveTunnel(w http.ResponseWriter, r *http.Request) {
	if h.Tunnels == nil {
		writeTunnelProblem(w, http.StatusNotFound, guestprotocol.ReasonUnsupported,
			"this operator carries no tunnels to Apple-silicon hosts (it serves no tunnel API)")
		return
	}
	id, isDial := strings.CutPrefix(r.URL.Path, guestprotocol.HostTunnelsPath+"/")
	if isDial && !guestprotocol.ValidHostDialID(id) {
		writeTunnelProblem(w, http.StatusNotFound, guestprotocol.ReasonMalformed, "no such tunnel")
		return
	}
	if r.Method != http.MethodGet || !websocket.IsWebSocketUpgrade(r) {
		w.Header().Set("Allow", http.MethodGet)
		writeTunnelProblem(w, http.StatusBadRequest, guestprotocol.ReasonUnsupported,
			"a WebSocket (GET, Upgrade: websocket, subprotocol "+guestprotocol.HostTunnelProtocol+")")
		return
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		writeTunnelProblem(w, http.StatusUnauthorized, guestprotocol.ReasonUnauthorized,
			"send the host's ServiceAccount token (macvirt-hosts/<host>) as Authorization: Bearer <token>")
		return
	}
	host, refused := h.authenticate(w, r, token)
	if refused != nil {
		writeTunnelProblem(w, refused.code, refused.reason, refused.msg)
		return
	}
	up := websocket.Upgrader{Subprotocols: []string{guestprotocol.HostTunnelProtocol}, HandshakeTimeout: 10 * time.Second,
		// A host agent is no browser: what authenticates it is its token.
		CheckOrigin: func(*http.Request) bool { return true }}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade answered
	}
	if ws.Subprotocol() != guestprotocol.HostTunnelProtocol {
		hostTunnelRequests.WithLabelValues(guestprotocol.ReasonUnsupported).Inc()
		_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseProtocolError,
			"want subprotocol "+guestprotocol.HostTunnelProtocol), time.Now().Add(time.Second))
		_ = ws.Close()
		return
	}
	// The server's read and write timeouts stay on a hijacked connection.
	_ = ws.UnderlyingConn().SetDeadline(time.Time{})
	log := ctrl.LoggerFrom(r.Context()).WithName("host-tunnel").WithValues("host", host)
	if !isDial {
		hostTunnelRequests.WithLabelValues("Held").Inc()
		log.V(1).Info("host agent holds its tunnel connection")
		h.Tunnels.Serve(r.Context(), host, ws)
		log.V(1).Info("host agent's tunnel connection ended")
		return
	}
	if err := h.Tunnels.Accept(host, id, ws); err != nil {
		hostTunnelRequests.WithLabelValues("NotFound").Inc()
		_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.ClosePolicyViolation, "no such tunnel"),
			time.Now().Add(time.Second))
		_ = ws.Close()
		log.Info("a host agent brought back a connection no tunnel waits for", "error", err.Error())
		return
	}
	hostTunnelRequests.WithLabelValues("Carried").Inc()
}
