// Package vmstop asks KubeVirt to stop a VirtualMachine gracefully through
// virt-api's stop subresource (group subresources.kubevirt.io). KubeVirt
// then sends an ACPI power-off and waits up to the given grace period before
// forcing the VM off, which is the only safe way to stop macOS: a killed
// guest corrupts APFS.
package vmstop

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// SubresourceGroupVersion is virt-api's aggregated API group.
var SubresourceGroupVersion = schema.GroupVersion{Group: "subresources.kubevirt.io", Version: "v1"}

// MissingRule is the RBAC rule the stop call needs, named in errors so a
// human can fix a 403 without reading the code.
const MissingRule = `"update" on "virtualmachines/stop" in API group "subresources.kubevirt.io"`

// Stopper requests a graceful stop of a VirtualMachine.
type Stopper interface {
	// Stop asks KubeVirt to shut the VM down within gracePeriodSeconds.
	Stop(ctx context.Context, namespace, name string, gracePeriodSeconds int64) error
}

// RESTStopper calls the stop subresource over the API server (or any
// endpoint serving the same path, such as a proxy in front of it in tests).
type RESTStopper struct {
	client rest.Interface
}

// NewRESTStopper builds a Stopper from a client configuration.
func NewRESTStopper(cfg *rest.Config, httpClient *http.Client) (*RESTStopper, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &SubresourceGroupVersion
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON
	c.NegotiatedSerializer = serializer.NewCodecFactory(runtime.NewScheme()).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	var (
		rc  *rest.RESTClient
		err error
	)
	if httpClient != nil {
		rc, err = rest.RESTClientForConfigAndClient(c, httpClient)
	} else {
		rc, err = rest.RESTClientFor(c)
	}
	if err != nil {
		return nil, fmt.Errorf("building client for %s: %w", SubresourceGroupVersion, err)
	}
	return &RESTStopper{client: rc}, nil
}

// Stop issues PUT .../namespaces/{ns}/virtualmachines/{name}/stop with the
// grace period. Every failure is returned with the HTTP status and, for a
// 403 or a 404 of the API itself, the rule or component that is missing.
func (s *RESTStopper) Stop(ctx context.Context, namespace, name string, gracePeriodSeconds int64) error {
	body, err := json.Marshal(&kubevirtv1.StopOptions{GracePeriod: &gracePeriodSeconds})
	if err != nil {
		return fmt.Errorf("encoding stop options: %w", err)
	}
	res := s.client.Put().
		Namespace(namespace).
		Resource("virtualmachines").
		Name(name).
		SubResource("stop").
		Body(body).
		Do(ctx)
	if err := res.Error(); err != nil {
		return Explain(err)
	}
	return nil
}

// Explain adds what a human needs to know to an error of the stop call.
func Explain(err error) error {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("stop request forbidden; the operator's ClusterRole needs %s: %w", MissingRule, err)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("stop subresource answered 404: the VirtualMachine is gone or virt-api does not serve subresources.kubevirt.io/v1: %w", err)
	default:
		return fmt.Errorf("stop request failed: %w", err)
	}
}
