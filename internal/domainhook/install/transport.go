package install

import (
	"context"
	"errors"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	pluginv1alpha1 "kubevirt.io/api/plugin/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/internal/domainhook/contract"
)

// The kinds the transports write: KubeVirt's Plugin, and the admission
// policy that adds the plugin-sidecar transport's container.
var (
	pluginKind = schema.GroupKind{Group: pluginv1alpha1.SchemeGroupVersion.Group, Kind: "Plugin"}
	mapKind    = schema.GroupKind{Group: admissionregistrationv1.GroupName, Kind: "MutatingAdmissionPolicy"}
)

// served says whether the API server serves a kind at a version.
func served(mapper meta.RESTMapper, gk schema.GroupKind, version string) (bool, error) {
	_, err := mapper.RESTMapping(gk, version)
	switch {
	case err == nil:
		return true, nil
	case meta.IsNoMatchError(err):
		return false, nil
	}
	return false, fmt.Errorf("asking the API server whether it serves %s/%s: %w", gk, version, err)
}

// Resolve turns the --domain-hook flag into the transport the
// cluster supports, or says why the one asked for cannot work here. The
// Plugin kind alone does not make the plugin transports work: KubeVirt 1.9
// always installs the CRD, but virt-handler hands Plugins to virt-launcher
// only while the Plugins feature gate is on. virt-api's admission of Plugins
// refuses a create while the gate is off, so a dry-run create of the Plugin
// asks it.
func Resolve(ctx context.Context, mapper meta.RESTMapper, c client.Client, t contract.Transport,
	opts Options) (contract.Transport, error) {
	if t == "" {
		t = contract.TransportAuto
	}
	if t == contract.TransportSidecar {
		return t, nil
	}
	plugins, err := served(mapper, pluginKind, pluginv1alpha1.SchemeGroupVersion.Version)
	if err != nil {
		return "", err
	}
	if t.Resolve(plugins).IsPlugin() && !plugins {
		return "", fmt.Errorf("--domain-hook=%s needs KubeVirt's Plugin kind (plugin.kubevirt.io/v1alpha1, KubeVirt 1.9 or later), "+
			"which this cluster does not serve; upgrade KubeVirt, or use --domain-hook=sidecar (or auto)", t)
	}
	gate := plugins
	if plugins {
		if gate, err = pluginsGateOn(ctx, c, transportPlugin(t.Resolve(true), opts)); err != nil {
			return "", err
		}
	}
	resolved := t.Resolve(gate)
	if resolved.IsPlugin() && !gate {
		return "", fmt.Errorf("--domain-hook=%s needs KubeVirt's Plugins feature gate, which is off: "+
			"turn it on (docs/domain-hook.md), or use --domain-hook=sidecar (or auto)", t)
	}
	if resolved == contract.TransportPluginSidecar {
		policies, err := served(mapper, mapKind, admissionregistrationv1.SchemeGroupVersion.Version)
		if err != nil {
			return "", err
		}
		if !policies {
			return "", errors.New("--domain-hook=plugin-sidecar adds the hook sidecar with a MutatingAdmissionPolicy " +
				"(admissionregistration.k8s.io/v1, Kubernetes 1.36 or later), which this cluster does not serve; use --domain-hook=plugin-cel")
		}
	}
	return resolved, nil
}

// gateOffMessage is what virt-api's Plugin admission answers a create
// with while the gate is off (pkg/virt-api/webhooks/validating-webhook/
// admitters/plugin-admitter.go in KubeVirt 1.9).
const gateOffMessage = "Plugins feature gate is not enabled"

// transportPlugin is the Plugin a plugin transport writes.
func transportPlugin(t contract.Transport, opts Options) *pluginv1alpha1.Plugin {
	if t == contract.TransportPluginSidecar {
		return SidecarPlugin()
	}
	return CELPlugin(opts)
}

// pluginsGateOn asks virt-api, with a dry-run create of the transport's
// Plugin, whether KubeVirt's Plugins feature gate is on. The server runs
// admission before it checks whether the name exists, so an existing
// Plugin (AlreadyExists) means the gate is on.
func pluginsGateOn(ctx context.Context, c client.Client, plugin *pluginv1alpha1.Plugin) (bool, error) {
	err := c.Create(ctx, plugin, client.DryRunAll)
	switch {
	case err == nil, apierrors.IsAlreadyExists(err):
		return true, nil
	case strings.Contains(err.Error(), gateOffMessage):
		return false, nil
	}
	return false, fmt.Errorf("asking virt-api whether KubeVirt's Plugins feature gate is on (a dry-run create of Plugin %s): %w",
		Name, err)
}
