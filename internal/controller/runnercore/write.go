package runnercore

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// FleetObject is a fleet kind's object as the fleets' one status write
// sees it. Each fleet kind's API type satisfies it with two small methods
// over its status.
type FleetObject interface {
	client.Object
	// Fleet is the part of the status every fleet kind shares.
	Fleet() *macvirtv1alpha1.FleetStatus
	// LastServiceError is the last error the CI service answered, as the
	// status says it (nil when none is shown).
	LastServiceError() *macvirtv1alpha1.ServiceError
}

// defaultServiceErrorReason is the new-error event's reason of a set whose
// kind named none.
const defaultServiceErrorReason = "ServiceError"

// WriteStatus is a fleet's one status write, the end of every reconcile of
// a fleet kind. before is the object as read; after is the same object
// with its computed status (the kind sets its metrics before). It writes
// only if the status changed (base.WriteStatus, nothing once the object is
// gone), then warns: with the Stalled reason when the fleet turned
// Stalled, and with the set's ServiceErrorReason when the CI service
// answered a new error.
func (e *Engine) WriteStatus(ctx context.Context, s *Scope, before, after FleetObject) error {
	// Only the status differs between the two, so they compare as the
	// statuses do.
	if equality.Semantic.DeepEqual(before, after) {
		return nil
	}
	if written, err := base.WriteStatus(ctx, e.Client, after, before, false); !written {
		return err
	}
	if reason, note, ok := base.TurnedStalled(before.Fleet().Conditions, after.Fleet().Conditions); ok {
		base.RecordEvent(e.Recorder, after, corev1.EventTypeWarning, reason, "Reconcile", note)
	}
	if now := after.LastServiceError(); newServiceError(before.LastServiceError(), now) {
		reason := s.Of.ServiceErrorReason
		if reason == "" {
			reason = defaultServiceErrorReason
		}
		base.RecordEvent(e.Recorder, after, corev1.EventTypeWarning, reason, "Reconcile", now.Message)
	}
	return nil
}

// newServiceError reports whether the service's error now is news: there
// was none, or it said something else.
func newServiceError(was, now *macvirtv1alpha1.ServiceError) bool {
	return now != nil && (was == nil || was.Message != now.Message)
}
