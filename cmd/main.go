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

// Command manager runs the macvirt operator: the controllers that turn
// MacClasses, MacPools, MacClaims and MacMachines into KubeVirt
// VirtualMachines and CDI DataVolumes. It reads its flags into
// operator.Options; internal/operator composes the rest.
package main

import (
	"flag"
	"os"
	"path/filepath"

	// Import all Kubernetes client auth plugins (e.g. Azure, GCP, OIDC, etc.)
	// to ensure that exec-entrypoint and run can make use of them.
	_ "k8s.io/client-go/plugin/pkg/client/auth"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/macvirt/macvirt/internal/domainhook/contract"
	"github.com/macvirt/macvirt/internal/domainhook/install"
	"github.com/macvirt/macvirt/internal/operator"
	// +kubebuilder:scaffold:imports
)

var setupLog = ctrl.Log.WithName("setup")

func main() {
	opts := operator.Options{Namespace: os.Getenv("POD_NAMESPACE"), LookupEnv: os.LookupEnv, Webhooks: true}
	fs := flag.CommandLine
	fs.StringVar(&opts.Agent.Addr, "agent-bind-address", ":9444",
		"The address the guest-agent endpoint listens on (HTTPS). Set to 0, or empty, to disable it.")
	fs.StringVar(&opts.Agent.URL, "agent-endpoint", "",
		"The URL guest agents reach the agent endpoint at, written into every machine's config disk; "+
			"https://macvirt-agent.<namespace>.svc when empty, the namespace from $POD_NAMESPACE (default "+operator.DefaultNamespace+").")
	fs.StringVar(&opts.Tunnel.Addr, "tunnel-bind-address", ":9445",
		"The address the tunnel API listens on (HTTPS; the APIService v1alpha1.subresources.macvirt.io sends "+
			"kubectl mac ssh, vnc, port-forward and cp here through the API server). Set to 0, or empty, to disable it.")
	fs.StringVar(&opts.Tunnel.CertDir, "tunnel-cert-path", "",
		"The directory with the tunnel's tls.crt and tls.key (or apiserver.crt and apiserver.key, as OLM mounts them); "+
			"the webhook certificate's when empty.")
	fs.StringVar(&opts.ImagesNamespace, "images-namespace", operator.DefaultImagesNamespace,
		"The namespace golden images are kept in: MacImage copies and their DataSources, and the DataImportCrons of "+
			"classes whose image is refreshed from a registry. Empty: neither is served.")
	fs.StringVar(&opts.Agent.CertDir, "agent-cert-path", "",
		"The directory with the agent endpoint's tls.crt, tls.key and ca.crt; the webhook certificate's when empty.")
	localWebhooks := fs.Bool("local-webhooks", false,
		"Serve the admission webhooks from this process outside the cluster: generate a throw-away serving "+
			"certificate and register webhook configurations pointing at --local-webhook-host (make run does). "+
			"They are removed when the process stops.")
	localHost := fs.String("local-webhook-host", "127.0.0.1",
		"With --local-webhooks: the address the API server reaches this process at.")
	manifests := fs.String("webhook-manifests", filepath.Join("config", "webhook", "manifests.yaml"),
		"With --local-webhooks: the generated webhook configurations to register.")
	fs.StringVar(&opts.HookImage, "hook-image", "",
		"The domain-hook image: KubeVirt's hook sidecar next to every macOS VM (--domain-hook=sidecar), "+
			"or the Plugin's sidecar (--domain-hook=plugin-sidecar). When empty, the image built for the cluster's "+
			"KubeVirt minor: $"+install.RelatedImageEnv+"_KUBEVIRT_<major>_<minor> or $"+install.RelatedImageEnv+
			" when set (OLM sets them, by digest), else "+install.DefaultImage+" (KubeVirt "+install.KubeVirtMinor+
			") or its -kubevirt<minor> tag for KubeVirt "+install.KubeVirtMinors+".")
	domainHook := fs.String("domain-hook", string(contract.TransportAuto),
		"How the macOS domain settings reach libvirt: plugin-cel (a KubeVirt Plugin of CEL hooks, KubeVirt 1.9+), "+
			"plugin-sidecar (a Plugin whose hook is the --hook-image sidecar, KubeVirt 1.9+ on Kubernetes 1.36+), "+
			"sidecar (KubeVirt's hook sidecar, Sidecar feature gate), or auto: plugin-cel where KubeVirt serves "+
			"the Plugin kind, sidecar elsewhere.")
	fs.BoolVar(&opts.MonitoringObjects, "monitoring-objects", false,
		"Write the operator's ServiceMonitor and alerts (PrometheusRule) into its namespace wherever the cluster serves "+
			"the Prometheus Operator's kinds (the OLM bundle sets it; kustomize installs use the config/prometheus Component).")
	fs.StringVar(&opts.EmulatorPath, "emulator-path", "",
		"Optional QEMU binary on the nodes to use instead of KubeVirt's (for a QEMU with isa-applesmc).")
	fs.StringVar(&opts.MetricsAddr, "metrics-bind-address", "0", "The address the metrics endpoint binds to. "+
		"Use :8443 for HTTPS or :8080 for HTTP, or leave as 0 to disable the metrics service.")
	fs.StringVar(&opts.ProbeAddr, "health-probe-bind-address", ":8081", "The address the probe endpoint binds to.")
	fs.BoolVar(&opts.LeaderElection, "leader-elect", false,
		"Enable leader election for controller manager. "+
			"Enabling this will ensure there is only one active controller manager.")
	fs.BoolVar(&opts.SecureMetrics, "metrics-secure", true,
		"If set, the metrics endpoint is served securely via HTTPS. Use --metrics-secure=false to use HTTP instead.")
	fs.StringVar(&opts.WebhookCert.Dir, "webhook-cert-path", "", "The directory that contains the webhook certificate.")
	fs.StringVar(&opts.WebhookCert.CertName, "webhook-cert-name", "tls.crt", "The name of the webhook certificate file.")
	fs.StringVar(&opts.WebhookCert.KeyName, "webhook-cert-key", "tls.key", "The name of the webhook key file.")
	fs.IntVar(&opts.WebhookPort, "webhook-port", 9443, "Port the webhook server listens on. "+
		"Defaults to 9443. Set -1 to disable the webhook server.")
	fs.StringVar(&opts.MetricsCert.Dir, "metrics-cert-path", "",
		"The directory that contains the metrics server certificate.")
	fs.StringVar(&opts.MetricsCert.CertName, "metrics-cert-name", "tls.crt", "The name of the metrics server certificate file.")
	fs.StringVar(&opts.MetricsCert.KeyName, "metrics-cert-key", "tls.key", "The name of the metrics server key file.")
	fs.BoolVar(&opts.EnableHTTP2, "enable-http2", false,
		"If set, HTTP/2 will be enabled for the metrics and webhook servers")
	// JSON logs at info level, for a cluster's log pipeline; --zap-devel
	// (make run) gives readable console output and debug logs instead.
	logOpts := zap.Options{Development: false}
	logOpts.BindFlags(fs)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&logOpts)))

	if opts.MetricsAddr == "" {
		// An empty address is controller-runtime's default, as it always
		// was here (operator.Options reads "" as no server).
		opts.MetricsAddr = metricsserver.DefaultBindAddress
	}
	transport, err := contract.ParseTransport(*domainHook)
	if err != nil {
		fail(err, "Invalid flag")
	}
	opts.DomainHook = transport
	if *localWebhooks {
		configs, err := os.ReadFile(*manifests)
		if err != nil {
			fail(err, "Failed to read the webhook configurations; run from the repository root or set --webhook-manifests")
		}
		opts.DevServing = &operator.DevServing{Host: *localHost, Manifests: configs}
	}
	ctx := ctrl.SetupSignalHandler()
	op, err := operator.New(ctx, ctrl.GetConfigOrDie(), opts)
	if err != nil {
		fail(err, "Failed to set up the operator")
	}
	setupLog.Info("Starting manager")
	if err := op.Start(ctx); err != nil {
		fail(err, "Failed to run manager")
	}
}

func fail(err error, msg string) {
	setupLog.Error(err, msg)
	os.Exit(1)
}
