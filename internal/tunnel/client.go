package tunnel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"k8s.io/client-go/rest"
	wstransport "k8s.io/client-go/transport/websocket"
	"k8s.io/streaming/pkg/httpstream"
)

// Dial opens a tunnel to port of claim namespace/name's Mac through the
// API server cfg names, as cfg's user: a connection that reaches the Mac
// from wherever the API server is reachable.
func Dial(ctx context.Context, cfg *rest.Config, namespace, name string, port int32) (net.Conn, error) {
	base, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("the kubeconfig's server %q: %w", cfg.Host, err)
	}
	if base.Scheme == "" { // a bare host:port, as rest.Config allows
		if base, err = url.Parse("https://" + cfg.Host); err != nil {
			return nil, err
		}
	}
	u := *base
	u.Path = strings.TrimSuffix(base.Path, "/") + Path(namespace, name, port)
	rt, holder, err := wstransport.RoundTripperFor(cfg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	ws, err := wstransport.Negotiate(rt, holder, req, Protocol)
	if err != nil {
		return nil, unwrapUpgrade(err)
	}
	return NewConn(ws), nil
}

// pingInterval is how often an open tunnel pings (the operator's side
// answers with a pong), so that a load balancer or NAT in front of the API
// server does not drop an idle shell: cloud load balancers drop idle TCP
// connections after minutes (350 s on some).
var pingInterval = 30 * time.Second

// keepAlive pings every interval until the connection closes.
func (c *wsConn) keepAlive(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(interval)); err != nil {
				return
			}
		}
	}
}

// unwrapUpgrade gives the API server's own error (a forbidden user, a claim
// that does not exist) rather than client-go's wrapping of it.
func unwrapUpgrade(err error) error {
	var upgrade *httpstream.UpgradeFailureError
	if errors.As(err, &upgrade) && upgrade.Cause != nil {
		return upgrade.Cause
	}
	return err
}

// wsConn is a tunnel's WebSocket as a net.Conn: binary messages in, one
// per Write out.
type wsConn struct {
	ws        *websocket.Conn
	readMu    sync.Mutex
	reader    io.Reader
	writeMu   sync.Mutex
	done      chan struct{}
	closeOnce sync.Once
}

func (c *wsConn) Read(p []byte) (int, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	for {
		if c.reader == nil {
			kind, r, err := c.ws.NextReader()
			if err != nil {
				if websocket.IsCloseError(err, websocket.CloseNormalClosure) {
					return 0, io.EOF
				}
				return 0, err
			}
			if kind != websocket.BinaryMessage {
				continue
			}
			c.reader = r
		}
		n, err := c.reader.Read(p)
		if err == io.EOF {
			c.reader = nil
			if n == 0 {
				continue
			}
			err = nil
		}
		return n, err
	}
}

func (c *wsConn) Write(p []byte) (int, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if err := c.ws.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *wsConn) Close() error {
	c.closeOnce.Do(func() { close(c.done) })
	c.writeMu.Lock()
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	c.writeMu.Unlock()
	return c.ws.Close()
}

func (c *wsConn) LocalAddr() net.Addr                { return c.ws.LocalAddr() }
func (c *wsConn) RemoteAddr() net.Addr               { return c.ws.RemoteAddr() }
func (c *wsConn) SetDeadline(t time.Time) error      { return c.ws.UnderlyingConn().SetDeadline(t) }
func (c *wsConn) SetReadDeadline(t time.Time) error  { return c.ws.SetReadDeadline(t) }
func (c *wsConn) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }
