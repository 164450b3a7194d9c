// Package devserve serves the operator for development, from a process
// outside the cluster (make run, the sandbox, the integration tests): its
// admission webhooks, so objects get the same defaults and the same
// refusals as in the cluster, and the certificate its guest-agent endpoint
// serves with.
//
// It generates a throw-away CA and a serving certificate for the address
// the API server reaches this process at, and registers the webhook
// configurations generated from the markers (config/webhook/manifests.yaml)
// with each webhook's clientConfig pointed at that address instead of the
// in-cluster Service. They are removed again when the process stops.
package devserve

import (
	"bytes"
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/yaml"

	"github.com/macvirt/macvirt/internal/localnet"
	"github.com/macvirt/macvirt/internal/pki"
)

// NamePrefix starts the names of the configurations registered locally, so
// they are easy to find (and to delete by hand after a kill -9).
const NamePrefix = "macvirt-local-"

// Options say where the API server reaches the local webhook server.
type Options struct {
	// Host is the address the API server connects to; 127.0.0.1 when empty.
	Host string
	// Port is the webhook server's port; a free one when 0.
	Port int
	// CertDir receives tls.crt and tls.key; a new temporary directory,
	// removed by Close, when empty.
	CertDir string
	// Manifests are the generated webhook configurations
	// (config/webhook/manifests.yaml).
	Manifests []byte
	// NamePrefix replaces the default NamePrefix of the registered
	// configurations.
	NamePrefix string
	// DNSNames are more names the serving certificate is for (a Service's
	// name, which the API server checks an APIService's server against).
	DNSNames []string
}

// Server is a prepared local webhook server: certificates written, port
// chosen, configurations ready to register.
type Server struct {
	Host     string
	Port     int
	CertDir  string
	CABundle []byte
	configs  []client.Object
	tempDir  bool
}

// Prepare writes the certificates and builds the configurations.
func Prepare(opts Options) (*Server, error) {
	s := &Server{Host: opts.Host, Port: opts.Port, CertDir: opts.CertDir}
	if s.Host == "" {
		s.Host = "127.0.0.1"
	}
	if s.Port == 0 {
		port, err := localnet.FreePort(s.Host)
		if err != nil {
			return nil, err
		}
		s.Port = port
	}
	if s.CertDir == "" {
		dir, err := os.MkdirTemp("", "macvirt-webhook-certs-")
		if err != nil {
			return nil, err
		}
		s.CertDir, s.tempDir = dir, true
	}
	ca, err := writeCertificates(s.CertDir, s.Host, opts.DNSNames)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.CABundle = ca
	prefix := opts.NamePrefix
	if prefix == "" {
		prefix = NamePrefix
	}
	if s.configs, err = localConfigs(opts.Manifests, prefix, s.URL(), ca); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// URL is the base URL the API server calls.
func (s *Server) URL() string {
	return "https://" + net.JoinHostPort(s.Host, strconv.Itoa(s.Port))
}

// WebhookServer is a controller-runtime webhook server listening where the
// configurations point, with the generated certificate.
func (s *Server) WebhookServer(opts webhook.Options) webhook.Server {
	opts.Host, opts.Port, opts.CertDir = s.Host, s.Port, s.CertDir
	opts.CertName, opts.KeyName = "tls.crt", "tls.key"
	return webhook.NewServer(opts)
}

// Configurations returns copies of the configurations Install registers.
func (s *Server) Configurations() []client.Object {
	out := make([]client.Object, len(s.configs))
	for i, o := range s.configs {
		out[i] = o.DeepCopyObject().(client.Object)
	}
	return out
}

// Install creates the configurations, or replaces ones left by an earlier run.
func (s *Server) Install(ctx context.Context, c client.Client) error {
	for _, o := range s.Configurations() {
		err := c.Create(ctx, o)
		if apierrors.IsAlreadyExists(err) {
			existing := o.DeepCopyObject().(client.Object)
			if err = c.Get(ctx, client.ObjectKeyFromObject(o), existing); err == nil {
				o.SetResourceVersion(existing.GetResourceVersion())
				err = c.Update(ctx, o)
			}
		}
		if err != nil {
			return fmt.Errorf("registering %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

// Uninstall deletes the configurations.
func (s *Server) Uninstall(ctx context.Context, c client.Client) error {
	var errs []error
	for _, o := range s.Configurations() {
		if err := c.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("removing %T %s: %w", o, o.GetName(), err))
		}
	}
	return errors.Join(errs...)
}

// Close removes a temporary certificate directory. It may be called on nil.
func (s *Server) Close() {
	if s != nil && s.tempDir {
		_ = os.RemoveAll(s.CertDir)
	}
}

// Registrar registers the configurations once the webhook server answers
// and removes them when the manager stops. Add it to the manager with
// mgr.Add; it runs on every replica, leader or not.
type Registrar struct {
	Server  *Server
	Client  client.Client
	Started func() bool
	// Poll is how often Started is asked; 50ms when zero.
	Poll time.Duration
}

// Start implements manager.Runnable.
func (r *Registrar) Start(ctx context.Context) error {
	poll := r.Poll
	if poll == 0 {
		poll = 50 * time.Millisecond
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for r.Started != nil && !r.Started() {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
	if err := r.Server.Install(ctx, r.Client); err != nil {
		return err
	}
	<-ctx.Done()
	cleanup, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return r.Server.Uninstall(cleanup, r.Client)
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica serves webhooks.
func (r *Registrar) NeedLeaderElection() bool { return false }

// localConfigs reads the generated configurations, renames them with
// prefix, and points every webhook at base+path with the CA bundle.
func localConfigs(manifests []byte, prefix, base string, ca []byte) ([]client.Object, error) {
	var out []client.Object
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	for {
		var raw map[string]any
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading webhook manifests: %w", err)
		}
		if raw == nil {
			continue
		}
		doc, err := yaml.Marshal(raw)
		if err != nil {
			return nil, err
		}
		var cfg client.Object
		switch raw["kind"] {
		case "MutatingWebhookConfiguration":
			cfg = &admissionregistrationv1.MutatingWebhookConfiguration{}
		case "ValidatingWebhookConfiguration":
			cfg = &admissionregistrationv1.ValidatingWebhookConfiguration{}
		default:
			return nil, fmt.Errorf("webhook manifests hold a %v; expected only webhook configurations", raw["kind"])
		}
		if err := yaml.UnmarshalStrict(doc, cfg); err != nil {
			return nil, fmt.Errorf("reading %v: %w", raw["kind"], err)
		}
		cfg.SetName(prefix + cfg.GetName())
		for name, cc := range clientConfigs(cfg) {
			if err := pointAt(cc, base, ca); err != nil {
				return nil, fmt.Errorf("webhook %s: %w", name, err)
			}
		}
		out = append(out, cfg)
	}
	if len(out) == 0 {
		return nil, errors.New("webhook manifests hold no webhook configuration; run make manifests")
	}
	return out, nil
}

// clientConfigs maps each webhook of a configuration to its clientConfig.
func clientConfigs(cfg client.Object) map[string]*admissionregistrationv1.WebhookClientConfig {
	out := map[string]*admissionregistrationv1.WebhookClientConfig{}
	switch c := cfg.(type) {
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		for i := range c.Webhooks {
			out[c.Webhooks[i].Name] = &c.Webhooks[i].ClientConfig
		}
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		for i := range c.Webhooks {
			out[c.Webhooks[i].Name] = &c.Webhooks[i].ClientConfig
		}
	}
	return out
}

func pointAt(cc *admissionregistrationv1.WebhookClientConfig, base string, ca []byte) error {
	if cc.Service == nil || cc.Service.Path == nil {
		return errors.New("has no service path to serve locally")
	}
	u := base + *cc.Service.Path
	cc.Service, cc.URL, cc.CABundle = nil, &u, ca
	return nil
}

// certValidity is long enough for any development session; a new pair is
// made at every start.
const certValidity = 30 * 24 * time.Hour

// writeCertificates makes a CA and a serving certificate for host (and
// names), writes the serving pair to dir, and returns the CA certificate
// in PEM.
func writeCertificates(dir, host string, names []string) ([]byte, error) {
	ca, err := pki.NewCA("macvirt local webhook CA", certValidity)
	if err != nil {
		return nil, err
	}
	tmpl := x509.Certificate{
		Subject:     pkix.Name{CommonName: host},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    append([]string{"localhost"}, names...),
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = append(tmpl.DNSNames, host)
	}
	crt, key, err := ca.Issue(tmpl)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), crt, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), key, 0o600); err != nil {
		return nil, err
	}
	return ca.PEM, nil
}
