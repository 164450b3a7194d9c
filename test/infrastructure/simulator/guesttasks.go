package simulator

import (
	"os"
	"path/filepath"

	"github.com/macvirt/macvirt/internal/guestagent"
)

// A simulated guest runs the tasks the operator hands it with the real
// agent's task runner (guestagent.Tasks): the script under /bin/sh, its files
// placed, its environment set, its timeout enforced, once per binding,
// remembered on the guest's disk across agent restarts. What it does not
// imitate: macOS's users (every task runs as the simulator's own user, with
// a home of the user's name in the guest's directory, and no root),
// permissions and ownership, and launchd. A file's path is taken under the
// guest's directory, never the host's root.

// GuestDisk is a simulated guest's disk: the directory of its system
// volume's content (volumecontent.go), or of a fake Mac's VM's guest
// (test/harness), where the same task runner runs the same way.
type GuestDisk struct{ dir string }

// NewGuestDisk is the guest disk in dir, holding the golden image's files
// (Options.GuestFiles, Simulator.GuestFiles) unless it holds them already:
// the disk of a VM cloned from that image.
func NewGuestDisk(dir string, golden map[string]GuestFile) (*GuestDisk, error) {
	marker := filepath.Join(dir, ".macvirt-golden-image")
	if _, err := os.Stat(marker); err == nil {
		return &GuestDisk{dir: dir}, nil
	}
	if err := writeGuestFiles(dir, golden); err != nil {
		return nil, err
	}
	return &GuestDisk{dir: dir}, os.WriteFile(marker, nil, 0o600)
}

// GuestFile is a file of a simulated guest's golden image.
type GuestFile struct {
	Mode    os.FileMode
	Content []byte
}

// TaskDir implements guestagent.TaskPlatform's directory of tasks.
func (d *GuestDisk) TaskDir() string {
	return filepath.Join(d.dir, "var", "db", "macvirt-agent", "tasks")
}

// TaskUser is the simulator's own user, with a home named for user.
func (d *GuestDisk) TaskUser(name string) (guestagent.TaskUser, error) {
	home := filepath.Join(d.dir, "Users", name)
	if err := os.MkdirAll(home, 0o750); err != nil {
		return guestagent.TaskUser{}, err
	}
	return guestagent.TaskUser{Name: name, UID: os.Getuid(), GID: os.Getgid(), Home: home}, nil
}

// TaskPath is path under the guest's directory.
func (d *GuestDisk) TaskPath(path string) string {
	return filepath.Join(d.dir, filepath.Clean("/"+path))
}
