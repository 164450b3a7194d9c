// Command domain-hook is macvirt's KubeVirt hook: installed as
// onDefineDomain in KubeVirt's sidecar-shim image, it is run as
//
//	onDefineDomain --vmi <VMI JSON> --domain <domain XML>
//
// and prints the domain with the macOS settings of the VMI's
// macvirt.io/domain-hook annotation applied. Diagnostics go to stderr; any
// error exits non-zero, so a VM never boots with half of its settings.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/macvirt/macvirt/internal/domainhook"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("onDefineDomain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	vmi := fs.String("vmi", "", "the VirtualMachineInstance as JSON")
	domain := fs.String("domain", "", "the libvirt domain XML KubeVirt defined")
	if err := fs.Parse(args); err != nil {
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
