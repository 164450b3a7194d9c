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
// VirtualMachines and CDI DataVolumes.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"

	// Import all Kubernetes client auth plugins (e.g. Azure, GCP, OIDC, etc.)
	// to ensure that exec-entrypoint and run can make use of them.
	_ "k8s.io/client-go/plugin/pkg/client/auth"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/macvirt/macvirt/internal/devserve"
	"github.com/macvirt/macvirt/internal/domainhook/contract"
	"github.com/macvirt/macvirt/internal/domainhook/install"
	"github.com/macvirt/macvirt/internal/guestagent/endpoint"
	"github.com/macvirt/macvirt/internal/operator"
	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
	// +kubebuilder:scaffold:imports
)

var setupLog = ctrl.Log.WithName("setup")

//nolint:gocyclo // main wires flags and servers in one sequence.
func main() {
	var metricsAddr string
	var metricsCertPath, metricsCertName, metricsCertKey string
	var webhookCertPath, webhookCertName, webhookCertKey string
	var webhookPort int
	var enableLeaderElection bool
	var probeAddr string
	var secureMetrics bool
	var enableHTTP2 bool
	var tlsOpts []func(*tls.Config)
	var hookImage, emulatorPath, domainHook string
	var monitoringObjects bool
	var agentAddr, agentEndpoint, agentCertPath string
	flag.StringVar(&agentAddr, "agent-bind-address", ":9444",
		"The address the guest-agent endpoint listens on (HTTPS). Set to 0 to disable it.")
	flag.StringVar(&agentEndpoint, "agent-endpoint", "",
		"The URL guest agents reach the agent endpoint at, written into every machine's config disk; "+
			"https://macvirt-agent.<namespace>.svc when empty, the namespace from $POD_NAMESPACE (default macvirt-system).")
	flag.StringVar(&agentCertPath, "agent-cert-path", "",
		"The directory with the agent endpoint's tls.crt, tls.key and ca.crt; the webhook certificate's when empty.")
	var localWebhooks bool
	var localWebhookHost, webhookManifests string
	flag.BoolVar(&localWebhooks, "local-webhooks", false,
		"Serve the admission webhooks from this process outside the cluster: generate a throw-away serving "+
			"certificate and register webhook configurations pointing at --local-webhook-host (make run does). "+
			"They are removed when the process stops.")
	flag.StringVar(&localWebhookHost, "local-webhook-host", "127.0.0.1",
		"With --local-webhooks: the address the API server reaches this process at.")
	flag.StringVar(&webhookManifests, "webhook-manifests", filepath.Join("config", "webhook", "manifests.yaml"),
		"With --local-webhooks: the generated webhook configurations to register.")
	flag.StringVar(&hookImage, "hook-image", "",
		"The domain-hook image: KubeVirt's hook sidecar next to every macOS VM (--domain-hook=sidecar), "+
			"or the Plugin's sidecar (--domain-hook=plugin-sidecar). When empty, the image built for the cluster's "+
			"KubeVirt minor: $"+install.RelatedImageEnv+"_KUBEVIRT_<major>_<minor> or $"+install.RelatedImageEnv+
			" when set (OLM sets them, by digest), else "+install.DefaultImage+" (KubeVirt "+install.KubeVirtMinor+
			") or its -kubevirt<minor> tag for KubeVirt "+install.KubeVirtMinors+".")
	flag.StringVar(&domainHook, "domain-hook", string(contract.TransportAuto),
		"How the macOS domain settings reach libvirt: plugin-cel (a KubeVirt Plugin of CEL hooks, KubeVirt 1.9+), "+
			"plugin-sidecar (a Plugin whose hook is the --hook-image sidecar, KubeVirt 1.9+ on Kubernetes 1.36+), "+
			"sidecar (KubeVirt's hook sidecar, Sidecar feature gate), or auto: plugin-cel where KubeVirt serves "+
			"the Plugin kind, sidecar elsewhere.")
	flag.BoolVar(&monitoringObjects, "monitoring-objects", false,
		"Write the operator's ServiceMonitor and alerts (PrometheusRule) into its namespace wherever the cluster serves "+
			"the Prometheus Operator's kinds (the OLM bundle sets it; kustomize installs use the config/prometheus Component).")
	flag.StringVar(&emulatorPath, "emulator-path", "",
		"Optional QEMU binary on the nodes to use instead of KubeVirt's (for a QEMU with isa-applesmc).")
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "The address the metrics endpoint binds to. "+
		"Use :8443 for HTTPS or :8080 for HTTP, or leave as 0 to disable the metrics service.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "The address the probe endpoint binds to.")
	flag.BoolVar(&enableLeaderElection, "leader-elect", false,
		"Enable leader election for controller manager. "+
			"Enabling this will ensure there is only one active controller manager.")
	flag.BoolVar(&secureMetrics, "metrics-secure", true,
		"If set, the metrics endpoint is served securely via HTTPS. Use --metrics-secure=false to use HTTP instead.")
	flag.StringVar(&webhookCertPath, "webhook-cert-path", "", "The directory that contains the webhook certificate.")
	flag.StringVar(&webhookCertName, "webhook-cert-name", "tls.crt", "The name of the webhook certificate file.")
	flag.StringVar(&webhookCertKey, "webhook-cert-key", "tls.key", "The name of the webhook key file.")
	flag.IntVar(&webhookPort, "webhook-port", 9443, "Port the webhook server listens on. "+
		"Defaults to 9443. Set -1 to disable the webhook server.")
	flag.StringVar(&metricsCertPath, "metrics-cert-path", "",
		"The directory that contains the metrics server certificate.")
	flag.StringVar(&metricsCertName, "metrics-cert-name", "tls.crt", "The name of the metrics server certificate file.")
	flag.StringVar(&metricsCertKey, "metrics-cert-key", "tls.key", "The name of the metrics server key file.")
	flag.BoolVar(&enableHTTP2, "enable-http2", false,
		"If set, HTTP/2 will be enabled for the metrics and webhook servers")
	// JSON logs at info level, for a cluster's log pipeline; --zap-devel
	// (make run) gives readable console output and debug logs instead.
	opts := zap.Options{
		Development: false,
	}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	// if the enable-http2 flag is false (the default), http/2 should be disabled
	// due to its vulnerabilities. More specifically, disabling http/2 will
	// prevent from being vulnerable to the HTTP/2 Stream Cancellation and
	// Rapid Reset CVEs. For more information see:
	// - https://github.com/advisories/GHSA-qppj-fm5r-hxr3
	// - https://github.com/advisories/GHSA-4374-p667-p6c8
	disableHTTP2 := func(c *tls.Config) {
		setupLog.Info("Disabling HTTP/2")
		c.NextProtos = []string{"http/1.1"}
	}

	if !enableHTTP2 {
		tlsOpts = append(tlsOpts, disableHTTP2)
	}

	// Initial webhook TLS options
	webhookTLSOpts := tlsOpts
	webhookServerOptions := webhook.Options{
		TLSOpts: webhookTLSOpts,
		Port:    webhookPort,
	}

	if len(webhookCertPath) > 0 {
		setupLog.Info("Initializing webhook certificate watcher using provided certificates",
			"webhook-cert-path", webhookCertPath, "webhook-cert-name", webhookCertName, "webhook-cert-key", webhookCertKey)

		webhookServerOptions.CertDir = webhookCertPath
		webhookServerOptions.CertName = webhookCertName
		webhookServerOptions.KeyName = webhookCertKey
	}

	webhookServer := webhook.NewServer(webhookServerOptions)
	var local *devserve.Server
	if localWebhooks {
		manifests, err := os.ReadFile(webhookManifests) //nolint:gosec // a path the developer passes on the command line.
		if err != nil {
			setupLog.Error(err, "Failed to read the webhook configurations; run from the repository root or set --webhook-manifests")
			os.Exit(1)
		}
		local, err = devserve.Prepare(devserve.Options{Host: localWebhookHost, Port: webhookPort, Manifests: manifests})
		if err != nil {
			setupLog.Error(err, "Failed to prepare the local webhook server")
			os.Exit(1)
		}
		webhookServer = local.WebhookServer(webhook.Options{TLSOpts: webhookTLSOpts})
		setupLog.Info("Serving admission webhooks locally", "url", local.URL(), "configurations", devserve.NamePrefix+"*")
	}

	// Metrics endpoint is enabled in 'config/default/kustomization.yaml'. The Metrics options configure the server.
	// More info:
	// - https://pkg.go.dev/sigs.k8s.io/controller-runtime@v0.25.0/pkg/metrics/server
	// - https://book.kubebuilder.io/reference/metrics.html
	metricsServerOptions := metricsserver.Options{
		BindAddress:   metricsAddr,
		SecureServing: secureMetrics,
		TLSOpts:       tlsOpts,
	}

	if secureMetrics {
		// FilterProvider is used to protect the metrics endpoint with authn/authz.
		// These configurations ensure that only authorized users and service accounts
		// can access the metrics endpoint. The RBAC are configured in 'config/rbac/kustomization.yaml'. More info:
		// https://pkg.go.dev/sigs.k8s.io/controller-runtime@v0.25.0/pkg/metrics/filters#WithAuthenticationAndAuthorization
		metricsServerOptions.FilterProvider = filters.WithAuthenticationAndAuthorization
	}

	// If the certificate is not specified, controller-runtime will automatically
	// generate self-signed certificates for the metrics server. While convenient for development and testing,
	// this setup is not recommended for production.
	//
	// TODO(user): If you enable certManager, uncomment the following lines:
	// - [METRICS-WITH-CERTS] at config/default/kustomization.yaml to generate and use certificates
	// managed by cert-manager for the metrics server.
	// - [PROMETHEUS-WITH-CERTS] at config/prometheus/kustomization.yaml for TLS certification.
	if len(metricsCertPath) > 0 {
		setupLog.Info("Initializing metrics certificate watcher using provided certificates",
			"metrics-cert-path", metricsCertPath, "metrics-cert-name", metricsCertName, "metrics-cert-key", metricsCertKey)

		metricsServerOptions.CertDir = metricsCertPath
		metricsServerOptions.CertName = metricsCertName
		metricsServerOptions.KeyName = metricsCertKey
	}

	scheme, err := macvirtscheme.New()
	if err != nil {
		setupLog.Error(err, "Failed to build scheme")
		os.Exit(1)
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Cache:                  operator.CacheOptions(),
		Metrics:                metricsServerOptions,
		WebhookServer:          webhookServer,
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         enableLeaderElection,
		LeaderElectionID:       "macvirt.io",
		// LeaderElectionReleaseOnCancel defines if the leader should step down voluntarily
		// when the Manager ends. This requires the binary to immediately end when the
		// Manager is stopped, otherwise, this setting is unsafe. Setting this significantly
		// speeds up voluntary leader transitions as the new leader don't have to wait
		// LeaseDuration time first.
		//
		// In the default scaffold provided, the program ends immediately after
		// the manager stops, so would be fine to enable this option. However,
		// if you are doing or is intended to do any operation such as perform cleanups
		// after the manager stops then its usage might be unsafe.
		// LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		setupLog.Error(err, "Failed to start manager")
		os.Exit(1)
	}

	namespace := operatorNamespace(os.Getenv("POD_NAMESPACE"))
	if agentEndpoint == "" {
		agentEndpoint = defaultAgentEndpoint(namespace)
	}
	agent, agentServer, err := agentEndpointConfig(agentAddr, agentEndpoint, agentCertPath, webhookCertPath, local, localWebhookHost)
	if err != nil {
		setupLog.Error(err, "Failed to configure the guest-agent endpoint")
		os.Exit(1)
	}
	var agentHandler *endpoint.Handler
	if agentServer != nil {
		agentHandler = &endpoint.Handler{Client: mgr.GetClient()}
		agentServer.Handler = agentHandler
		agentServer.TLSOpts = tlsOpts
		if err := mgr.Add(agentServer); err != nil {
			setupLog.Error(err, "Failed to add the guest-agent endpoint")
			os.Exit(1)
		}
	} else {
		setupLog.Info("Guest-agent endpoint disabled: no address or no certificate; machines will not become Ready")
	}
	transport, err := contract.ParseTransport(domainHook)
	if err != nil {
		setupLog.Error(err, "Invalid flag")
		os.Exit(1)
	}
	operatorOpts := operator.Options{Namespace: namespace, DomainHook: transport, HookImage: hookImage, LookupEnv: os.LookupEnv, MonitoringObjects: monitoringObjects, EmulatorPath: emulatorPath,
		Webhooks: true, Agent: agent, AgentHandler: agentHandler}
	if agentServer != nil {
		operatorOpts.AgentListeningSince = agentServer.ListeningSince
	}
	if err := operator.Setup(mgr, operatorOpts); err != nil {
		setupLog.Error(err, "Failed to set up controllers")
		os.Exit(1)
	}
	if local != nil {
		if err := mgr.Add(&devserve.Registrar{Server: local, Client: mgr.GetClient(),
			Started: func() bool { return mgr.GetWebhookServer().StartedChecker()(nil) == nil }}); err != nil {
			setupLog.Error(err, "Failed to set up the local webhook registration")
			os.Exit(1)
		}
	}
	// +kubebuilder:scaffold:builder

	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		setupLog.Error(err, "Failed to set up health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		setupLog.Error(err, "Failed to set up the webhook ready check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		setupLog.Error(err, "Failed to set up ready check")
		os.Exit(1)
	}

	setupLog.Info("Starting manager")
	err = mgr.Start(ctrl.SetupSignalHandler())
	local.Close()
	if err != nil {
		setupLog.Error(err, "Failed to run manager")
		os.Exit(1)
	}
}

// agentEndpointConfig decides where the guest-agent endpoint listens, with
// which certificate, and what machines' config disks say about it: out of
// the cluster (--local-webhooks) it shares the local webhook certificate and
// listens on that host; in the cluster it uses --agent-cert-path, or the
// webhook certificate, whose directory also holds ca.crt.
func agentEndpointConfig(addr, agentURL, certPath, webhookCertPath string, local *devserve.Server,
	localHost string) (endpoint.Address, *endpoint.Server, error) {
	opts := endpoint.Address{Endpoint: agentURL}
	if addr == "0" {
		return opts, nil, nil
	}
	if local != nil {
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return opts, nil, fmt.Errorf("--agent-bind-address %q: %w", addr, err)
		}
		if port == "" || port == "0" {
			p, err := devserve.FreePort(localHost)
			if err != nil {
				return opts, nil, err
			}
			port = strconv.Itoa(p)
		}
		hostPort := net.JoinHostPort(localHost, port)
		opts.Endpoint, opts.CABundle = "https://"+hostPort, local.CABundle
		return opts, &endpoint.Server{Addr: hostPort, CertDir: local.CertDir}, nil
	}
	if certPath == "" {
		certPath = webhookCertPath
	}
	if certPath == "" {
		return opts, nil, nil
	}
	ca, serverName, err := agentTrust(certPath, agentURL)
	if err != nil {
		return opts, nil, err
	}
	opts.CABundle, opts.ServerName = ca, serverName
	return opts, &endpoint.Server{Addr: addr, CertDir: certPath}, nil
}

// operatorNamespace is the namespace the operator runs in: $POD_NAMESPACE
// (the downward API sets it), or the one config/default installs it in.
func operatorNamespace(podNamespace string) string {
	if podNamespace == "" {
		return operator.DefaultNamespace
	}
	return podNamespace
}

// defaultAgentEndpoint is the agent Service of the namespace the operator
// runs in, as config/default and the OLM bundle install it.
func defaultAgentEndpoint(namespace string) string {
	return "https://macvirt-agent." + operatorNamespace(namespace) + ".svc"
}

// agentTrust is what agents are told to trust in the certificate directory:
// its ca.crt (cert-manager writes one); without it (OLM mounts only
// tls.crt and tls.key) the serving certificate itself. When that
// certificate does not name the endpoint's host (OLM's names the webhook
// Service), agents check it against the first name it has instead.
func agentTrust(certPath, agentURL string) (ca []byte, serverName string, err error) {
	crt, err := os.ReadFile(filepath.Join(certPath, "tls.crt")) //nolint:gosec // a directory the deployment names.
	if err != nil {
		return nil, "", fmt.Errorf("reading the agent endpoint's certificate: %w", err)
	}
	ca, err = os.ReadFile(filepath.Join(certPath, "ca.crt")) //nolint:gosec // as above.
	switch {
	case errors.Is(err, fs.ErrNotExist):
		ca = crt
	case err != nil:
		return nil, "", fmt.Errorf("reading the CA bundle agents trust: %w", err)
	}
	block, _ := pem.Decode(crt)
	if block == nil {
		return nil, "", fmt.Errorf("%s holds no PEM certificate", filepath.Join(certPath, "tls.crt"))
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, "", fmt.Errorf("parsing the agent endpoint's certificate: %w", err)
	}
	u, err := url.Parse(agentURL)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" {
		return nil, "", fmt.Errorf("--agent-endpoint %q is not an https:// URL", agentURL)
	}
	if leaf.VerifyHostname(u.Hostname()) == nil {
		return ca, "", nil
	}
	if len(leaf.DNSNames) == 0 {
		return nil, "", fmt.Errorf("the agent endpoint's certificate names neither %s nor any other DNS name", u.Hostname())
	}
	return ca, leaf.DNSNames[0], nil
}
