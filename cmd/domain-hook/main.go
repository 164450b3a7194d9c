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
	"os"
	"os/signal"
	"syscall"

	"github.com/macvirt/macvirt/internal/domainhook/server"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := server.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
