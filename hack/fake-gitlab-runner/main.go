// Command fake-gitlab-runner plays GitLab Runner's autoscaler against
// macvirt's fleeting plugin, with no GitLab: it starts the plugin as
// gitlab-runner does and runs a burst of jobs, each on a fresh Mac over SSH
// (capacity_per_instance = 1, max_use_count = 1). For the sandbox
// walk-through in docs/gitlab.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"gitlab.com/gitlab-org/fleeting/fleeting/provider"

	"github.com/macvirt/macvirt/internal/gitlab"
	"github.com/macvirt/macvirt/test/infrastructure/fakegitlabrunner"
)

func main() {
	var cfg gitlab.Config
	plugin := flag.String("plugin", "bin/fleeting-plugin-macvirt", "the plugin binary (make fleeting-plugin)")
	flag.StringVar(&cfg.Name, "name", "fake-runner", "plugin_config name")
	flag.StringVar(&cfg.Kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "plugin_config kubeconfig")
	flag.StringVar(&cfg.Namespace, "namespace", "", "plugin_config namespace (default: the kubeconfig's)")
	flag.StringVar(&cfg.Class, "class", "ci-sonoma", "plugin_config class")
	flag.StringVar(&cfg.Via, "via", gitlab.ViaTunnel, "plugin_config via: tunnel (from this machine) or direct (from a pod in the claims' namespace)")
	maxInstances := flag.Int("max-instances", 2, "the runner's max_instances")
	jobs := flag.Int("jobs", 3, "how many jobs to run")
	verbose := flag.Bool("verbose", false, "show the runner's and the plugin's log")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var log io.Writer
	if *verbose {
		log = os.Stderr
	}
	start := time.Now()
	report, err := fakegitlabrunner.Run(ctx, fakegitlabrunner.Options{Plugin: *plugin, PluginConfig: cfg,
		Connector: provider.ConnectorConfig{Timeout: 2 * time.Minute}, MaxInstances: *maxInstances, Jobs: *jobs, Log: log})
	for _, j := range report.Jobs {
		fmt.Printf("job %d: instance %s, %s@%s, waited %s for its Mac, ran %s\n", j.N, j.Instance, j.User, j.Address,
			j.Waited.Round(100*time.Millisecond), j.Ran.Round(time.Millisecond))
		if j.Err != nil {
			fmt.Printf("  failed: %v\n", j.Err)
		}
		fmt.Print(indent(j.Output))
	}
	fmt.Printf("%d jobs in %s; at most %d instances at once\n", len(report.Jobs), time.Since(start).Round(100*time.Millisecond), report.MostInstances)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake-gitlab-runner:", err)
		stop()
		os.Exit(1) //nolint:gocritic // stop ran just above.
	}
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ") + "\n"
}
