// Command macvirt-agent is macvirt's guest agent. It runs inside macOS as a
// LaunchDaemon (see docs/guest-agent-install.md), reads the machine's config
// disk, tells the operator the guest has booted, and writes the bound
// claim's SSH keys. The protocol is docs/guest-agent.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/macvirt/macvirt/internal/guestagent"
)

func main() {
	version := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *version {
		fmt.Println(guestagent.Version)
		return
	}
	p, err := newPlatform()
	if err != nil {
		log.Fatalf("macvirt-agent: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log.Printf("macvirt-agent %s starting", guestagent.Version)
	if err := guestagent.Run(ctx, p, log.Printf); err != nil {
		log.Printf("macvirt-agent: %v", err)
		stop()
		os.Exit(1) //nolint:gocritic // stop ran.
	}
}
