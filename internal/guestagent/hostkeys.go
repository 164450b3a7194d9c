package guestagent

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// HostKeys reads the SSH host public keys in dir (ssh_host_*_key.pub, as
// sshd keeps them in /etc/ssh) as "<type> <base64>", in file-name order and
// without comments. Unreadable files and lines that are not keys are
// skipped: a guest without sshd host keys reports none.
func HostKeys(dir string) []string {
	files, err := filepath.Glob(filepath.Join(dir, "ssh_host_*_key.pub"))
	if err != nil {
		return nil
	}
	slices.Sort(files)
	var keys []string
	for _, f := range files {
		b, err := os.ReadFile(f) //nolint:gosec // sshd's own public key files.
		if err != nil {
			continue
		}
		fields := strings.Fields(string(b))
		if len(fields) < 2 {
			continue
		}
		k := fields[0] + " " + fields[1]
		hb := guestprotocol.Heartbeat{SSHHostKeys: []string{k}}
		if hb.ValidHostKeys() != nil || len(keys) == guestprotocol.MaxHostKeys {
			continue
		}
		keys = append(keys, k)
	}
	return keys
}
