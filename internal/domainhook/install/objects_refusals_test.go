package install

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	pluginv1alpha1 "kubevirt.io/api/plugin/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/macvirt/macvirt/internal/domainhook/contract"
	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
)

// The loop reports in macvirt_domain_hook_ready whether its last write
// succeeded, and retries a refused one until it goes through.
func TestObjectsReportRefusalsAndRetry(t *testing.T) {
	s, err := macvirtscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	refuse := make(chan bool, 1)
	refuse <- true
	var refusing bool
	c := fake.NewClientBuilder().WithScheme(s).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			select {
			case refusing = <-refuse:
			default:
			}
			if refusing {
				return apierrors.NewForbidden(schema.GroupResource{Group: "plugin.kubevirt.io", Resource: "plugins"}, obj.GetName(),
					errFrozen)
			}
			return c.Create(ctx, obj, opts...)
		},
	}).Build()
	gauge := domainHookReady.WithLabelValues(string(contract.TransportPluginCEL))
	d := &Objects{Client: c, Reader: c, Transport: contract.TransportPluginCEL, Log: testr.New(t), Resync: time.Hour}
	if err := d.Ensure(context.Background()); err == nil || !strings.Contains(err.Error(), "frozen by the platform team") {
		t.Fatalf("a refused create: %v, want the API server's words", err)
	}
	gauge.Set(1)
	refuse <- true
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Start(ctx) }()
	waitFor := func(want float64) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if testutil.ToFloat64(gauge) == want {
				return
			}
		}
		t.Fatalf("macvirt_domain_hook_ready stayed %v, want %v", testutil.ToFloat64(gauge), want)
	}
	waitFor(0)
	refuse <- false // the next try (after 1 s of backoff) goes through
	waitFor(1)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	p := &pluginv1alpha1.Plugin{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: Name}, p); err != nil {
		t.Errorf("the Plugin was not written after the refusal ended: %v", err)
	}
}

var errFrozen = errString("plugins are frozen by the platform team")

type errString string

func (e errString) Error() string { return string(e) }
