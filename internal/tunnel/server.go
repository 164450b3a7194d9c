package tunnel

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// Connections counts tunnel requests by how they were answered: opened,
// forbidden (not the API server's front proxy, or a user without the
// right), unavailable (no Mac, no address, a port not open, a refused
// dial).
var Connections = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "macvirt_tunnel_connections_total",
	Help: "Tunnel requests to claims' Macs through the API server, by result (opened, forbidden, unavailable).",
}, []string{"result"})

// ActiveConnections is the number of tunnels open now.
var ActiveConnections = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "macvirt_tunnel_connections_active",
	Help: "Tunnels to claims' Macs open now.",
})

func init() {
	ctrlmetrics.Registry.MustRegister(Collectors()...)
}

// Collectors are the tunnel's metrics.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{Connections, ActiveConnections, HostsConnected}
}

// dialTimeout is how long a connection to a Mac may take.
const dialTimeout = 10 * time.Second

// Server serves the tunnel API over TLS as a manager runnable, on every
// replica (it only reads).
type Server struct {
	// Addr is the listen address (":9445").
	Addr string
	// CertDir holds the serving certificate, CertName and KeyName in it
	// (tls.crt and tls.key when empty); reloaded when they change.
	CertDir, CertName, KeyName string
	// Reader reads MacClaims and MacMachines (the manager's cache).
	Reader client.Reader
	// Reviewer creates SubjectAccessReviews.
	Reviewer client.Client
	// Auth authenticates the API server's proxied requests.
	Auth *FrontProxy
	// Dial connects to a Mac (a net.Dialer when nil).
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Hosts carries tunnels to the guests of Apple-silicon hosts, through
	// the connections their agents hold to the agent endpoint; nil
	// refuses them.
	Hosts *Hosts
	// TLSOpts adjust the TLS configuration.
	TLSOpts []func(*tls.Config)
	Log     logr.Logger
}

// Start implements manager.Runnable.
func (s *Server) Start(ctx context.Context) error {
	certName, keyName := s.CertName, s.KeyName
	if certName == "" {
		certName, keyName = "tls.crt", "tls.key"
	}
	watcher, err := certwatcher.New(filepath.Join(s.CertDir, certName), filepath.Join(s.CertDir, keyName))
	if err != nil {
		return fmt.Errorf("loading the tunnel's certificate: %w", err)
	}
	go func() { _ = watcher.Start(ctx) }()
	base := &tls.Config{GetCertificate: watcher.GetCertificate, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	for _, o := range s.TLSOpts {
		o(base)
	}
	base.NextProtos = []string{"http/1.1"} // a WebSocket upgrade is HTTP/1.1's
	cfg := base.Clone()
	cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		c := base.Clone()
		c.ClientAuth = tls.VerifyClientCertIfGiven
		if t, err := s.Auth.current(hello.Context()); err == nil {
			c.ClientCAs = t.pool
		} else {
			c.ClientAuth = tls.RequestClientCert // authenticate answers why
		}
		return c, nil
	}
	ln, err := tls.Listen("tcp", s.Addr, cfg)
	if err != nil {
		return fmt.Errorf("listening for tunnels on %s: %w", s.Addr, err)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10,
		BaseContext: func(net.Listener) context.Context { return ctx },
		// Handshakes a probe or a stray client broke off are not the
		// operator's errors: debug logs.
		ErrorLog: stdlog.New(logWriter{s.Log.V(1)}, "", 0)}
	s.Log.Info("serving tunnels to claims' Macs", "address", ln.Addr().String(), "group", Group)
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// logWriter writes the HTTP server's own messages to a logger.
type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Info(strings.TrimSpace(string(p)))
	return len(p), nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (s *Server) NeedLeaderElection() bool { return false }

// ServeHTTP answers discovery and tunnel requests.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/apis":
		writeJSON(w, http.StatusOK, &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"},
			Groups: []metav1.APIGroup{apiGroup()}})
		return
	case "/apis/" + Group:
		g := apiGroup()
		g.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
		writeJSON(w, http.StatusOK, &g)
		return
	case "/apis/" + Group + "/" + Version:
		writeJSON(w, http.StatusOK, &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
			GroupVersion: Group + "/" + Version,
			APIResources: []metav1.APIResource{{Name: Resource + "/" + Subresource, Namespaced: true, Kind: "MacClaim", Verbs: metav1.Verbs{"get"}}}})
		return
	}
	req, ok := parsePath(r.URL.Path)
	if !ok || r.Method != http.MethodGet {
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Group: Group, Resource: Resource}, r.URL.Path))
		return
	}
	s.serveTunnel(w, r, req)
}

func apiGroup() metav1.APIGroup {
	v := metav1.GroupVersionForDiscovery{GroupVersion: Group + "/" + Version, Version: Version}
	return metav1.APIGroup{Name: Group, Versions: []metav1.GroupVersionForDiscovery{v}, PreferredVersion: v}
}

var portforward = schema.GroupResource{Group: Group, Resource: Resource + "/" + Subresource}

// serveTunnel checks who asks, for what, and connects.
func (s *Server) serveTunnel(w http.ResponseWriter, r *http.Request, req request) {
	ctx := r.Context()
	log := s.Log.WithValues("macclaim", req.namespace+"/"+req.name, "port", req.port)
	trust, err := s.Auth.current(ctx)
	if err != nil {
		Connections.WithLabelValues("unavailable").Inc()
		log.Error(err, "cannot authenticate tunnel requests")
		writeStatus(w, apierrors.NewServiceUnavailable("the tunnel cannot check the API server's front proxy: "+err.Error()))
		return
	}
	user, err := trust.authenticate(r)
	if err != nil {
		Connections.WithLabelValues("forbidden").Inc()
		writeStatus(w, apierrors.NewUnauthorized(err.Error()))
		return
	}
	log = log.WithValues("user", user.Name)
	if err := s.authorize(ctx, user, req); err != nil {
		Connections.WithLabelValues("forbidden").Inc()
		if !apierrors.IsForbidden(err) {
			log.Error(err, "checking the user's rights")
		}
		writeStatus(w, err)
		return
	}
	target, err := s.target(ctx, req)
	if err != nil {
		Connections.WithLabelValues("unavailable").Inc()
		writeStatus(w, err)
		return
	}
	dialCtx, cancel := context.WithTimeout(ctx, dialTimeout)
	mac, err := s.connect(dialCtx, target)
	cancel()
	if err != nil {
		Connections.WithLabelValues("unavailable").Inc()
		writeStatus(w, apierrors.NewServiceUnavailable(fmt.Sprintf("connecting to port %d of macclaim %s/%s's Mac: %v", req.port, req.namespace, req.name, err)))
		return
	}
	up := websocket.Upgrader{Subprotocols: []string{Protocol}, HandshakeTimeout: 10 * time.Second,
		// The API server's front proxy is the only caller (above); browsers
		// never reach this server directly.
		CheckOrigin: func(*http.Request) bool { return true }}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		_ = mac.Close()
		Connections.WithLabelValues("unavailable").Inc()
		return // Upgrade answered the request
	}
	if ws.Subprotocol() != Protocol {
		_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseProtocolError, "want subprotocol "+Protocol), time.Now().Add(time.Second))
		_ = ws.Close()
		_ = mac.Close()
		Connections.WithLabelValues("unavailable").Inc()
		return
	}
	// The server's header deadlines stay on a hijacked connection.
	_ = ws.UnderlyingConn().SetDeadline(time.Time{})
	Connections.WithLabelValues("opened").Inc()
	ActiveConnections.Inc()
	defer ActiveConnections.Dec()
	log.V(1).Info("tunnel opened", "target", target.String())
	Bridge(ctx, ws, mac)
	log.V(1).Info("tunnel closed")
}

// authorize asks the API server whether user may get macclaims/portforward
// of the claim: the API server checked before proxying, and the operator
// checks again rather than trust that every proxy in front of it does.
func (s *Server) authorize(ctx context.Context, u *User, req request) error {
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = v
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: u.Name, Groups: u.Groups, Extra: extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Group: Group, Version: Version, Resource: Resource,
			Subresource: Subresource, Verb: "get", Namespace: req.namespace, Name: req.name},
	}}
	if err := s.Reviewer.Create(ctx, sar); err != nil {
		return apierrors.NewInternalError(fmt.Errorf("asking the API server whether %s may tunnel: %w", u.Name, err))
	}
	if !sar.Status.Allowed || sar.Status.Denied {
		return apierrors.NewForbidden(portforward, req.name, fmt.Errorf("user %q cannot get %s in namespace %q: ask for the role macvirt-claim-editor there",
			u.Name, portforward.String(), req.namespace))
	}
	return nil
}

// connect opens the connection a route leads to: a dial on the pod
// network, or a connection the Mac's host agent brings back.
func (s *Server) connect(ctx context.Context, r Route) (net.Conn, error) {
	if r.Host != "" {
		if s.Hosts == nil {
			return nil, errors.New("this operator carries no tunnel to Apple-silicon hosts (it serves no agent endpoint)")
		}
		return s.Hosts.Dial(ctx, r.Host, guestprotocol.MachineRef{Namespace: r.Machine.Namespace, Name: r.Machine.Name}, string(r.UID), r.Port)
	}
	dial := s.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: dialTimeout}).DialContext
	}
	return dial(ctx, "tcp", r.Address)
}

// target reads the claim and its machine from the cache and decides.
func (s *Server) target(ctx context.Context, req request) (Route, error) {
	claim := &macvirtv1alpha1.MacClaim{}
	if err := s.Reader.Get(ctx, client.ObjectKey{Namespace: req.namespace, Name: req.name}, claim); err != nil {
		if apierrors.IsNotFound(err) {
			return Route{}, apierrors.NewNotFound(schema.GroupResource{Group: macvirtv1alpha1.GroupVersion.Group, Resource: "macclaims"}, req.name)
		}
		return Route{}, apierrors.NewInternalError(err)
	}
	var machine *macvirtv1alpha1.MacMachine
	if ref := claim.Status.MachineRef; ref != nil {
		m := &macvirtv1alpha1.MacMachine{}
		switch err := s.Reader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, m); {
		case err == nil && m.UID == ref.UID:
			machine = m
		case err != nil && !apierrors.IsNotFound(err):
			return Route{}, apierrors.NewInternalError(err)
		}
	}
	route, err := Target(claim, machine, req.port)
	if err != nil {
		return Route{}, apierrors.NewServiceUnavailable(err.Error())
	}
	return route, nil
}

// Bridge copies between a tunnel's WebSocket and its TCP connection until
// either ends, then closes both. The client side uses it too.
func Bridge(ctx context.Context, ws *websocket.Conn, conn net.Conn) {
	done := make(chan struct{}, 2)
	go func() { // WebSocket -> TCP
		defer func() { done <- struct{}{} }()
		for {
			kind, rd, err := ws.NextReader()
			if err != nil {
				return
			}
			if kind != websocket.BinaryMessage {
				continue
			}
			if _, err := io.Copy(conn, rd); err != nil {
				return
			}
		}
	}()
	go func() { // TCP -> WebSocket
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32<<10)
		for {
			n, err := conn.Read(buf)
			if n > 0 {
				if werr := ws.WriteMessage(websocket.BinaryMessage, buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
				return
			}
		}
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	_ = conn.Close()
	_ = ws.Close()
	<-done
}

// writeStatus answers with the error as a metav1.Status, which kubectl mac
// (client-go) reads back as the API error it is.
func writeStatus(w http.ResponseWriter, err error) {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		status = apierrors.NewInternalError(err)
	}
	st := status.Status()
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	st.Status = metav1.StatusFailure
	code := int(st.Code)
	if code == 0 {
		code = http.StatusInternalServerError
	}
	writeJSON(w, code, &st)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}
