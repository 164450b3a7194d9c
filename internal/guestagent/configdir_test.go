package guestagent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/macvirt/macvirt/internal/guestprotocol"
)

func TestConfigDirUnderFindsTheDiskAndTheShare(t *testing.T) {
	for name, tc := range map[string]struct {
		files []string
		want  string
	}{
		"nothing yet":                      {nil, ""},
		"KubeVirt's config disk":           {[]string{"Volumes/MACVIRTAGENT/token"}, "Volumes/MACVIRTAGENT"},
		"a VZ host agent's share":          {[]string{"Volumes/My Shared Files/macvirt/token"}, "Volumes/My Shared Files/macvirt"},
		"the share, not yet written":       {[]string{"Volumes/My Shared Files/macvirt/endpoint"}, ""},
		"another share only":               {[]string{"Volumes/My Shared Files/build/token"}, ""},
		"a share mounted without its name": {[]string{"Volumes/My Shared Files/token"}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			for _, f := range tc.files {
				p := filepath.Join(root, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := ConfigDirUnder(root)
			if err != nil {
				t.Fatal(err)
			}
			want := ""
			if tc.want != "" {
				want = filepath.Join(root, tc.want)
			}
			if got != want {
				t.Errorf("ConfigDirUnder = %q, want %q", got, want)
			}
		})
	}
	if guestprotocol.SharedFilesDir != "/Volumes/My Shared Files" {
		t.Errorf("macOS mounts the automount tag's shares at /Volumes/My Shared Files, not %q", guestprotocol.SharedFilesDir)
	}
}
