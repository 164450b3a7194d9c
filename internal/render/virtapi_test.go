package render_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/test/harness"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// TestVirtAPIAdmitsEveryRendering creates every golden rendering's
// VirtualMachine (dry run) in a cluster running KubeVirt's own virt-api,
// with the Sidecar gate the hook-sidecar transport needs, and whose
// virt-operator recorded arm64 as the default architecture (as it does on
// an arm64 control-plane node): virt-api must admit each as it is. Then,
// with the gate off, it must refuse the VM itself, not only its instance at
// start, naming the gate: the operator meets that refusal when it creates
// the machine's VM.
func TestVirtAPIAdmitsEveryRendering(t *testing.T) {
	c := harness.ForTest(t, harness.Options{KubeVirt: cluster.KubeVirtOptions{
		FeatureGates: []string{"Sidecar"}, DefaultArchitecture: "arm64"}}).Admin
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	vms := goldenVMs(t)
	for _, vm := range vms {
		if err := ensureNamespace(ctx, c, vm.GetNamespace()); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, vm.DeepCopy(), client.DryRunAll); err != nil {
			t.Errorf("%s: virt-api refuses the rendered VirtualMachine: %v", vm.GetAnnotations()[goldenFile], err)
		}
	}

	// Guest memory that is not a whole number of 2Mi blocks: the class
	// webhook refuses it (spec.resources.memory), since virt-api refuses
	// the VM, whose maxGuest equals its memory.
	odd := vms[0].DeepCopy()
	for _, f := range []string{"guest", "maxGuest"} {
		if err := unstructured.SetNestedField(odd.Object, "8001Mi", "spec", "template", "spec", "domain", "memory", f); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Create(ctx, odd, client.DryRunAll); err == nil || !strings.Contains(err.Error(), "Guest memory must be 2Mi aligned") {
		t.Errorf("a VM of 8001Mi: got %v, want virt-api's refusal of memory that is not 2Mi aligned", err)
	}

	// Turn the gate off; virt-api follows the KubeVirt CR.
	if err := cluster.SetKubeVirtFeatureGates(ctx, c); err != nil {
		t.Fatal(err)
	}
	vm := vms[0]
	for {
		err := c.Create(ctx, vm.DeepCopy(), client.DryRunAll)
		if err != nil {
			if !strings.Contains(err.Error(), `admission webhook "virtualmachine-validator.kubevirt.io" denied the request`) ||
				!strings.Contains(err.Error(), "Sidecar") {
				t.Fatalf("%s without the Sidecar gate: got %v, want virt-api's refusal naming the gate", vm.GetName(), err)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: virt-api still admits the VM with the Sidecar gate off", vm.GetName())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// goldenFile annotates each golden VM with its file, for messages.
const goldenFile = "test.macvirt.io/golden-file"

// goldenVMs are the VirtualMachines of testdata/*.yaml, in file order.
func goldenVMs(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden renderings: %v", err)
	}
	var vms []*unstructured.Unstructured
	for _, f := range files {
		objs, err := cluster.ReadObjects(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range objs {
			if u.GetKind() != "VirtualMachine" {
				continue
			}
			unstructured.RemoveNestedField(u.Object, "status")
			ann := u.GetAnnotations()
			if ann == nil {
				ann = map[string]string{}
			}
			ann[goldenFile] = filepath.Base(f)
			u.SetAnnotations(ann)
			vms = append(vms, u)
		}
	}
	return vms
}

func ensureNamespace(ctx context.Context, c client.Client, name string) error {
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		return err
	}
	return nil
}
