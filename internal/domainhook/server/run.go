package server

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/macvirt/macvirt/internal/domainhook/hook"
)

// Run is the hook binary: onDefineDomain as KubeVirt's sidecar-shim runs
// it (--vmi, --domain: the changed domain on stdout), or, with
// --plugin-socket, MutateDomain served for a Plugin until ctx ends. It
// returns the exit code: 2 for bad arguments, 1 for a failure, which keeps
// a VM from booting with half of its settings.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
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
		return serve(ctx, *socket, Options{EmulatorPath: *emulator}, stderr)
	}
	if *emulator != "" {
		_, _ = fmt.Fprintln(stderr, "macvirt domain hook: --emulator-path goes with --plugin-socket")
		return 2
	}
	if *vmi == "" || *domain == "" || fs.NArg() > 0 {
		_, _ = fmt.Fprintln(stderr, "macvirt domain hook: usage: onDefineDomain --vmi <VMI JSON> --domain <domain XML>")
		return 2
	}
	cfg, err := hook.ConfigFromVMI([]byte(*vmi))
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "macvirt domain hook:", err)
		return 1
	}
	out, err := hook.Apply(*domain, cfg)
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
func serve(ctx context.Context, socket string, opts Options, stderr io.Writer) int {
	l, err := Listen(socket)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "macvirt domain hook:", err)
		return 1
	}
	srv := NewServer(opts)
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
