package pool

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/internal/controller/base"
)

// Reconciler keeps a pool's idle target of warm machines, never more
// than maxMachines, at most maxProvisioning at once.
type Reconciler struct {
	client.Client
	Recorder events.EventRecorder
	// Clock times how long a machine's guest has been silent.
	Clock          clock.PassiveClock
	ControllerName string
}

// writeFailed records a refused write on the scope (the first one shows in
// status), as a Warning event, and returns it wrapped for backoff.
func (r *Reconciler) writeFailed(s *poolScope, reason, verb, name string, err error) error {
	err = fmt.Errorf("%s machine %s/%s: %w", verb, s.Pool.Spec.Namespace, name, err)
	if s.WriteFailed == nil {
		s.WriteFailed = &base.Problem{Reason: reason, Message: err.Error()}
	}
	base.RecordEvent(r.Recorder, s.Pool, corev1.EventTypeWarning, reason, "Reconcile", err.Error())
	return err
}
