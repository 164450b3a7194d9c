package kubectlmac

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"

	"github.com/macvirt/macvirt/internal/tunnel"
)

// Version is the plugin's release, set at build time (make
// kubectl-mac-dist); else the module version go install recorded.
var Version = ""

func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// versionCommand prints the plugin's version and, with --client=false (the
// default), the cluster's: its Kubernetes version and whether it serves
// macvirt's tunnel.
func versionCommand(config *genericclioptions.ConfigFlags, streams Streams, code *int) *cobra.Command {
	clientOnly := false
	cmd := &cobra.Command{Use: "version", Short: "Print the plugin's version, and the cluster's Kubernetes and macvirt tunnel", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, _ = fmt.Fprintf(streams.Out, "kubectl-mac %s (%s, %s/%s)\n", version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			if clientOnly {
				return nil
			}
			cfg, err := config.ToRESTConfig()
			if err == nil {
				var dc *discovery.DiscoveryClient
				if dc, err = discovery.NewDiscoveryClientForConfig(cfg); err == nil {
					err = serverVersion(dc, streams)
				}
			}
			if err != nil {
				*code = 1
				_, _ = fmt.Fprintf(streams.Err, "kubectl mac version: the cluster: %v\n", readable(err))
			}
			return nil
		}}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "print the plugin's version only")
	return cmd
}

// serverVersion prints the API server's version and whether it serves the
// tunnel's API.
func serverVersion(dc discovery.DiscoveryInterface, streams Streams) error {
	v, err := dc.ServerVersion()
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(streams.Out, "Kubernetes %s\n", v.GitVersion)
	tunnelServed := "not served: ssh, cp, port-forward and vnc connect directly (--via direct)"
	if _, err := dc.ServerResourcesForGroupVersion(tunnel.Group + "/" + tunnel.Version); err == nil {
		tunnelServed = "served"
	}
	_, _ = fmt.Fprintf(streams.Out, "macvirt tunnel (%s): %s\n", tunnel.APIServiceName, tunnelServed)
	return nil
}
