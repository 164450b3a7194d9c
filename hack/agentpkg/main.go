/*
Copyright 2026 The macvirt Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Command agentpkg builds the guest agent's macOS installer package (a flat
// .pkg) from the darwin agent binary and its LaunchDaemon, on any OS:
//
//	go run ./hack/agentpkg -agent bin/macvirt-agent \
//	    -launch-daemon cmd/macvirt-agent/io.macvirt.agent.plist \
//	    -version 0.1.0 -out bin/macvirt-agent-0.1.0.pkg
//
// Every time stamp in the package is -mtime, SOURCE_DATE_EPOCH when unset,
// else 0, so the same inputs give the same bytes.
package main

import (
	"bytes"
	"debug/macho"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/macvirt/macvirt/internal/agentpkg"
)

type options struct {
	Agent             string
	LaunchDaemon      string
	Version           string
	Identifier        string
	HostArchitectures string
	Out               string
	ModTime           int64
}

func main() {
	var o options
	flag.StringVar(&o.Agent, "agent", "bin/macvirt-agent", "The macOS agent binary (make build-agent).")
	flag.StringVar(&o.LaunchDaemon, "launch-daemon", "cmd/macvirt-agent/io.macvirt.agent.plist", "The LaunchDaemon property list that runs the agent.")
	flag.StringVar(&o.Version, "version", "", "The package version (the agent's release).")
	flag.StringVar(&o.Identifier, "identifier", "io.macvirt.agent", "The package identifier.")
	flag.StringVar(&o.HostArchitectures, "host-architectures", agentpkg.DefaultHostArchitectures, "The architectures the agent binary runs on natively, comma-separated.")
	flag.StringVar(&o.Out, "out", "", "Where to write the .pkg.")
	flag.Int64Var(&o.ModTime, "mtime", -1, "The time stamp of every file, in seconds since the epoch (default $SOURCE_DATE_EPOCH, else 0).")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "agentpkg:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.Version == "" || o.Out == "" {
		return errors.New("-version and -out are required")
	}
	mtime, err := modTime(o.ModTime, os.Getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		return err
	}
	agent, err := os.ReadFile(o.Agent)
	if err != nil {
		return err
	}
	if err := checkMachO(agent); err != nil {
		return fmt.Errorf("%s: %w", o.Agent, err)
	}
	daemon, err := os.ReadFile(o.LaunchDaemon)
	if err != nil {
		return err
	}
	pkg, err := agentpkg.Build(agentpkg.Options{
		Identifier:        o.Identifier,
		Version:           o.Version,
		Agent:             agent,
		LaunchDaemon:      daemon,
		ModTime:           mtime,
		HostArchitectures: o.HostArchitectures,
	})
	if err != nil {
		return err
	}
	// Written whole, then renamed, so an interrupted build leaves no
	// truncated package behind.
	tmp := o.Out + ".tmp"
	if err := os.WriteFile(tmp, pkg, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, o.Out); err != nil {
		return err
	}
	fmt.Printf("%s: %s %s, %d bytes\n", filepath.Clean(o.Out), o.Identifier, o.Version, len(pkg))
	return nil
}

// checkMachO refuses an agent that is not a macOS executable (make
// build-agent cross-compiles it), such as a binary built for the host.
func checkMachO(agent []byte) error {
	if f, err := macho.NewFile(bytes.NewReader(agent)); err == nil {
		if f.Type != macho.TypeExec {
			return fmt.Errorf("a Mach-O file of type %v, not an executable", f.Type)
		}
		return nil
	}
	if _, err := macho.NewFatFile(bytes.NewReader(agent)); err != nil {
		return errors.New("not a macOS (Mach-O) binary; build it with make build-agent")
	}
	return nil
}

// modTime is -mtime if set, else SOURCE_DATE_EPOCH if set, else the epoch.
func modTime(flagValue int64, sourceDateEpoch string) (time.Time, error) {
	switch {
	case flagValue >= 0:
		return time.Unix(flagValue, 0), nil
	case sourceDateEpoch != "":
		s, err := strconv.ParseInt(sourceDateEpoch, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", sourceDateEpoch, err)
		}
		return time.Unix(s, 0), nil
	default:
		return time.Unix(0, 0), nil
	}
}
