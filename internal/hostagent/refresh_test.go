package hostagent

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

func refreshedClass(name, image, schedule string, runtime macvirtv1alpha1.RuntimeType) macvirtv1alpha1.MacClass {
	c := macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
	c.Spec.Runtime = runtime
	c.Spec.Image.Source = &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: ptr.To("docker://" + image)}}
	if schedule != "" {
		c.Spec.Image.Refresh = &macvirtv1alpha1.ImageRefresh{Schedule: schedule}
	}
	return c
}

// An image is pulled again when its class's schedule came due since the
// last time, and only where the Mac caches it; a class seen the first time
// starts its schedule; KubeVirt classes are CDI's.
func TestDueRefreshes(t *testing.T) {
	const seq, son = "ghcr.io/cirruslabs/macos-sequoia-base:latest", "ghcr.io/cirruslabs/macos-sonoma-base:latest"
	classes := []macvirtv1alpha1.MacClass{
		refreshedClass("hourly", seq, "0 * * * *", macvirtv1alpha1.RuntimeVirtualization),
		refreshedClass("hourly-too", seq, "0 * * * *", macvirtv1alpha1.RuntimeVirtualization),
		refreshedClass("uncached", son, "0 * * * *", macvirtv1alpha1.RuntimeVirtualization),
		refreshedClass("never", seq, "", macvirtv1alpha1.RuntimeVirtualization),
		refreshedClass("kubevirt", seq, "* * * * *", macvirtv1alpha1.RuntimeKubeVirt),
	}
	cached := []string{seq}
	last := map[string]time.Time{}
	t0 := time.Date(2026, 12, 7, 5, 50, 0, 0, time.UTC)
	for _, step := range []struct {
		at   time.Time
		want []string
	}{
		{t0, nil}, // first seen: the schedule starts
		{t0.Add(9 * time.Minute), nil},
		{t0.Add(10 * time.Minute), []string{seq}}, // 06:00, once for both classes
		{t0.Add(11 * time.Minute), nil},
		{t0.Add(2 * time.Hour), []string{seq}}, // due once, however late
	} {
		// What the Mac pulls: the due images it caches.
		var got []string
		for _, image := range dueRefreshes(classes, last, step.at) {
			if cachedImage(cached, image) {
				got = append(got, image)
			}
		}
		if !slices.Equal(got, step.want) {
			t.Fatalf("at %s: %v, want %v", step.at.Format("15:04"), got, step.want)
		}
	}
	if _, ok := last["kubevirt"]; ok {
		t.Error("a KubeVirt class's schedule is kept by the agent")
	}
}

// ImageRefreshFailed carries the tool's words for each image whose last
// refresh failed, and says Unsupported where the tool cannot refresh.
func TestRefreshCondition(t *testing.T) {
	if st, _, _ := refreshCondition(nil); st != metav1.ConditionFalse {
		t.Fatalf("no failure: %s", st)
	}
	st, reason, msg := refreshCondition(map[string]error{
		"ghcr.io/a:1": errors.New(`Error: UnexpectedHTTPStatusCode(when: "pulling manifest", code: 404, ...)`)})
	if st != metav1.ConditionTrue || reason != "PullFailed" || !strings.Contains(msg, `ghcr.io/a:1: Error: UnexpectedHTTPStatusCode(when: "pulling manifest", code: 404`) {
		t.Fatalf("a failed pull: %s %s %q", st, reason, msg)
	}
	if _, reason, _ := refreshCondition(map[string]error{"ghcr.io/a:1": fmt.Errorf("lume: %w", errors.ErrUnsupported)}); reason != "Unsupported" {
		t.Fatalf("a tool that cannot refresh: reason %s", reason)
	}
}
