package guestagent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

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

// shutdownPlatform is a platform whose config is in dir and that counts
// the shutdowns it was asked for.
type shutdownPlatform struct {
	Platform
	dir   string
	calls chan struct{}
}

func (p shutdownPlatform) ConfigDir() (string, error) { return p.dir, nil }
func (p shutdownPlatform) Shutdown() error {
	p.calls <- struct{}{}
	return nil
}

func TestTheAgentShutsDownOnceWhenTheHostAsks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), guestprotocol.ConfigShareName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	p := shutdownPlatform{dir: dir, calls: make(chan struct{}, 4)}
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { WatchShutdown(ctx, p, t.Logf); close(done) }()
	select {
	case <-p.calls:
		t.Fatal("shut down with nothing asked")
	case <-time.After(2*shutdownPoll + 500*time.Millisecond):
	}
	if err := os.WriteFile(filepath.Join(dir, guestprotocol.ShutdownFile), []byte("now"), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.calls:
	case <-time.After(time.Minute):
		t.Fatal("no shutdown within a minute of the host's request")
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the watcher went on after shutting down")
	}
	if len(p.calls) != 0 {
		t.Errorf("shut down %d more times", len(p.calls))
	}
}

// Run watches for the host's request (it starts WatchShutdown), and never
// on a KubeVirt config disk, whose Secret the host agent does not write.
func TestRunShutsDownOnTheSharesRequestOnly(t *testing.T) {
	for name, tc := range map[string]struct {
		dir  string
		want bool
	}{
		"the host agent's share": {guestprotocol.ConfigShareName, true},
		"KubeVirt's config disk": {guestprotocol.ConfigVolumeLabel, false},
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), tc.dir)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, guestprotocol.ShutdownFile), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			p := shutdownPlatform{dir: dir, calls: make(chan struct{}, 4)}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { _ = Run(ctx, p, t.Logf); close(done) }()
			defer func() { cancel(); <-done }()
			select {
			case <-p.calls:
				if !tc.want {
					t.Fatal("shut down on a file of the config disk")
				}
			case <-time.After(2*shutdownPoll + time.Second):
				if tc.want {
					t.Fatal("Run did not shut down on the host's request")
				}
			}
		})
	}
}
