package guestagent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// ConfigDirUnder finds the machine's configuration under root, the guest's
// "/": the config disk KubeVirt attaches (/Volumes/MACVIRTAGENT), or the
// share an Apple-silicon host agent gives its VM, which macOS shows at
// /Volumes/My Shared Files/macvirt. It returns "" while neither holds a
// token.
func ConfigDirUnder(root string) (string, error) {
	for _, dir := range []string{
		filepath.Join(root, "Volumes", guestprotocol.ConfigVolumeLabel),
		filepath.Join(root, guestprotocol.SharedFilesDir, guestprotocol.ConfigShareName),
	} {
		if found, err := ConfigDirIn(dir); found != "" || err != nil {
			return found, err
		}
	}
	return "", nil
}

// ConfigDirIn returns dir when it holds a configuration (its token file),
// "" when it does not (yet).
func ConfigDirIn(dir string) (string, error) {
	if _, err := os.Stat(filepath.Join(dir, guestprotocol.KeyToken)); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", nil
		}
		return "", err
	}
	return dir, nil
}

// ShutdownRequested says whether the host agent asked, through the share in
// dir, that macOS shut down.
func ShutdownRequested(dir string) bool {
	if dir == "" {
		return false
	}
	_, err := os.Stat(filepath.Join(dir, guestprotocol.ShutdownFile))
	return err == nil
}

// Shutdowner is a Platform that can shut the guest's OS down.
type Shutdowner interface {
	// Shutdown shuts the OS down now, gracefully (shutdown -h now).
	Shutdown() error
}

// shutdownPoll is how often the agent looks for the host's request.
const shutdownPoll = 2 * time.Second

// WatchShutdown shuts the guest down, once, when the host agent asks
// through the configuration's share, and returns then or when ctx ends.
func WatchShutdown(ctx context.Context, p Platform, logf func(string, ...any)) {
	s, ok := p.(Shutdowner)
	if !ok {
		return
	}
	t := time.NewTicker(shutdownPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Only the host agent's share carries the request: never the
		// KubeVirt config disk, whose Secret others may write.
		dir, err := p.ConfigDir()
		if err != nil || filepath.Base(dir) != guestprotocol.ConfigShareName || !ShutdownRequested(dir) {
			continue
		}
		logf("the host asks macOS to shut down; shutting down")
		if err := s.Shutdown(); err != nil {
			logf("shutting down: %v; asked again in %s", err, shutdownPoll)
			continue
		}
		return
	}
}
