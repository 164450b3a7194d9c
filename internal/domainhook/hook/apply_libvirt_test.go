package hook

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/macvirt/macvirt/internal/domainhook/contract"
)

// These tests hand the golden domains to the real libvirt and QEMU. They
// run when the tools are installed (.ci/run installs them); in CI a missing
// tool is a failure, not a skip.

// unavailable stops a test whose tools or setup are missing: a failure in
// CI, a skip elsewhere.
func unavailable(t *testing.T, reason any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(reason)
	}
	t.Skip(reason)
}

func requireTool(t *testing.T, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts libvirtd and QEMU: make test runs it, make test-unit (-short) does not")
	}
	path, err := exec.LookPath(name)
	if err != nil {
		unavailable(t, fmt.Sprintf("%s not found; install libvirt-clients, libvirt-daemon, libvirt-daemon-driver-qemu, qemu-system-x86 and ovmf", name))
	}
	return path
}

// libvirtd is the daemon this package's tests started, if any.
var libvirtd struct {
	once sync.Once
	cmd  *exec.Cmd
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if libvirtd.cmd != nil {
		_ = libvirtd.cmd.Process.Kill()
		_ = libvirtd.cmd.Wait()
	}
	os.Exit(code)
}

const libvirtURI = "qemu:///system"

// qemuUser is the account libvirt's QEMU driver runs QEMU as on Debian.
const qemuUser = "libvirt-qemu"

// kvmUnusable says why QEMU, run by libvirt as qemuUser, cannot open
// /dev/kvm when the device exists, or "" when it can or when there is no
// device (QEMU then emulates with TCG). libvirt probes QEMU as root, finds
// KVM, and then finds its cached capabilities invalid on every later look-up
// ("KVM was enabled when probing ..., but it is not available now"), so each
// conversion re-probes QEMU dozens of times: about two minutes per domain,
// measured on a machine without udev, where /dev/kvm stays root's alone.
func kvmUnusable() string {
	st, err := os.Stat("/dev/kvm")
	if err != nil {
		return ""
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	u, err := user.Lookup(qemuUser)
	if err != nil {
		return ""
	}
	perm := st.Mode().Perm()
	if u.Uid == strconv.FormatUint(uint64(sys.Uid), 10) && perm&0o600 == 0o600 || perm&0o006 == 0o006 {
		return ""
	}
	if gids, err := u.GroupIds(); err == nil && perm&0o060 == 0o060 && slices.Contains(gids, strconv.FormatUint(uint64(sys.Gid), 10)) {
		return ""
	}
	return fmt.Sprintf("/dev/kvm (mode %v, uid %d, gid %d) cannot be opened by %s, so libvirt re-probes QEMU on every call; "+
		"run hack/libvirt-setup.sh as root (it sets /dev/kvm up as udev would: group kvm, mode 0660, %s in group kvm)",
		perm, sys.Uid, sys.Gid, qemuUser, qemuUser)
}

// ensureLibvirtd makes sure a libvirt daemon answers on qemu:///system,
// starting one for the duration of the tests when it is not running (as
// root: .ci/run creates the libvirt-qemu user it needs).
func ensureLibvirtd(t *testing.T, virsh string) {
	t.Helper()
	if reason := kvmUnusable(); reason != "" {
		unavailable(t, reason)
	}
	answers := func() bool { return exec.Command(virsh, "-c", libvirtURI, "uri").Run() == nil }
	if answers() {
		return
	}
	daemon := requireTool(t, "libvirtd")
	libvirtd.once.Do(func() {
		if os.Geteuid() != 0 {
			libvirtd.err = errors.New("libvirtd is not running and only root can start it here")
			return
		}
		for _, dir := range []string{"/var/run/libvirt", "/var/log/libvirt", "/var/lib/libvirt"} {
			if err := os.MkdirAll(dir, 0o750); err != nil {
				libvirtd.err = err
				return
			}
		}
		libvirtd.cmd = exec.Command(daemon)
		if libvirtd.err = libvirtd.cmd.Start(); libvirtd.err != nil {
			libvirtd.cmd = nil
			return
		}
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if answers() {
				return
			}
		}
		libvirtd.err = errors.New("libvirtd started but did not answer within 30s")
	})
	if libvirtd.err != nil {
		unavailable(t, libvirtd.err)
	}
}

// transports are the domains each libvirt test checks: Apply's golden
// domain, and what KubeVirt's Plugin pipeline made with the CEL Plugin and
// with the hook binary as the Plugin's sidecar (plugin_test.go).
var transports = []string{"golden", "cel", "sidecar"}

// domainFile is the domain of a variant made by a transport.
func domainFile(transport, name string) string {
	if transport == "golden" {
		return goldenPath(name)
	}
	return pluginOutput(transport, name)
}

// readDomain parses a domain file, after its generated-file comment.
func readDomain(t *testing.T, path string) *libvirtxml.Domain {
	t.Helper()
	b, err := os.ReadFile(path) //nolint:gosec // test-owned paths.
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if i := strings.Index(s, "-->"); strings.HasPrefix(s, "<!--") && i > 0 {
		s = s[i+3:]
	}
	d := &libvirtxml.Domain{}
	if err := d.Unmarshal(s); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return d
}

func TestGoldenDomainsValidateAgainstLibvirtSchema(t *testing.T) {
	validate := requireTool(t, "virt-xml-validate")
	for _, transport := range transports {
		for _, v := range variants {
			t.Run(transport+"/"+v.name, func(t *testing.T) {
				path := domainFile(transport, v.name)
				out, err := exec.Command(validate, path, "domain").CombinedOutput() //nolint:gosec // test-owned paths.
				if err != nil {
					t.Errorf("virt-xml-validate %s: %v\n%s", path, err, out)
				}
			})
		}
	}
}

// nativeArgs asks libvirt for the QEMU command line of a golden domain.
// libvirt reads the capabilities of the domain's emulator, so a domain that
// names another emulator (the override variant) is converted with this
// machine's QEMU in its place, and without /dev/kvm as a TCG domain.
func nativeArgs(t *testing.T, path string) string {
	t.Helper()
	virsh := requireTool(t, "virsh")
	qemu := requireTool(t, "qemu-system-x86_64")
	ensureLibvirtd(t, virsh)
	d := readDomain(t, path)
	d.Devices.Emulator = qemu
	if _, err := os.Stat("/dev/kvm"); err != nil {
		d.Type = "qemu"
		// TCG cannot pass the host CPU through; libvirt's own <cpu> is
		// then the emulator's maximum. The -cpu argument the hook adds,
		// which QEMU takes over libvirt's, is what is checked.
		if d.CPU != nil && (d.CPU.Mode == "host-passthrough" || d.CPU.Mode == "host-model") {
			d.CPU.Mode = "maximum"
		}
	}
	xml, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(file, []byte(xml), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(virsh, "-c", libvirtURI, "domxml-to-native", "qemu-argv", file).CombinedOutput() //nolint:gosec // test-owned paths.
	if err != nil {
		t.Fatalf("virsh domxml-to-native %s: %v\n%s", path, err, out)
	}
	return string(out)
}

func TestLibvirtTurnsGoldenDomainsIntoTheExpectedQEMUArguments(t *testing.T) {
	for _, transport := range transports {
		for _, v := range variants {
			t.Run(transport+"/"+v.name, func(t *testing.T) { checkNativeArgs(t, transport, v.name, v.mutate) })
		}
	}
}

func checkNativeArgs(t *testing.T, transport, name string, mutate func(*contract.Config)) {
	cfg := baseConfig()
	mutate(cfg)
	argv := nativeArgs(t, domainFile(transport, name))
	qemuModel := cfg.CPU.Model
	if qemuModel == "host-passthrough" {
		qemuModel = "host"
	}
	cpu := qemuModel + ",vendor=GenuineIntel,+invtsc,vmware-cpuid-freq=on"
	// QEMU's option syntax doubles a comma inside a value.
	product := strings.ReplaceAll(cfg.SMBIOS.Product, ",", ",,")
	want := []string{"-cpu " + cpu, "-smbios 'type=2,manufacturer=Apple Inc.,product=" + product + ",serial=" + cfg.SMBIOS.BoardSerial + "'",
		"serial=" + cfg.SMBIOS.Serial, "uuid=" + strings.ToLower(cfg.SMBIOS.UUID), `"driver":"usb-kbd"`}
	switch cfg.NIC.Model {
	case "virtio":
		want = append(want, `"driver":"virtio-net-pci`)
	default:
		want = append(want, `"driver":"`+cfg.NIC.Model+`"`)
	}
	if cfg.SMC.Mode == "AppleSMC" {
		want = append(want, "isa-applesmc,osk="+appleOSK)
	}
	if cfg.Display.Model == "vmware-svga" {
		want = append(want, `"driver":"vmware-svga"`)
	}
	for _, w := range want {
		if !strings.Contains(argv, w) && !strings.Contains(strings.ToLower(argv), strings.ToLower(w)) {
			t.Errorf("QEMU arguments lack %s:\n%s", w, argv)
		}
	}
}

// TestQEMUStartsTheAppleSMCVariantAndEveryReleasesDefaultHardware starts
// QEMU (TCG, OVMF, no disk) with the CPU, SMBIOS and Apple SMC arguments of
// the AppleSMC golden domain, and of each macOS release's default
// hardware, with the domain's NIC model, and asks it over QMP which devices
// it built. (The SMBIOS product each passes is checked on libvirt's command
// line, in TestLibvirtTurnsGoldenDomainsIntoTheExpectedQEMUArguments.)
func TestQEMUStartsTheAppleSMCVariantAndEveryReleasesDefaultHardware(t *testing.T) {
	names := []string{"applesmc-vmware-svga-emulator"}
	for _, v := range releaseVariants() {
		names = append(names, v.name)
	}
	for _, transport := range []string{"golden", "cel"} {
		for _, name := range names {
			t.Run(transport+"/"+name, func(t *testing.T) { startQEMU(t, domainFile(transport, name)) })
		}
	}
}

// startQEMU starts QEMU with the arguments of a domain file.
func startQEMU(t *testing.T, path string) {
	qemu := requireTool(t, "qemu-system-x86_64")
	ovmf := ""
	for _, f := range []string{"/usr/share/OVMF/OVMF_CODE_4M.fd", "/usr/share/OVMF/OVMF_CODE.fd"} {
		if _, err := os.Stat(f); err == nil {
			ovmf = f
			break
		}
	}
	if ovmf == "" {
		requireTool(t, "ovmf-not-installed")
	}
	d := readDomain(t, path)
	args := []string{"-machine", "q35,accel=tcg", "-nodefaults", "-no-user-config", "-display", "none", "-m", "1024",
		"-drive", "if=pflash,format=raw,readonly=on,file=" + ovmf}
	for _, a := range d.QEMUCommandline.Args {
		args = append(args, a.Value)
	}
	// The QEMU device libvirt gives a NIC model (qemuBuildNicDevProps):
	// the virtio models KubeVirt writes are PCI devices of their own names.
	nic := d.Devices.Interfaces[0].Model.Type
	switch nic {
	case "virtio", "virtio-non-transitional", "virtio-transitional":
		nic = strings.Replace(nic, "virtio", "virtio-net-pci", 1)
	}
	args = append(args, "-netdev", "user,id=net0", "-device", nic+",netdev=net0",
		"-device", "qemu-xhci,id=usb", "-device", "usb-kbd", "-qmp", "stdio")
	cmd := exec.Command(qemu, args...) //nolint:gosec // arguments come from the test's golden file.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
	}()

	replies := make(chan map[string]any, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				if _, event := m["event"]; !event {
					replies <- m
				}
			}
		}
		close(replies)
	}()
	next := func() map[string]any {
		t.Helper()
		select {
		case m, ok := <-replies:
			if !ok {
				t.Fatalf("QEMU closed QMP: %s", stderr.String())
			}
			return m
		case <-time.After(time.Minute):
			t.Fatalf("no QMP reply within a minute: %s", stderr.String())
		}
		return nil
	}
	send := func(cmd string) {
		t.Helper()
		if _, err := fmt.Fprintln(stdin, cmd); err != nil {
			t.Fatal(err)
		}
	}
	next() // greeting
	send(`{"execute":"qmp_capabilities"}`)
	next()
	send(`{"execute":"human-monitor-command","arguments":{"command-line":"info qtree"}}`)
	reply := next()
	qtree, _ := reply["return"].(string)
	devs := []string{"dev: " + nic, "dev: usb-kbd"}
	for _, a := range d.QEMUCommandline.Args {
		if strings.Contains(a.Value, "isa-applesmc") {
			devs = append(devs, "dev: isa-applesmc")
		}
	}
	for _, dev := range devs {
		if !strings.Contains(qtree, dev) {
			t.Errorf("QEMU did not build %q; info qtree:\n%s\nstderr: %s", dev, qtree, stderr.String())
		}
	}
	for _, line := range strings.Split(qtree, "\n") {
		for _, dev := range devs {
			if strings.Contains(line, dev) {
				t.Logf("QEMU built %s", strings.TrimSpace(line))
			}
		}
	}

	send(`{"execute":"quit"}`)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("QEMU exited with %v after quit: %s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Error("QEMU did not quit")
	}
}
