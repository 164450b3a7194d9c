package claim

import (
	"fmt"
	"strings"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// Connection defaults until the guest agent reports them.
const (
	defaultSSHPort = 22
	defaultSSHUser = "admin"
)

func connectionSecretName(c *macvirtv1alpha1.MacClaim) string { return c.Name + "-connection" }

// knownHosts is an OpenSSH known_hosts file for the connection: one line
// per host key, the host in brackets with its port when that is not 22.
// Empty until the guest agent has reported the keys.
func knownHosts(conn *macvirtv1alpha1.ClaimConnection) string {
	name := func(host string, port int32) string {
		if port != 0 && port != 22 {
			return fmt.Sprintf("[%s]:%d", host, port)
		}
		return host
	}
	// One line per key, naming the machine every way the connection does:
	// the Service's name, the address, and the external address.
	var names []string
	if conn.Host != "" {
		names = append(names, name(conn.Host, conn.SSHPort))
	}
	names = append(names, name(conn.Address, conn.SSHPort))
	if ext := conn.External; ext != nil && ext.Address != "" {
		names = append(names, name(ext.Address, ext.SSHPort))
	}
	hosts := strings.Join(names, ",")
	var b strings.Builder
	for _, k := range conn.HostKeys {
		b.WriteString(hosts + " " + k + "\n")
	}
	return b.String()
}

// secretWriteError is a write of the connection Secret that failed, with
// the condition reason it shows as on the claim.
type secretWriteError struct {
	reason string
	err    error
}

func (e *secretWriteError) Error() string { return e.err.Error() }

func (e *secretWriteError) Unwrap() error { return e.err }
