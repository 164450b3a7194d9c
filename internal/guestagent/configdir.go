package guestagent

import (
	"errors"
	"os"
	"path/filepath"

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
