// Command domain-hook is macvirt's KubeVirt hook: installed as
// onDefineDomain in KubeVirt's sidecar-shim image, it is run as
//
//	onDefineDomain --vmi <VMI JSON> --domain <domain XML>
//
// and prints the domain with the macOS settings of the VMI's
// macvirt.io/domain-hook annotation applied. Diagnostics go to stderr; any
// error exits non-zero, so a VM never boots with half of its settings.
//
// In a KubeVirt Plugin's sidecar (the plugin-sidecar transport) it runs as
//
//	onDefineDomain --plugin-socket /var/run/kubevirt-plugin/macvirt-macos/hook.sock [--emulator-path PATH]
//
// and serves the same change as MutateDomain on that socket until it is
// stopped (SIGTERM). There the emulator comes from --emulator-path (the
// operator's setting), never from the VMI.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/macvirt/macvirt/internal/domainhook"
	"github.com/macvirt/macvirt/internal/hookserver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("onDefineDomain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	vmi := fs.String("vmi", "", "the VirtualMachineInstance as JSON")
	domain := fs.String("domain", "", "the libvirt domain XML KubeVirt defined")
	socket := fs.String("plugin-socket", "", "serve KubeVirt's plugin DomainHookService (MutateDomain) on this unix socket")
	emulator := fs.String("emulator-path", "", "with --plugin-socket: the QEMU binary every domain uses (the operator's --emulator-path); a VMI's own is ignored")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *socket != "" {
		if *vmi != "" || *domain != "" || fs.NArg() > 0 {
			_, _ = fmt.Fprintln(stderr, "macvirt domain hook: --plugin-socket takes no other arguments")
			return 2
		}
		return serve(ctx, *socket, hookserver.Options{EmulatorPath: *emulator}, stderr)
	}
	if *emulator != "" {
		_, _ = fmt.Fprintln(stderr, "macvirt domain hook: --emulator-path goes with --plugin-socket")
		return 2
	}
	if *vmi == "" || *domain == "" || fs.NArg() > 0 {
		_, _ = fmt.Fprintln(stderr, "macvirt domain hook: usage: onDefineDomain --vmi <VMI JSON> --domain <domain XML>")
		return 2
	}
	cfg, err := domainhook.ConfigFromVMI([]byte(*vmi))
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "macvirt domain hook:", err)
		return 1
	}
	out, err := domainhook.Apply(*domain, cfg)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "macvirt domain hook:", err)
		return 1
	}
	if _, err := io.WriteString(stdout, out); err != nil {
		_, _ = fmt.Fprintln(stderr, "macvirt domain hook: writing the domain:", err)
		return 1
	}
	return 0
}

// serve answers MutateDomain on socket until ctx ends.
func serve(ctx context.Context, socket string, opts hookserver.Options, stderr io.Writer) int {
	l, err := hookserver.Listen(socket)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "macvirt domain hook:", err)
		return 1
	}
	srv := hookserver.NewServer(opts)
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	_, _ = fmt.Fprintln(stderr, "macvirt domain hook: serving MutateDomain on", socket)
	if err := srv.Serve(l); err != nil {
		_, _ = fmt.Fprintln(stderr, "macvirt domain hook:", err)
		return 1
	}
	return 0
}
