package guestprotocol

// A tenant's tunnel to a VZ guest (docs/design/apple-silicon-runtime.md,
// section 7). The Mac takes no inbound connection: its host agent holds a
// WebSocket open to the operator's endpoint (HostTunnelsPath), on which the
// operator sends a HostDial for each tunnel a tenant opens to a machine
// placed on that host. The host agent connects to that port of the
// machine's VM on the Mac's NAT network and brings the connection back on a
// new WebSocket (HostTunnelPath of the dial's ID): first a HostDialResult
// as a text message, then the connection's bytes as binary messages, both
// ways. Both WebSockets are GETs upgraded with the subprotocol
// HostTunnelProtocol and the host's ServiceAccount token as Authorization:
// Bearer, as for HostConfigPath.
const (
	// HostTunnelsPath is the WebSocket the host agent holds open.
	HostTunnelsPath = "/" + VersionV2 + "/host/tunnels"
	// HostTunnelProtocol is both WebSockets' subprotocol.
	HostTunnelProtocol = "v1.hosttunnel.macvirt.io"
	// MaxHostDialBytes bounds a HostDial message.
	MaxHostDialBytes = 4 << 10
	// HostDialIDLength is the length of a HostDial's ID (hex).
	HostDialIDLength = 32
)

// HostTunnelPorts are the guest ports a host agent connects a tunnel to:
// SSH, and Screen Sharing (for classes that offer it). Whatever the
// operator asks, no other port of a VM is reached.
var HostTunnelPorts = []int32{22, 5900}

// HostTunnelPath is where the host agent brings back the connection of the
// HostDial id.
func HostTunnelPath(id string) string { return HostTunnelsPath + "/" + id }

// HostDial asks a host agent to connect to Port of the VM of the machine
// Machine (whose UID is UID), and to bring the connection back at
// HostTunnelPath(ID).
type HostDial struct {
	ID      string     `json:"id"`
	Machine MachineRef `json:"machine"`
	UID     string     `json:"uid"`
	Port    int32      `json:"port"`
}

// HostDialResult is the first message on a dial's WebSocket: empty Error
// when the guest's port answered, else why not (for the tenant to read).
type HostDialResult struct {
	Error string `json:"error,omitempty"`
}

// ValidHostDialID says id is what the operator draws: HostDialIDLength
// lower-case hex digits.
func ValidHostDialID(id string) bool {
	if len(id) != HostDialIDLength {
		return false
	}
	for _, c := range id {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
