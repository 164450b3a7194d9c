package guestprotocol

import "strings"

// A VZ guest (Apple silicon) has no config disk. Its host agent fetches the
// machine's configuration from the operator's endpoint, writes it into a
// directory of its own and shares that directory into the VM read-only;
// tart's --dir and lume's sharedDirectories give the share the
// Virtualization framework's automount tag, so macOS shows it at
// SharedFilesDir/ConfigShareName.
const (
	// HostConfigPath is where a host agent POSTs a HostConfigRequest,
	// with its ServiceAccount's token as Authorization: Bearer.
	HostConfigPath = "/" + VersionV2 + "/host/config"
	// MaxHostConfigRequestBytes bounds a HostConfigRequest.
	MaxHostConfigRequestBytes = 4 << 10
	// ConfigShareName is the share's name in the guest, and the last
	// element of the host directory shared (lume names a share after it).
	ConfigShareName = "macvirt"
	// SharedFilesDir is where macOS mounts the shares of the automount tag.
	SharedFilesDir = "/Volumes/My Shared Files"
	// ShutdownFile is what the host agent writes into a VM's share to ask
	// macOS to shut down: the Virtualization framework's own request (the
	// power button) only opens a dialog in macOS. The guest agent, which
	// watches for it, shuts macOS down as root. It is never a file of the
	// configuration the operator sends (ConfigKeys).
	ShutdownFile = "shutdown"
	// ResumedFile is what the host agent writes into the share of a VM it
	// resumes from a saved state, beside a configuration with a new token:
	// the host's time (RFC 3339). The guest agent, which wakes with the
	// state it was saved with, sets its clock when behind, makes new SSH
	// host keys and reads the new token before it reports. Never a file of
	// the configuration the operator sends.
	ResumedFile = "resumed"
)

// HostConfigRequest asks for the configuration of one machine placed on
// the asking host; UID is the machine's, so a machine made again under the
// same name is never given the configuration of the one before.
type HostConfigRequest struct {
	Machine MachineRef `json:"machine"`
	UID     string     `json:"uid"`
}

// HostConfig is the configuration of one machine: a file per key, as on a
// config disk.
type HostConfig struct {
	Files map[string]string `json:"files"`
}

// ConfigKeys are the files of a machine's configuration.
var ConfigKeys = []string{KeyEndpoint, KeyCABundle, KeyToken, KeyServerName, KeyNamespace, KeyMachine, KeyMachineUID}

// ValidConfigFile says whether a HostConfig's file may be written: one of
// ConfigKeys, and a value without NUL.
func ValidConfigFile(key, value string) bool {
	for _, k := range ConfigKeys {
		if k == key {
			return !strings.ContainsRune(value, 0)
		}
	}
	return false
}
