package guestendpoint

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

// Server serves a Handler over TLS as a manager runnable, on every replica
// (heartbeats are written with the API server's optimistic concurrency, so
// any replica may take them).
type Server struct {
	// Addr is the listen address, e.g. ":9444".
	Addr string
	// CertDir holds tls.crt and tls.key; they are reloaded when they change.
	CertDir string
	Handler http.Handler
	// TLSOpts adjust the TLS configuration (e.g. to disable HTTP/2).
	TLSOpts []func(*tls.Config)

	// listeningSince holds the Unix nanoseconds at which the listener
	// opened; zero before.
	listeningSince atomic.Int64
}

// ListeningSince is when the endpoint began to accept heartbeats; the zero
// time while it does not. The machine controller runs no heartbeat or boot
// timeout from before it.
func (s *Server) ListeningSince() time.Time {
	if ns := s.listeningSince.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Start implements manager.Runnable.
func (s *Server) Start(ctx context.Context) error {
	watcher, err := certwatcher.New(filepath.Join(s.CertDir, "tls.crt"), filepath.Join(s.CertDir, "tls.key"))
	if err != nil {
		return fmt.Errorf("loading the agent endpoint's certificate: %w", err)
	}
	go func() { _ = watcher.Start(ctx) }()
	cfg := &tls.Config{GetCertificate: watcher.GetCertificate, MinVersion: tls.VersionTLS12}
	for _, o := range s.TLSOpts {
		o(cfg)
	}
	ln, err := tls.Listen("tcp", s.Addr, cfg)
	if err != nil {
		return fmt.Errorf("listening for guest agents on %s: %w", s.Addr, err)
	}
	s.listeningSince.Store(time.Now().UnixNano())
	defer s.listeningSince.Store(0)
	srv := &http.Server{Handler: s.Handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, MaxHeaderBytes: 16 << 10}
	ctrl.Log.WithName("agent-endpoint").Info("serving guest agents", "address", ln.Addr().String())
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

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (s *Server) NeedLeaderElection() bool { return false }
