package render_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// launcherFacts is what hack/kubevirt/domainxml wrote, with KubeVirt v1.9.0's own
// code, for each golden rendering: virt-api's admission causes
// (ValidateVirtualMachineInstanceSpec) and the virt-launcher pod's compute
// container as virt-controller renders it (TemplateService.
// RenderLaunchManifest).
type launcherFacts struct {
	Admission    []metav1.StatusCause        `json:"admission"`
	Compute      corev1.ResourceRequirements `json:"compute"`
	NodeSelector map[string]string           `json:"nodeSelector"`
	Tolerations  []corev1.Toleration         `json:"tolerations"`
}

// TestEveryVMAsksTheSchedulerForOneMacOSSlot checks, on what KubeVirt
// itself makes of every golden rendering, that virt-api admits the
// instance and that its virt-launcher pod requests one macOS slot, with
// the limit equal to the request as Kubernetes demands of an extended
// resource (it cannot be overcommitted), so no Mac runs more macOS VMs
// than it advertises slots.
func TestEveryVMAsksTheSchedulerForOneMacOSSlot(t *testing.T) {
	renderings, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil || len(renderings) == 0 {
		t.Fatalf("no golden renderings: %v", err)
	}
	slot := corev1.ResourceName(macvirtv1alpha1.ResourceMacOSSlots)
	for _, path := range renderings {
		name := strings.TrimSuffix(filepath.Base(path), ".yaml")
		t.Run(name, func(t *testing.T) {
			rendering, err := os.ReadFile(path) //nolint:gosec // a golden file of this package.
			if err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(filepath.Join("testdata", "launcher", name+".launcher.yaml")) //nolint:gosec // a golden file of this package.
			if err != nil {
				t.Fatalf("%v (make golden writes it)", err)
			}
			first, _, _ := bytes.Cut(raw, []byte("\n"))
			if want := fmt.Sprintf("(sha256 %x)", sha256.Sum256(rendering)); !bytes.Contains(first, []byte(want)) {
				t.Fatalf("testdata/launcher/%s.launcher.yaml was made from an older rendering; run make golden", name)
			}
			var facts launcherFacts
			if err := yaml.UnmarshalStrict(raw, &facts); err != nil {
				t.Fatal(err)
			}
			if len(facts.Admission) != 0 {
				t.Errorf("virt-api refuses the instance: %+v", facts.Admission)
			}
			one := resource.MustParse("1")
			req, hasReq := facts.Compute.Requests[slot]
			lim, hasLim := facts.Compute.Limits[slot]
			if !hasReq || !hasLim || req.Cmp(one) != 0 || lim.Cmp(one) != 0 {
				t.Errorf("compute container asks for %s request %v (%v), limit %v (%v); want 1 and 1", slot, req.String(), hasReq, lim.String(), hasLim)
			}
			for res, q := range facts.Compute.Requests {
				if !strings.Contains(string(res), "/") || strings.Contains(string(res), "kubernetes.io/") {
					continue
				}
				if l, ok := facts.Compute.Limits[res]; !ok || l.Cmp(q) != 0 {
					t.Errorf("extended resource %s: request %s, limit %s: Kubernetes refuses a pod whose request differs from its limit", res, q.String(), l.String())
				}
			}
			if facts.NodeSelector[macvirtv1alpha1.LabelAppleHardware] != "true" {
				t.Errorf("the pod does not select Apple hardware: %v", facts.NodeSelector)
			}
		})
	}
}
