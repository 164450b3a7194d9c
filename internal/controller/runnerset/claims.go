package runnerset

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// runnerScript runs GitHub's runner with the just-in-time configuration:
// one job, then the runner exits and the task with it.
func runnerScript(set *macvirtv1alpha1.MacRunnerSet) string {
	dir := set.Spec.Runner.Directory
	if dir == "" {
		dir = macvirtv1alpha1.DefaultRunnerDirectory
	}
	return fmt.Sprintf(`#!/bin/sh
# GitHub Actions runner of MacRunnerSet %s/%s: takes one job, then exits.
set -e
dir='%s'
case "$dir" in /*) ;; *) dir="$HOME/$dir" ;; esac
cd "$dir"
exec ./run.sh --jitconfig "$%s"
`, set.Namespace, set.Name, dir, macvirtv1alpha1.RunnerJITConfigEnv)
}

// jitSecret holds one runner's JIT configuration, owned by its claim so it
// goes with it.
func jitSecret(claim *macvirtv1alpha1.MacClaim, jit string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: claim.Name, Namespace: claim.Namespace,
			Labels:          map[string]string{macvirtv1alpha1.LabelRunnerSet: claim.Labels[macvirtv1alpha1.LabelRunnerSet]},
			OwnerReferences: []metav1.OwnerReference{base.ControllerRef("MacClaim", claim.Name, claim.UID)}},
		Type:       corev1.SecretTypeOpaque,
		StringData: map[string]string{macvirtv1alpha1.RunnerJITConfigKey: jit},
	}
}
