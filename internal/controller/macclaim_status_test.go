package controller

import (
	"testing"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

func TestKnownHosts(t *testing.T) {
	const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE0Ow6DQP+//k6m8zioktAbUb0Su/x93h9rtsTyq+kAs"
	for _, c := range []struct {
		conn macvirtv1alpha1.ClaimConnection
		want string
	}{
		{macvirtv1alpha1.ClaimConnection{Address: "10.0.0.5", SSHPort: 22, HostKeys: []string{key}}, "10.0.0.5 " + key + "\n"},
		{macvirtv1alpha1.ClaimConnection{Address: "10.0.0.5", SSHPort: 2222, HostKeys: []string{key, key}},
			"[10.0.0.5]:2222 " + key + "\n[10.0.0.5]:2222 " + key + "\n"},
		{macvirtv1alpha1.ClaimConnection{Address: "10.0.0.5", SSHPort: 22}, ""},
	} {
		if got := knownHosts(&c.conn); got != c.want {
			t.Errorf("knownHosts(%+v) = %q, want %q", c.conn, got, c.want)
		}
	}
}
