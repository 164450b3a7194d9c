// Package localnet finds what the processes macvirt starts on this machine
// (the operator's local webhook and agent servers, a test cluster's
// KubeVirt) need from its network.
package localnet

import (
	"fmt"
	"net"
)

// FreePort returns a TCP port free on host right now.
func FreePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("finding a free port on %s: %w", host, err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}
