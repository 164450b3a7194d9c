package guestendpoint

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// recordTunnels records which host each held connection and brought-back
// connection came from.
type recordTunnels struct {
	mu       sync.Mutex
	held     []string
	accepted []string
}

func (r *recordTunnels) Serve(_ context.Context, host string, ws *websocket.Conn) {
	r.mu.Lock()
	r.held = append(r.held, host)
	r.mu.Unlock()
	_ = ws.Close()
}

func (r *recordTunnels) Accept(host, id string, ws *websocket.Conn) error {
	r.mu.Lock()
	r.accepted = append(r.accepted, host+"/"+id)
	r.mu.Unlock()
	return ws.Close()
}

// The host agents' tunnel routes take only a host agent's reviewed token on
// a WebSocket, and hand the connection on as that host's, whatever else
// the request says.
func TestHostTunnelRoutesTakeOnlyAHostsWebSocket(t *testing.T) {
	h, _, _ := hostConfigSetup(t)
	rec := &recordTunnels{}
	h.Tunnels = rec
	srv := httptest.NewServer(&Handler{Hosts: h})
	t.Cleanup(srv.Close)
	ws := "ws" + strings.TrimPrefix(srv.URL, "http")
	id := strings.Repeat("ab", guestprotocol.HostDialIDLength/2)
	dial := func(path, token string) (int, string) {
		d := websocket.Dialer{Subprotocols: []string{guestprotocol.HostTunnelProtocol}}
		hdr := http.Header{}
		if token != "" {
			hdr.Set("Authorization", "Bearer "+token)
		}
		c, resp, err := d.Dial(ws+path, hdr)
		if err == nil {
			_ = c.Close()
			return resp.StatusCode, ""
		}
		if resp == nil {
			return 0, err.Error()
		}
		b := make([]byte, 512)
		n, _ := resp.Body.Read(b)
		return resp.StatusCode, string(b[:n])
	}
	for name, tc := range map[string]struct {
		path, token string
		code        int
		want        string
	}{
		"a host holds its connection":          {guestprotocol.HostTunnelsPath, "mac-a-token", http.StatusSwitchingProtocols, ""},
		"a host brings a dial back":            {guestprotocol.HostTunnelPath(id), "mac-b-token", http.StatusSwitchingProtocols, ""},
		"no token":                             {guestprotocol.HostTunnelsPath, "", http.StatusUnauthorized, "Authorization: Bearer"},
		"a tenant's token":                     {guestprotocol.HostTunnelsPath, "tenant-token", http.StatusUnauthorized, "not a host agent's"},
		"a namespace's default account":        {guestprotocol.HostTunnelsPath, "default-token", http.StatusUnauthorized, "not a host agent's"},
		"a made-up token":                      {guestprotocol.HostTunnelsPath, "guess", http.StatusUnauthorized, "not valid"},
		"a dial ID that is not the operator's": {guestprotocol.HostTunnelPath("../config"), "mac-a-token", http.StatusNotFound, "no such tunnel"},
	} {
		t.Run(name, func(t *testing.T) {
			code, body := dial(tc.path, tc.token)
			if code != tc.code || !strings.Contains(body, tc.want) {
				t.Errorf("%s: %d %q; want %d, %q", tc.path, code, body, tc.code, tc.want)
			}
		})
	}
	// The handler hands the connection on after the client's handshake.
	deadline := time.Now().Add(5 * time.Second)
	for {
		rec.mu.Lock()
		held, accepted := slices.Clone(rec.held), slices.Clone(rec.accepted)
		rec.mu.Unlock()
		if len(held) == 1 && held[0] == "mac-a" && len(accepted) == 1 && accepted[0] == "mac-b/"+id {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("held %v, accepted %v; want mac-a's connection and mac-b's dial", held, accepted)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// A guest shares its Mac's address: junk tokens from it spend that
	// address's review budget, and its host agent's token, reviewed before,
	// is still reviewed again once its minute is up.
	for range 30 {
		if code, _ := dial(guestprotocol.HostTunnelsPath, "junk"); code == http.StatusSwitchingProtocols {
			t.Fatal("a junk token was let in")
		}
	}
	if code, body := dial(guestprotocol.HostTunnelsPath, "mac-c-token"); code != http.StatusTooManyRequests {
		t.Fatalf("a new token from a flooded address: %d %s; want 429", code, body)
	}
	h.mu.Lock()
	for k, r := range h.reviewed {
		r.until = time.Now().Add(-time.Second)
		h.reviewed[k] = r
	}
	h.mu.Unlock()
	if code, body := dial(guestprotocol.HostTunnelsPath, "mac-a-token"); code != http.StatusSwitchingProtocols {
		t.Fatalf("the host's own token, its review lapsed, from the flooded address: %d %s; want it reviewed again", code, body)
	}

	// A plain GET is no WebSocket; an operator without tunnels says so.
	r := httptest.NewRequest(http.MethodGet, guestprotocol.HostTunnelsPath, nil)
	r.Header.Set("Authorization", "Bearer mac-a-token")
	w := httptest.NewRecorder()
	(&Handler{Hosts: h}).ServeHTTP(w, r)
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "WebSocket") {
		t.Errorf("a plain GET: %d %s", w.Code, w.Body.String())
	}
	without, _, _ := hostConfigSetup(t)
	w = httptest.NewRecorder()
	(&Handler{Hosts: without}).ServeHTTP(w, r)
	if w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), "carries no tunnels") {
		t.Errorf("no tunnels: %d %s", w.Code, w.Body.String())
	}
}
