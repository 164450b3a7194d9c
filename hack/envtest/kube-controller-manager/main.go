// Command kube-controller-manager is Kubernetes' controller manager, built
// from k8s.io/kubernetes so `make bench` can run its PersistentVolume binder
// against the same envtest API server as macvirt's claim binder.
package main

import (
	"os"

	_ "time/tzdata" // for CronJob time zones, as upstream's main does.

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
