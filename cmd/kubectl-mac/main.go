// Command kubectl-mac is the kubectl mac plugin for macvirt's tenants:
// claim a Mac, wait for it, ssh or Screen Share to it, release it, with the
// user's own kubeconfig and RBAC. Install it with
//
//	go install github.com/macvirt/macvirt/cmd/kubectl-mac@latest
//
// and run it as kubectl mac.
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/macvirt/macvirt/internal/kubectlmac"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := kubectlmac.Main(ctx, os.Args[1:], kubectlmac.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	stop()
	os.Exit(code)
}
