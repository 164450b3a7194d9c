package devserve

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

func generated(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "config", "webhook", "manifests.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPreparePointsEveryWebhookAtTheLocalServer(t *testing.T) {
	s, err := Prepare(Options{Manifests: generated(t), NamePrefix: "test-"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	webhooks := 0
	for _, o := range s.Configurations() {
		if !strings.HasPrefix(o.GetName(), "test-") {
			t.Errorf("%s lacks the name prefix", o.GetName())
		}
		for name, cc := range clientConfigs(o) {
			webhooks++
			if cc.Service != nil || cc.URL == nil || !strings.HasPrefix(*cc.URL, s.URL()+"/") || string(cc.CABundle) != string(s.CABundle) {
				t.Errorf("webhook %s is not pointed at %s with the CA: %+v", name, s.URL(), cc)
			}
		}
	}
	if webhooks != 11 {
		t.Errorf("%d webhooks, want 11 (defaulting and validating for four kinds, validating for runner sets, Buildkite queues and images)", webhooks)
	}

	// The serving certificate verifies against the CA for the host.
	pair, err := tls.LoadX509KeyPair(filepath.Join(s.CertDir, "tls.crt"), filepath.Join(s.CertDir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(s.CABundle)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1"}); err != nil {
		t.Errorf("serving certificate does not verify for 127.0.0.1: %v", err)
	}

	dir := s.CertDir
	s.Close()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("Close left %s behind", dir)
	}
}

func TestPrepareRefusesWhatIsNotAWebhookConfiguration(t *testing.T) {
	for name, manifests := range map[string]string{
		"empty":          "",
		"a Deployment":   "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\n",
		"an unknown key": "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: x\nwebhookz: []\n",
		"a URL webhook": "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: x\n" +
			"webhooks:\n- name: a.b.c\n  clientConfig:\n    url: https://example.com/x\n",
	} {
		t.Run(name, func(t *testing.T) {
			if s, err := Prepare(Options{Manifests: []byte(manifests)}); err == nil {
				s.Close()
				t.Error("accepted")
			}
		})
	}
}
