package runnercore

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// namePrefix is what every runner name of the set named set starts with.
func namePrefix(set string) string {
	if len(set) > 50 {
		set = set[:50]
	}
	return strings.TrimSuffix(set, "-") + "-"
}

// RunnerName is a new runner's name, also its claim's: the set's name and
// a random suffix, so runners listed by the CI system tell which set made
// them.
func RunnerName(set string) string {
	return namePrefix(set) + utilrand.String(5)
}

// OwnsName reports whether a runner name the CI system lists is one the
// set named set makes.
func OwnsName(set, name string) bool {
	prefix := namePrefix(set)
	return strings.HasPrefix(name, prefix) && len(name) == len(prefix)+5
}

// RunnerClaim is the claim of one runner: a Mac from the set's class or
// pool, deleted when released, whose bootstrap is the backend's task. The
// task may run as long as a runner may wait and then run its job.
func RunnerClaim(set *Set, name string, task macvirtv1alpha1.Bootstrap) *macvirtv1alpha1.MacClaim {
	timeout := int32((set.JobTimeout + set.RegistrationTimeout).Seconds())
	hold := false
	task.TimeoutSeconds, task.HoldReady = &timeout, &hold
	c := &macvirtv1alpha1.MacClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: set.Object.GetNamespace(),
			Labels:          map[string]string{set.Label: set.Object.GetName()},
			OwnerReferences: []metav1.OwnerReference{base.ControllerRef(set.Kind, set.Object.GetName(), set.Object.GetUID())}},
		Spec: macvirtv1alpha1.MacClaimSpec{ReclaimPolicy: macvirtv1alpha1.ReclaimDelete, Bootstrap: &task},
	}
	switch {
	case set.PoolName != "":
		c.Spec.PoolName = set.PoolName
	case set.OwnsPool():
		c.Spec.PoolName = set.OwnedPool
	default:
		c.Spec.ClassName = set.ClassName
	}
	return c
}

// OwnedPool is the set's warm pool: its class, idle as planned, never more
// machines than the set keeps claims (MaxClaims: a runner's Mac being
// released is still the pool's until it has stopped).
func OwnedPool(set *Set, idle int32) *macvirtv1alpha1.MacPool {
	maxMachines := int32(MaxClaims(int(set.MaxRunners))) //nolint:gosec // twice an int32 maxRunners the schema bounds.
	labels := map[string]string{}
	for k, v := range set.PoolLabels {
		labels[k] = v
	}
	return &macvirtv1alpha1.MacPool{
		ObjectMeta: metav1.ObjectMeta{Name: set.OwnedPool, Labels: labels},
		Spec:       macvirtv1alpha1.MacPoolSpec{ClassName: set.ClassName, Idle: &idle, MaxMachines: &maxMachines},
	}
}

// ownedBy reports whether pool carries the set's pool labels.
func ownedBy(set *Set, pool *macvirtv1alpha1.MacPool) bool {
	for k, v := range set.PoolLabels {
		if pool.Labels[k] != v {
			return false
		}
	}
	return true
}
