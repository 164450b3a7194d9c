package guestagent

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestHostKeysReadsSSHDsPublicKeys(t *testing.T) {
	const ed = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE0Ow6DQP+//k6m8zioktAbUb0Su/x93h9rtsTyq+kAs"
	dir := t.TempDir()
	for name, content := range map[string]string{
		"ssh_host_ed25519_key.pub": ed + " root@mac.local\n", // the comment is dropped
		"ssh_host_ed25519_key":     "-----BEGIN OPENSSH PRIVATE KEY-----\n",
		"ssh_host_rsa_key.pub":     "ssh-rsa bm90IGEga2V5\n", // not a key: skipped
		"ssh_host_dsa_key.pub":     "\n",
		"ssh_config":               "Host *\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if got := HostKeys(dir); !slices.Equal(got, []string{ed}) {
		t.Errorf("HostKeys = %q, want only the ed25519 key without its comment", got)
	}
	if got := HostKeys(filepath.Join(dir, "missing")); got != nil {
		t.Errorf("HostKeys of a missing directory = %q, want none", got)
	}
}
