package runnerset

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// runnerName is a new runner's name, also its claim's and its JIT
// Secret's: the set's name and a random suffix, so names of runners on
// GitHub tell which set made them.
func runnerName(set *macvirtv1alpha1.MacRunnerSet) string {
	prefix := set.Name
	if len(prefix) > 50 {
		prefix = prefix[:50]
	}
	return strings.TrimSuffix(prefix, "-") + "-" + utilrand.String(5)
}

// ownsName reports whether a runner name on GitHub is one the set makes.
func ownsName(set *macvirtv1alpha1.MacRunnerSet, name string) bool {
	prefix := set.Name
	if len(prefix) > 50 {
		prefix = prefix[:50]
	}
	prefix = strings.TrimSuffix(prefix, "-") + "-"
	return strings.HasPrefix(name, prefix) && len(name) == len(prefix)+5
}

// ownedPoolName is the name of the set's own warm pool (pools are
// cluster-scoped).
func ownedPoolName(set *macvirtv1alpha1.MacRunnerSet) string {
	return "runners-" + set.Namespace + "-" + set.Name
}

// ownsPool reports whether the set keeps a warm pool of its class.
func ownsPool(set *macvirtv1alpha1.MacRunnerSet) bool {
	return set.Spec.ClassName != "" && set.Spec.MinIdle > 0
}

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

// runnerClaim is the claim of one runner: a Mac from the set's class or
// pool, deleted when released, whose bootstrap runs GitHub's runner with
// the JIT configuration from the runner's Secret.
func runnerClaim(set *macvirtv1alpha1.MacRunnerSet, name string) *macvirtv1alpha1.MacClaim {
	timeout := int32((set.Spec.EffectiveJobTimeout() + set.Spec.EffectiveRegistrationTimeout()).Seconds())
	hold := false
	c := &macvirtv1alpha1.MacClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: set.Namespace,
			Labels:          map[string]string{macvirtv1alpha1.LabelRunnerSet: set.Name},
			OwnerReferences: []metav1.OwnerReference{base.ControllerRef("MacRunnerSet", set.Name, set.UID)}},
		Spec: macvirtv1alpha1.MacClaimSpec{
			ReclaimPolicy: macvirtv1alpha1.ReclaimDelete,
			Bootstrap: &macvirtv1alpha1.Bootstrap{
				Script: &macvirtv1alpha1.BootstrapScript{Inline: runnerScript(set)},
				Env: []macvirtv1alpha1.BootstrapEnvVar{{Name: macvirtv1alpha1.RunnerJITConfigEnv,
					SecretKeyRef: &macvirtv1alpha1.LocalKeyRef{Name: name, Key: macvirtv1alpha1.RunnerJITConfigKey}}},
				User:           set.Spec.Runner.User,
				TimeoutSeconds: &timeout,
				HoldReady:      &hold,
			},
		},
	}
	switch {
	case set.Spec.PoolName != "":
		c.Spec.PoolName = set.Spec.PoolName
	case ownsPool(set):
		c.Spec.PoolName = ownedPoolName(set)
	default:
		c.Spec.ClassName = set.Spec.ClassName
	}
	return c
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

// ownedPool is the set's warm pool: its class, idle as planned, never
// more machines than maxRunners.
func ownedPool(set *macvirtv1alpha1.MacRunnerSet, idle int32) *macvirtv1alpha1.MacPool {
	maxMachines := set.Spec.MaxRunners
	return &macvirtv1alpha1.MacPool{
		ObjectMeta: metav1.ObjectMeta{Name: ownedPoolName(set), Labels: map[string]string{
			macvirtv1alpha1.LabelRunnerSet: set.Name, macvirtv1alpha1.LabelRunnerSetNamespace: set.Namespace}},
		Spec: macvirtv1alpha1.MacPoolSpec{ClassName: set.Spec.ClassName, Idle: &idle, MaxMachines: &maxMachines},
	}
}
