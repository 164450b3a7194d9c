package contract

import (
	"fmt"
	"strings"
)

// Transport is how the macOS settings reach the libvirt domain.
type Transport string

const (
	// TransportPluginCEL is a Plugin of CEL domain hooks: no image, no
	// sidecar, nothing but KubeVirt's Plugins feature gate.
	TransportPluginCEL Transport = "plugin-cel"
	// TransportPluginSidecar is a Plugin whose domain hook is macvirt's
	// hook binary, serving MutateDomain in a sidecar container.
	TransportPluginSidecar Transport = "plugin-sidecar"
	// TransportSidecar is KubeVirt's hook sidecar (sidecar-shim), behind
	// the Sidecar feature gate, for KubeVirt before 1.9.
	TransportSidecar Transport = "sidecar"
	// TransportAuto picks plugin-cel where the Plugin kind is served and
	// sidecar elsewhere.
	TransportAuto Transport = "auto"
)

// Transports are the values of the operator's --domain-hook flag.
var Transports = []Transport{TransportAuto, TransportPluginCEL, TransportPluginSidecar, TransportSidecar}

// ParseTransport reads a --domain-hook value.
func ParseTransport(s string) (Transport, error) {
	for _, t := range Transports {
		if string(t) == s {
			return t, nil
		}
	}
	names := make([]string, len(Transports))
	for i, t := range Transports {
		names[i] = string(t)
	}
	return "", fmt.Errorf("--domain-hook %q is not a transport; use one of %s", s, strings.Join(names, ", "))
}

// Resolve turns auto into the transport the cluster supports: a Plugin of
// CEL hooks where KubeVirt serves the Plugin kind, which needs no sidecar,
// no image and no Sidecar feature gate; KubeVirt's hook sidecar elsewhere.
func (t Transport) Resolve(pluginServed bool) Transport {
	if t != TransportAuto {
		return t
	}
	if pluginServed {
		return TransportPluginCEL
	}
	return TransportSidecar
}

// IsPlugin says whether the transport needs the Plugin kind.
func (t Transport) IsPlugin() bool { return t == TransportPluginCEL || t == TransportPluginSidecar }
