package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/macvirt/macvirt/internal/guestagent"
	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// darwin finds the config disk under /Volumes and asks macOS's own tools.
type darwin struct{}

// A Mac's agent generalises a cloned disk.
var _ guestagent.GeneralizeHost = darwin{}

func newPlatform() (guestagent.Platform, error) { return darwin{}, nil }

// A macOS agent runs tasks (protocol v2).
var _ guestagent.TaskPlatform = darwin{}

// A Mac's agent shuts macOS down when its host asks.
var _ guestagent.Shutdowner = darwin{}

// Shutdown shuts macOS down as root, gracefully: what a person choosing
// Shut Down does, with no dialog.
func (darwin) Shutdown() error {
	out, err := exec.Command("/sbin/shutdown", "-h", "now").CombinedOutput()
	if err != nil {
		return fmt.Errorf("shutdown -h now: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// shareMount is where the agent mounts the Virtualization framework's
// automount shares itself when macOS has not (yet) mounted them at
// /Volumes/My Shared Files.
const shareMount = "/private/var/run/macvirt-shares"

// automountTag is the tag tart's --dir and lume's sharedDirectories give
// their shares (VZVirtioFileSystemDeviceConfiguration.macOSGuestAutomountTag).
const automountTag = "com.apple.virtio-fs.automount"

// ConfigDir is the KubeVirt config disk or the VZ host agent's share
// (guestagent.ConfigDirUnder). The agent starts at boot, as a LaunchDaemon,
// and nothing says macOS mounts the automount shares before a user logs
// in: so, while neither is there, it mounts the share device itself. On a
// KubeVirt Mac there is no such device and the mount fails quietly.
func (darwin) ConfigDir() (string, error) {
	// The run loop and the shutdown watch both look; one mounts.
	configDirMu.Lock()
	defer configDirMu.Unlock()
	if dir, err := guestagent.ConfigDirUnder("/"); dir != "" || err != nil {
		return dir, err
	}
	if err := os.MkdirAll(shareMount, 0o700); err != nil {
		return "", err
	}
	if !isMountPoint(shareMount) {
		if err := exec.Command("/sbin/mount_virtiofs", automountTag, shareMount).Run(); err != nil {
			return "", nil // no share device: a KubeVirt Mac, or a host that shares nothing yet.
		}
	}
	return guestagent.ConfigDirIn(filepath.Join(shareMount, guestprotocol.ConfigShareName))
}

// configDirMu keeps two lookups from mounting the share twice.
var configDirMu sync.Mutex

// isMountPoint says whether something is mounted at dir: its device is not
// its parent's.
func isMountPoint(dir string) bool {
	var st, parent syscall.Stat_t
	if syscall.Stat(dir, &st) != nil || syscall.Stat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

var bootTimeRE = regexp.MustCompile(`sec = (\d+)`)

func (darwin) Facts() (guestagent.Facts, error) {
	var f guestagent.Facts
	out := func(name string, args ...string) (string, error) {
		b, err := exec.Command(name, args...).Output() //nolint:gosec // fixed macOS tools.
		return strings.TrimSpace(string(b)), err
	}
	var err error
	if f.OSVersion, err = out("/usr/bin/sw_vers", "-productVersion"); err != nil {
		return f, fmt.Errorf("sw_vers: %w", err)
	}
	if f.OSBuild, err = out("/usr/bin/sw_vers", "-buildVersion"); err != nil {
		return f, fmt.Errorf("sw_vers: %w", err)
	}
	if f.Hostname, err = os.Hostname(); err != nil {
		return f, err
	}
	if boot, err := out("/usr/sbin/sysctl", "-n", "kern.boottime"); err == nil {
		if m := bootTimeRE.FindStringSubmatch(boot); m != nil {
			if sec, err := strconv.ParseInt(m[1], 10, 64); err == nil {
				f.BootTime = time.Unix(sec, 0).UTC()
			}
		}
	}
	f.SSHHostKeys = guestagent.HostKeys("/etc/ssh")
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return f, err
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.IsGlobalUnicast() && len(f.IPAddresses) < guestprotocol.MaxIPAddresses {
			f.IPAddresses = append(f.IPAddresses, ipn.IP.String())
		}
	}
	return f, nil
}

// SetHostname sets the three names macOS keeps: HostName (the one
// os.Hostname reports), LocalHostName (Bonjour's .local name, which allows no
// dots and at most 63 characters) and ComputerName (shown in Sharing).
func (darwin) SetHostname(name string) error {
	local := strings.ReplaceAll(name, ".", "-")
	if len(local) > 63 {
		local = local[:63]
	}
	for _, set := range [][2]string{{"HostName", name}, {"LocalHostName", local}, {"ComputerName", name}} {
		out, err := exec.Command("/usr/sbin/scutil", "--set", set[0], set[1]).CombinedOutput() //nolint:gosec // a fixed macOS tool; the name is a validated DNS name.
		if err != nil {
			return fmt.Errorf("scutil --set %s: %w: %s", set[0], err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

func (darwin) AuthorizedKeysPath(user string) (string, error) {
	if user == "" || strings.ContainsAny(user, "/.") {
		return "", fmt.Errorf("refusing user name %q", user)
	}
	return filepath.Join("/Users", user, ".ssh", "authorized_keys"), nil
}

// Owner is the owner of the user's home (read without following a
// symlink), which the agent gives the authorized_keys file and its .ssh.
func (darwin) Owner(user string) (int, int, error) {
	info, err := os.Lstat(filepath.Join("/Users", user))
	if err != nil {
		return 0, 0, fmt.Errorf("the home of %s: %w", user, err)
	}
	if !info.IsDir() {
		return 0, 0, fmt.Errorf("the home of %s is not a real directory", user)
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, errors.New("no owner information for the home directory")
	}
	return int(st.Uid), int(st.Gid), nil
}

// TaskDir keeps the agent's task records and each task's output; the
// output of a task is <TaskDir>/<id>/output.log (docs/bootstrap.md).
func (darwin) TaskDir() string { return guestprotocol.MacOSTaskDir }

// TaskUser is root, or a person's account (uid 501 and up, as macOS
// numbers them) with its home under /Users, as the directory service says
// (id(1): uid, primary and supplementary groups).
func (d darwin) TaskUser(name string) (guestagent.TaskUser, error) {
	if name == "" || strings.ContainsAny(name, "/.:") {
		return guestagent.TaskUser{}, fmt.Errorf("refusing user name %q", name)
	}
	ids := func(flag string) ([]int, error) {
		out, err := exec.Command("/usr/bin/id", flag, name).Output() //nolint:gosec // a checked account name.
		if err != nil {
			return nil, fmt.Errorf("id %s %s: %w", flag, name, err)
		}
		var n []int
		for _, f := range strings.Fields(string(out)) {
			v, err := strconv.Atoi(f)
			if err != nil {
				return nil, fmt.Errorf("id %s %s printed %q", flag, name, f)
			}
			n = append(n, v)
		}
		if len(n) == 0 {
			return nil, fmt.Errorf("id %s %s printed nothing", flag, name)
		}
		return n, nil
	}
	uid, err := ids("-u")
	if err != nil {
		return guestagent.TaskUser{}, err
	}
	gid, err := ids("-g")
	if err != nil {
		return guestagent.TaskUser{}, err
	}
	groups, err := ids("-G")
	if err != nil {
		return guestagent.TaskUser{}, err
	}
	if err := guestagent.CheckAccount(name, uid[0], firstPersonUID); err != nil {
		return guestagent.TaskUser{}, err
	}
	home := filepath.Join("/Users", name)
	if name == guestagent.RootUser {
		home = "/var/root"
	}
	return guestagent.TaskUser{Name: name, UID: uid[0], GID: gid[0], Groups: groups, Home: home}, nil
}

// firstPersonUID is the first uid macOS gives a person's account.
const firstPersonUID = 501

// TaskPath: files go where the task says.
func (darwin) TaskPath(path string) string { return path }

// SetClock sets the system clock as date(1) does as root
// (mmddHHMMccyy.ss, in UTC): a Mac restored from saved state wakes with
// the time it was saved at.
func (darwin) SetClock(t time.Time) error {
	out, err := exec.Command("/bin/date", "-u", t.UTC().Format("010215042006.05")).CombinedOutput() //nolint:gosec // a fixed macOS tool and a formatted time.
	if err != nil {
		return fmt.Errorf("date -u: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// RegenerateHostKeys makes the SSH host keys that are missing, as macOS's
// sshd-keygen-wrapper would at sshd's next start.
func (darwin) RegenerateHostKeys() error {
	out, err := exec.Command("/usr/bin/ssh-keygen", "-A").CombinedOutput()
	if err != nil {
		return fmt.Errorf("ssh-keygen -A: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
