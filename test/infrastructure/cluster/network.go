package cluster

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// clusterNetwork is how the test cluster's API server reaches Services: the
// API server dials webhooks and aggregated APIs through an egress selector
// (an HTTP CONNECT proxy on a Unix socket, as Konnectivity serves one), and
// the proxy forwards a Service's cluster IP and port to the local process
// that serves it. Webhooks and APIServices therefore stay exactly as their
// projects ship them, Service references and all. Loopback addresses (the
// URL webhooks envtest installs) pass straight through; any other address
// without a route is refused, as a Service without endpoints would be.
type clusterNetwork struct {
	dir string
	ln  net.Listener

	mu     sync.Mutex
	routes map[string]string
}

// newClusterNetwork listens on a Unix socket in a new directory (kept short:
// a socket path may not exceed 107 bytes).
func newClusterNetwork() (*clusterNetwork, error) {
	dir, err := os.MkdirTemp("", "macvirt-net-")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", filepath.Join(dir, "egress.sock"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	n := &clusterNetwork{dir: dir, ln: ln, routes: map[string]string{}}
	go n.serve()
	return n, nil
}

// egressSelectorConfig writes the API server's egress selector
// configuration (--egress-selector-config-file) and returns its path: the
// "cluster" egress, which carries webhook and aggregated API traffic, goes
// through the proxy.
func (n *clusterNetwork) egressSelectorConfig() (string, error) {
	path := filepath.Join(n.dir, "egress-selector.yaml")
	conf := fmt.Sprintf(`apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: %s
`, n.ln.Addr().String())
	return path, os.WriteFile(path, []byte(conf), 0o600)
}

// route sends connections to a Service's clusterIP:port to the local
// address of the process that serves it.
func (n *clusterNetwork) route(service, local string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.routes[service] = local
}

// close stops the proxy; connections already forwarded end with their
// peers.
func (n *clusterNetwork) close() error {
	err := n.ln.Close()
	_ = os.RemoveAll(n.dir)
	return err
}

func (n *clusterNetwork) serve() {
	for {
		conn, err := n.ln.Accept()
		if err != nil {
			return
		}
		go n.handle(conn)
	}
}

func (n *clusterNetwork) target(addr string) (string, error) {
	n.mu.Lock()
	local, ok := n.routes[addr]
	n.mu.Unlock()
	if ok {
		return local, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return addr, nil
	}
	return "", fmt.Errorf("no route to %s: no process of the test cluster serves it", addr)
}

func (n *clusterNetwork) handle(conn net.Conn) {
	defer func() { _ = conn.Close() }()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	if req.Method != http.MethodConnect {
		_, _ = fmt.Fprintf(conn, "HTTP/1.1 405 Method Not Allowed\r\n\r\n")
		return
	}
	to, err := n.target(req.Host)
	if err != nil {
		_, _ = fmt.Fprintf(conn, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\n\r\n%s", len(err.Error()), err)
		return
	}
	upstream, err := net.DialTimeout("tcp", to, 10*time.Second)
	if err != nil {
		_, _ = fmt.Fprintf(conn, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
		return
	}
	defer func() { _ = upstream.Close() }()
	_ = conn.SetReadDeadline(time.Time{})
	if _, err := fmt.Fprintf(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(upstream, br); closeWrite(upstream); done <- struct{}{} }()
	go func() { _, _ = io.Copy(conn, upstream); closeWrite(conn); done <- struct{}{} }()
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}
