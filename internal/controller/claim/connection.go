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

// connectionSecretName is the Secret the claim's connection is written to:
// the one it asks for, or the one an older operator wrote for it (kept up
// to date for it); empty when there is none.
func connectionSecretName(c *macvirtv1alpha1.MacClaim) string {
	if ref := c.Spec.WriteConnectionSecretToRef; ref != nil {
		return ref.Name
	}
	return c.Status.ConnectionSecretName
}

// connectionData is what the connection Secret holds: the status's
// connection, as files.
func connectionData(conn *macvirtv1alpha1.ClaimConnection) map[string][]byte {
	host := conn.Host
	if host == "" {
		host = conn.Address
	}
	data := map[string][]byte{
		"host":        []byte(host),
		"port":        []byte(fmt.Sprint(conn.SSHPort)),
		"user":        []byte(conn.User),
		"known_hosts": []byte(knownHosts(conn)),
	}
	if conn.Address != "" {
		data["address"] = []byte(conn.Address)
	}
	if conn.VNCPort != 0 {
		data["vnc-port"] = []byte(fmt.Sprint(conn.VNCPort))
	}
	if ext := conn.External; ext != nil {
		if ext.Address != "" {
			data["external-address"] = []byte(ext.Address)
		}
		if ext.SSHPort != 0 {
			data["external-port"] = []byte(fmt.Sprint(ext.SSHPort))
		}
	}
	return data
}

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
	// its DNS name, the address, and the external address.
	var names []string
	if conn.Host != "" {
		names = append(names, name(conn.Host, conn.SSHPort))
	}
	if conn.Address != "" {
		names = append(names, name(conn.Address, conn.SSHPort))
	}
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
