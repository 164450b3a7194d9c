package operator

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"

	networkingv1 "k8s.io/api/networking/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/macvirt/macvirt/internal/devserve"
	"github.com/macvirt/macvirt/internal/localnet"
	"github.com/macvirt/macvirt/internal/render"
	"github.com/macvirt/macvirt/internal/tunnel"
)

// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// PodLabels are the labels of the operator's pods (config/manager), which
// machines' NetworkPolicies let in for the tunnel.
var PodLabels = map[string]string{"control-plane": "controller-manager", "app.kubernetes.io/name": "macvirt"}

// tunnelServer decides where the tunnel listens and with which
// certificate: dev serving uses the dev server's certificate on its host;
// in the cluster, the tunnel's certificate directory (tls.crt and tls.key,
// or OLM's apiserver.crt and apiserver.key), else the webhook
// certificate's. It returns no server when there is no address or no
// certificate, and the peer machines let in when there is one.
func tunnelServer(mgr ctrl.Manager, opts *Options, dev *devserve.Server) (*tunnel.Server, *networkingv1.NetworkPolicyPeer, error) {
	t := opts.Tunnel
	if t.Addr == "" || t.Addr == "0" {
		return nil, nil, nil
	}
	s := &tunnel.Server{Addr: t.Addr, CertDir: t.CertDir, Reader: mgr.GetClient(), Reviewer: mgr.GetClient(),
		Auth: &tunnel.FrontProxy{Reader: mgr.GetAPIReader()}, Dial: t.Dial, Log: mgr.GetLogger().WithName("tunnel")}
	if dev != nil {
		host, port, err := net.SplitHostPort(t.Addr)
		if err != nil {
			return nil, nil, fmt.Errorf("--tunnel-bind-address %q: %w", t.Addr, err)
		}
		if host == "" {
			host = dev.Host
		}
		if port == "" || port == "0" {
			p, err := localnet.FreePort(host)
			if err != nil {
				return nil, nil, err
			}
			port = strconv.Itoa(p)
		}
		s.Addr, s.CertDir = net.JoinHostPort(host, port), dev.CertDir
	}
	if s.CertDir == "" {
		s.CertDir = opts.WebhookCert.Dir
	}
	if s.CertDir == "" {
		mgr.GetLogger().Info("Tunnel disabled: no certificate (--tunnel-cert-path, --webhook-cert-path); tenants reach Macs only from inside the cluster or by their claims' NodePort or LoadBalancer")
		return nil, nil, nil
	}
	if _, err := os.Stat(filepath.Join(s.CertDir, "tls.crt")); errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(s.CertDir, "apiserver.crt")); err == nil {
			s.CertName, s.KeyName = "apiserver.crt", "apiserver.key" // as OLM mounts an APIService's
		}
	}
	return s, render.TunnelPeer(opts.namespace(), PodLabels), nil
}
