package server

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/macvirt/macvirt/internal/domainhook/contract"
	"github.com/macvirt/macvirt/internal/domainhook/contract/contracttest"
)

func TestOnDefineDomain(t *testing.T) {
	domain, err := os.ReadFile(filepath.Join("..", "hook", "testdata", "kubevirt", "default.domain.xml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := contracttest.Config()
	cfg.CPU.Model = "Penryn"
	vmi := vmiJSON(t, cfg)

	var stdout, stderr bytes.Buffer
	if code := Run(context.Background(), []string{"--vmi", string(vmi), "--domain", string(domain)}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "<domain") || !strings.Contains(stdout.String(), "Penryn,vendor=GenuineIntel") || stderr.Len() != 0 {
		t.Errorf("stdout %q, stderr %q", stdout.String(), stderr.String())
	}

	for name, tc := range map[string]struct {
		args []string
		code int
		want string
	}{
		"no arguments":    {nil, 2, "usage: onDefineDomain"},
		"unknown flag":    {[]string{"--vmi", "{}", "--domain", "<domain/>", "--extra"}, 2, "flag provided but not defined"},
		"no annotation":   {[]string{"--vmi", `{"metadata":{"name":"m","namespace":"ns"}}`, "--domain", string(domain)}, 1, "has no macvirt.io/domain-hook annotation"},
		"malformed XML":   {[]string{"--vmi", string(vmi), "--domain", "<domain>"}, 1, "parsing the domain XML"},
		"malformed VMI":   {[]string{"--vmi", "{", "--domain", string(domain)}, 1, "parsing the VMI JSON"},
		"stray arguments": {[]string{"--vmi", string(vmi), "--domain", string(domain), "more"}, 2, "usage"},
	} {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := Run(context.Background(), tc.args, &stdout, &stderr); code != tc.code || !strings.Contains(stderr.String(), tc.want) || stdout.Len() != 0 {
				t.Errorf("exit %d (want %d), stderr %q (want %q), stdout %q", code, tc.code, stderr.String(), tc.want, stdout.String())
			}
		})
	}
}

// vmiJSON is a VMI carrying cfg in its annotation, as virt-launcher sends it.
func vmiJSON(t *testing.T, cfg *contract.Config) []byte {
	t.Helper()
	raw, err := cfg.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	vmi, err := json.Marshal(map[string]any{"metadata": map[string]any{"name": "m", "namespace": "ns",
		"annotations": map[string]string{contract.Annotation: raw}}})
	if err != nil {
		t.Fatal(err)
	}
	return vmi
}
