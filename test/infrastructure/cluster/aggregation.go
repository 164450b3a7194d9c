package cluster

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/macvirt/macvirt/internal/pki"
)

// frontProxyClientName is the name the API server presents to aggregated
// APIs, and the only one they accept request headers from.
const frontProxyClientName = "front-proxy-client"

// enableAggregation configures env's API server for API aggregation, as
// kubeadm does: a request-header CA (which the API server publishes in
// kube-system/extension-apiserver-authentication, where aggregated API
// servers such as virt-api read it) and the client certificate it signs,
// which the API server presents when it proxies a request. Its files go
// into dir.
func enableAggregation(env *envtest.Environment, dir string) error {
	ca, err := pki.NewCA("front-proxy-ca", 7*24*time.Hour)
	if err != nil {
		return err
	}
	crt, key, err := ca.Issue(x509.Certificate{
		Subject:     pkix.Name{CommonName: frontProxyClientName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"front-proxy-ca.crt":     ca.PEM,
		"front-proxy-client.crt": crt,
		"front-proxy-client.key": key,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	args := env.ControlPlane.GetAPIServer().Configure()
	args.Set("requestheader-client-ca-file", filepath.Join(dir, "front-proxy-ca.crt"))
	args.Set("requestheader-allowed-names", frontProxyClientName)
	args.Set("requestheader-username-headers", "X-Remote-User")
	args.Set("requestheader-group-headers", "X-Remote-Group")
	args.Set("requestheader-extra-headers-prefix", "X-Remote-Extra-")
	args.Set("proxy-client-cert-file", filepath.Join(dir, "front-proxy-client.crt"))
	args.Set("proxy-client-key-file", filepath.Join(dir, "front-proxy-client.key"))
	return nil
}
