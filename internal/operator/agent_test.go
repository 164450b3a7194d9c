package operator

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeCert writes a self-signed tls.crt for names into a new directory.
func writeCert(t *testing.T, names ...string) (dir string, crt []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), NotAfter: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	crt = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), crt, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, crt
}

func TestAgentTrust(t *testing.T) {
	t.Run("cert-manager: ca.crt trusted, the certificate names the agent Service", func(t *testing.T) {
		dir, _ := writeCert(t, "macvirt-webhook-service.macvirt-system.svc", "macvirt-agent.macvirt-system.svc")
		if err := os.WriteFile(filepath.Join(dir, "ca.crt"), []byte("CA"), 0o600); err != nil {
			t.Fatal(err)
		}
		ca, name, err := agentTrust(dir, defaultAgentEndpoint(""))
		if err != nil || string(ca) != "CA" || name != "" {
			t.Fatalf("got ca %q, server name %q, err %v; want the ca.crt and no server name", ca, name, err)
		}
	})
	t.Run("OLM: no ca.crt, the certificate names the webhook Service", func(t *testing.T) {
		dir, crt := writeCert(t, "macvirt-controller-manager-service.operators", "macvirt-controller-manager-service.operators.svc")
		ca, name, err := agentTrust(dir, defaultAgentEndpoint("operators"))
		if err != nil {
			t.Fatal(err)
		}
		if string(ca) != string(crt) {
			t.Error("without ca.crt, agents should trust the serving certificate itself")
		}
		if name != "macvirt-controller-manager-service.operators" {
			t.Errorf("server name %q, want the certificate's first DNS name", name)
		}
	})
	for endpoint, want := range map[string]string{
		"http://macvirt-agent.macvirt-system.svc": "not an https:// URL",
		"https://": "not an https:// URL",
	} {
		dir, _ := writeCert(t, "macvirt-agent.macvirt-system.svc")
		if _, _, err := agentTrust(dir, endpoint); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("endpoint %q: err %v, want %q", endpoint, err, want)
		}
	}
	if _, _, err := agentTrust(t.TempDir(), defaultAgentEndpoint("")); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("an empty directory: err %v, want a certificate read error", err)
	}
}

func TestDefaultAgentEndpoint(t *testing.T) {
	for ns, want := range map[string]string{"": "https://macvirt-agent.macvirt-system.svc", "operators": "https://macvirt-agent.operators.svc"} {
		if got := defaultAgentEndpoint(ns); got != want {
			t.Errorf("defaultAgentEndpoint(%q) = %q, want %q", ns, got, want)
		}
	}
}
