package harness

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/internal/localnet"
	"github.com/macvirt/macvirt/internal/operator"
	"github.com/macvirt/macvirt/internal/tunnel"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

// tunnelHost is the tunnel Service's name, which the API server checks the
// operator's serving certificate against.
var tunnelHost = tunnel.ServiceName + "." + operator.DefaultNamespace + ".svc"

// installTunnel does what config/tunnel does in a cluster: the tunnel's
// Service in the operator's namespace, routed by the cluster network to
// where every operator of this system serves the tunnel, and the APIService
// from config/tunnel, trusting the dev server's CA (cert-manager injects
// the install's). The operator dials Macs as its pod would: from the
// operator's namespace with its pods' labels, judged by the machines'
// NetworkPolicies.
func (s *System) installTunnel(ctx context.Context, c *cluster.Cluster) error {
	port, err := localnet.FreePort(s.local.Host)
	if err != nil {
		return err
	}
	local := net.JoinHostPort(s.local.Host, strconv.Itoa(port))
	sim := s.Simulator
	s.tunnel = operator.TunnelEndpoint{Addr: local,
		Dial: func(ctx context.Context, _, address string) (net.Conn, error) {
			return sim.DialFrom(ctx, simulator.Peer{Namespace: operator.DefaultNamespace, Labels: operator.PodLabels}, address)
		}}
	if err := createIfMissing(ctx, s.admin, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operator.DefaultNamespace}}); err != nil {
		return err
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: operator.DefaultNamespace, Name: tunnel.ServiceName},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "tunnel", Port: 443, Protocol: corev1.ProtocolTCP,
			TargetPort: intstr.FromString("tunnel")}}, Selector: operator.PodLabels}}
	if err := s.admin.Create(ctx, svc); err != nil {
		return fmt.Errorf("creating the tunnel's Service: %w", err)
	}
	if err := c.ServeService(ctx, s.admin, svc, local); err != nil {
		return err
	}
	objs, err := cluster.ReadObjects(filepath.Join(cluster.RepoRoot(), "config", "tunnel", "apiservice.yaml"))
	if err != nil {
		return err
	}
	if len(objs) != 1 || objs[0].GetKind() != "APIService" {
		return errors.New("config/tunnel/apiservice.yaml holds no single APIService")
	}
	api := objs[0]
	if err := unstructured.SetNestedMap(api.Object, map[string]any{"name": svc.Name, "namespace": svc.Namespace, "port": int64(443)},
		"spec", "service"); err != nil {
		return err
	}
	if err := unstructured.SetNestedField(api.Object, base64.StdEncoding.EncodeToString(s.local.CABundle), "spec", "caBundle"); err != nil {
		return err
	}
	return s.admin.Create(ctx, api)
}

// tunnelAvailable reports an error until the API server's aggregator finds
// the tunnel's APIService available.
func (s *System) tunnelAvailable(ctx context.Context) error {
	api := &unstructured.Unstructured{}
	api.SetAPIVersion("apiregistration.k8s.io/v1")
	api.SetKind("APIService")
	if err := s.admin.Get(ctx, client.ObjectKey{Name: tunnel.APIServiceName}, api); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("no APIService %s", tunnel.APIServiceName)
		}
		return err
	}
	if !cluster.APIServiceAvailable(api) {
		return fmt.Errorf("APIService %s is not available yet: %v", tunnel.APIServiceName, api.Object["status"])
	}
	return nil
}
