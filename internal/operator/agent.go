package operator

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"

	"github.com/macvirt/macvirt/internal/devserve"
	"github.com/macvirt/macvirt/internal/guestendpoint"
	"github.com/macvirt/macvirt/internal/localnet"
)

// agentEndpoint decides where the guest-agent endpoint listens, with which
// certificate, and what machines' config disks say about it: dev serving
// shares the dev server's certificate and listens on its host (on a free
// port when the address names none); in the cluster it uses the agent's
// certificate directory, or the webhook certificate's, whose directory
// also holds ca.crt. It returns no server when there is no address or no
// certificate.
func agentEndpoint(opts *Options, dev *devserve.Server) (guestendpoint.Address, *guestendpoint.Server, error) {
	a := opts.Agent
	addr := guestendpoint.Address{Endpoint: a.URL}
	if addr.Endpoint == "" {
		addr.Endpoint = defaultAgentEndpoint(opts.namespace())
	}
	if a.Address != nil {
		addr = *a.Address
	}
	if a.Addr == "" || a.Addr == "0" {
		return addr, nil, nil
	}
	if dev != nil {
		_, port, err := net.SplitHostPort(a.Addr)
		if err != nil {
			return addr, nil, fmt.Errorf("--agent-bind-address %q: %w", a.Addr, err)
		}
		if port == "" || port == "0" {
			p, err := localnet.FreePort(dev.Host)
			if err != nil {
				return addr, nil, err
			}
			port = strconv.Itoa(p)
		}
		hostPort := net.JoinHostPort(dev.Host, port)
		addr.Endpoint, addr.CABundle = "https://"+hostPort, dev.CABundle
		return addr, &guestendpoint.Server{Addr: hostPort, CertDir: dev.CertDir}, nil
	}
	certDir := a.CertDir
	if certDir == "" {
		certDir = opts.WebhookCert.Dir
	}
	if certDir == "" {
		return addr, nil, nil
	}
	ca, serverName, err := agentTrust(certDir, addr.Endpoint)
	if err != nil {
		return addr, nil, err
	}
	addr.CABundle, addr.ServerName = ca, serverName
	return addr, &guestendpoint.Server{Addr: a.Addr, CertDir: certDir}, nil
}

// defaultAgentEndpoint is the agent Service of the namespace the operator
// runs in, as config/default and the OLM bundle install it.
func defaultAgentEndpoint(namespace string) string {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	return "https://macvirt-agent." + namespace + ".svc"
}

// agentTrust is what agents are told to trust in the certificate directory:
// its ca.crt (cert-manager writes one); without it (OLM mounts only
// tls.crt and tls.key) the serving certificate itself. When that
// certificate does not name the endpoint's host (OLM's names the webhook
// Service), agents check it against the first name it has instead.
func agentTrust(certDir, agentURL string) (ca []byte, serverName string, err error) {
	crt, err := os.ReadFile(filepath.Join(certDir, "tls.crt")) //nolint:gosec // a directory the deployment names.
	if err != nil {
		return nil, "", fmt.Errorf("reading the agent endpoint's certificate: %w", err)
	}
	ca, err = os.ReadFile(filepath.Join(certDir, "ca.crt")) //nolint:gosec // as above.
	switch {
	case errors.Is(err, fs.ErrNotExist):
		ca = crt
	case err != nil:
		return nil, "", fmt.Errorf("reading the CA bundle agents trust: %w", err)
	}
	block, _ := pem.Decode(crt)
	if block == nil {
		return nil, "", fmt.Errorf("%s holds no PEM certificate", filepath.Join(certDir, "tls.crt"))
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, "", fmt.Errorf("parsing the agent endpoint's certificate: %w", err)
	}
	u, err := url.Parse(agentURL)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" {
		return nil, "", fmt.Errorf("--agent-endpoint %q is not an https:// URL", agentURL)
	}
	if leaf.VerifyHostname(u.Hostname()) == nil {
		return ca, "", nil
	}
	if len(leaf.DNSNames) == 0 {
		return nil, "", fmt.Errorf("the agent endpoint's certificate names neither %s nor any other DNS name", u.Hostname())
	}
	return ca, leaf.DNSNames[0], nil
}
