package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/macvirt/macvirt/internal/monitoring"
)

// +kubebuilder:rbac:groups=monitoring.coreos.com,namespace=macvirt-system,resources=servicemonitors;prometheusrules,verbs=create;patch

var monitoringObjectsReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "macvirt_monitoring_objects_ready",
	Help: "With --monitoring-objects: 1 when the operator's ServiceMonitor or PrometheusRule (by kind) is written, 0 while the API server refuses it; absent while the cluster does not serve the kind.",
}, []string{"kind"})

func init() { metrics.Registry.MustRegister(monitoringObjectsReady) }

// MonitoringObjects writes the operator's ServiceMonitor and alerts
// (internal/monitoring) into its namespace wherever the cluster serves the
// Prometheus Operator's kinds, and again every Resync, so that a
// Prometheus Operator installed later is picked up and an edited rule
// restored. The OLM bundle turns it on (--monitoring-objects): a bundle
// carrying these objects would fail to install on clusters without those
// kinds. Each write is a server-side apply; a refusal is logged in the API
// server's words and shows in macvirt_monitoring_objects_ready.
type MonitoringObjects struct {
	Client    client.Client
	Mapper    meta.RESTMapper
	Namespace string
	Log       logr.Logger
	// Resync is how often the objects are written again (ten minutes when 0).
	Resync time.Duration
}

// NeedLeaderElection says only the leader writes.
func (m *MonitoringObjects) NeedLeaderElection() bool { return true }

// Start writes the objects until ctx ends.
func (m *MonitoringObjects) Start(ctx context.Context) error {
	resync := m.Resync
	if resync <= 0 {
		resync = 10 * time.Minute
	}
	backoff := time.Second
	for {
		wait := resync
		if err := m.Ensure(ctx); err != nil {
			m.Log.Error(err, "Writing the monitoring objects failed", "retryIn", backoff)
			wait = backoff
			backoff = min(backoff*2, resync)
		} else {
			backoff = time.Second
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// Ensure applies each object whose kind the cluster serves.
func (m *MonitoringObjects) Ensure(ctx context.Context) error {
	objs, err := monitoring.Objects(m.Namespace)
	if err != nil {
		return err
	}
	var errs []error
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		if _, err := m.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			if meta.IsNoMatchError(err) {
				monitoringObjectsReady.DeleteLabelValues(gvk.Kind)
				m.Log.V(1).Info("The cluster does not serve this kind; not writing it", "kind", gvk.String(), "name", o.GetName())
				continue
			}
			errs = append(errs, fmt.Errorf("looking up %s: %w", gvk, err))
			continue
		}
		if err := m.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("macvirt-operator"), client.ForceOwnership); err != nil {
			monitoringObjectsReady.WithLabelValues(gvk.Kind).Set(0)
			errs = append(errs, fmt.Errorf("applying %s %s/%s: %w", gvk.Kind, o.GetNamespace(), o.GetName(), err))
			continue
		}
		monitoringObjectsReady.WithLabelValues(gvk.Kind).Set(1)
	}
	return errors.Join(errs...)
}
