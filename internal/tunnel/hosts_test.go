package tunnel

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// hostsServer serves a Hosts as the agent endpoint does, with the host
// named by a header instead of a reviewed token.
func hostsServer(t *testing.T, h *Hosts) string {
	t.Helper()
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Header.Get("X-Host")
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		if id, ok := strings.CutPrefix(r.URL.Path, "/back/"); ok {
			if err := h.Accept(host, id, ws); err != nil {
				_ = ws.Close()
			}
			return
		}
		h.Serve(r.Context(), host, ws)
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

// fakeAgent holds host's connection and answers each dial as bringBack
// says: the host it brings the connection back as, and the result it
// sends; the guest echoes.
func fakeAgent(t *testing.T, url, host string, bringBack func(guestprotocol.HostDial) (string, string)) {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(url+"/held", http.Header{"X-Host": {host}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	go func() {
		for {
			_, b, err := ws.ReadMessage()
			if err != nil {
				return
			}
			var d guestprotocol.HostDial
			_ = json.Unmarshal(b, &d)
			as, problem := bringBack(d)
			back, _, err := websocket.DefaultDialer.Dial(url+"/back/"+d.ID, http.Header{"X-Host": {as}})
			if err != nil {
				continue
			}
			r, _ := json.Marshal(guestprotocol.HostDialResult{Error: problem})
			_ = back.WriteMessage(websocket.TextMessage, r)
			go func() {
				defer func() { _ = back.Close() }()
				for {
					kind, p, err := back.ReadMessage()
					if err != nil || back.WriteMessage(kind, p) != nil {
						return
					}
				}
			}()
		}
	}()
}

func TestHostsCarryATunnelOnlyThroughTheAskedHost(t *testing.T) {
	h := &Hosts{DialTimeout: 2 * time.Second}
	url := hostsServer(t, h)
	ctx := context.Background()
	machine := guestprotocol.MachineRef{Namespace: "pools", Name: "m1"}

	if _, err := h.Dial(ctx, "mac-a", machine, "u1", 22); err == nil || !strings.Contains(err.Error(), "holds no tunnel connection") {
		t.Fatalf("a host whose agent is not connected: %v", err)
	}
	var asked guestprotocol.HostDial
	fakeAgent(t, url, "mac-a", func(d guestprotocol.HostDial) (string, string) {
		asked = d
		if d.Port == 5900 {
			return "mac-a", "connecting to the guest at 192.168.64.3:5900: connection refused"
		}
		return "mac-a", ""
	})
	waitConnected(h, "mac-a")
	conn, err := h.Dial(ctx, "mac-a", machine, "u1", 22)
	if err != nil {
		t.Fatal(err)
	}
	if asked.Machine != machine || asked.UID != "u1" || asked.Port != 22 || !guestprotocol.ValidHostDialID(asked.ID) {
		t.Fatalf("the agent was asked %+v", asked)
	}
	if _, err := conn.Write([]byte("SSH-2.0-probe\r\n")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len("SSH-2.0-probe\r\n"))
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != "SSH-2.0-probe\r\n" {
		t.Fatalf("through the tunnel: %q, %v", got, err)
	}
	_ = conn.Close()

	if _, err := h.Dial(ctx, "mac-a", machine, "u1", 5900); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("a guest port that refuses: %v; want the agent's words", err)
	}

	// Another host's agent bringing back mac-a's connection is refused,
	// and the dial gives up.
	fakeAgent(t, url, "mac-b", func(guestprotocol.HostDial) (string, string) { return "mac-b", "" })
	waitConnected(h, "mac-b")
	h2 := &Hosts{DialTimeout: 500 * time.Millisecond}
	url2 := hostsServer(t, h2)
	fakeAgent(t, url2, "mac-a", func(guestprotocol.HostDial) (string, string) { return "mac-b", "" })
	waitConnected(h2, "mac-a")
	if _, err := h2.Dial(ctx, "mac-a", machine, "u1", 22); err == nil || !strings.Contains(err.Error(), "did not bring the connection back") {
		t.Fatalf("mac-a's tunnel brought back by mac-b: %v; want refused", err)
	}
}

// One host carries at most MaxPerHost tunnels at once; a closed one gives
// its place back. A host agent's answer is read within a bound, and what a
// tenant reads of its words is cut short.
func TestHostsBoundTunnelsAndWhatAnAgentSays(t *testing.T) {
	h := &Hosts{DialTimeout: 2 * time.Second, MaxPerHost: 1}
	url := hostsServer(t, h)
	ctx := context.Background()
	machine := guestprotocol.MachineRef{Namespace: "pools", Name: "m1"}
	huge := strings.Repeat("A", 1<<20)
	fakeAgent(t, url, "mac-a", func(d guestprotocol.HostDial) (string, string) {
		if d.Port == 5900 {
			return "mac-a", huge
		}
		return "mac-a", ""
	})
	waitConnected(h, "mac-a")
	first, err := h.Dial(ctx, "mac-a", machine, "u1", 22)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Dial(ctx, "mac-a", machine, "u1", 22); err == nil || !strings.Contains(err.Error(), "carries 1 tunnels already") {
		t.Fatalf("a second tunnel past the limit: %v", err)
	}
	_ = first.Close()
	if h.Active("mac-a") != 0 {
		t.Fatalf("%d tunnels active after the only one closed", h.Active("mac-a"))
	}
	second, err := h.Dial(ctx, "mac-a", machine, "u1", 22)
	if err != nil {
		t.Fatalf("a tunnel once the first closed: %v", err)
	}
	_ = second.Close()
	_, err = h.Dial(ctx, "mac-a", machine, "u1", 5900)
	if err == nil || len(err.Error()) > 1024 {
		t.Fatalf("an agent answering 1 MiB: an error of %d bytes; want it bounded", len(fmt.Sprint(err)))
	}
	if h.Active("mac-a") != 0 {
		t.Fatalf("%d tunnels active after a refused one", h.Active("mac-a"))
	}
}

// waitConnected waits until host's agent holds its connection to h.
func waitConnected(h *Hosts, host string) {
	for !h.Connected(host) {
		time.Sleep(10 * time.Millisecond)
	}
}
