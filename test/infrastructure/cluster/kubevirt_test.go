package cluster_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/test/harness"
)

// TestKubeVirtsOwnControlPlaneAnswers starts a cluster with KubeVirt's own
// virt-api and virt-controller and checks each answers as in a real
// cluster: virt-api's admission refuses a VM in its own words, a running VM
// becomes a VMI and a virt-launcher pod by virt-controller's hand, and the
// `stop` subresource, reached through API aggregation, halts it.
func TestKubeVirtsOwnControlPlaneAnswers(t *testing.T) {
	world := harness.ForTest(t, harness.Options{})
	cluster, c := world.Cluster, world.Admin
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "builds"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}

	// A disk with no volume of its name: KubeVirt's schema accepts it,
	// virt-api's validating webhook does not.
	bad := vm(ns.Name, "orphan-disk")
	bad.Spec.Template.Spec.Domain.Devices.Disks = append(bad.Spec.Template.Spec.Domain.Devices.Disks, kubevirtv1.Disk{Name: "nowhere"})
	err := c.Create(ctx, bad)
	if err == nil || !strings.Contains(err.Error(), `admission webhook "virtualmachine-validator.kubevirt.io" denied the request`) ||
		!strings.Contains(err.Error(), "nowhere") {
		t.Fatalf("creating a VM with a disk and no volume: got %v, want virt-api's refusal naming the disk", err)
	}

	good := vm(ns.Name, "build-1")
	if err := c.Create(ctx, good); err != nil {
		t.Fatalf("creating a valid VM: %v", err)
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	eventually(ctx, t, "virt-controller creates the VMI", func() error {
		return c.Get(ctx, client.ObjectKeyFromObject(good), vmi)
	})
	if owner := metav1.GetControllerOf(vmi); owner == nil || owner.Kind != "VirtualMachine" || owner.Name != good.Name {
		t.Errorf("the VMI's controller is %v, want VirtualMachine %s", owner, good.Name)
	}
	eventually(ctx, t, "virt-controller creates the virt-launcher pod", func() error {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(ns.Name), client.MatchingLabels{kubevirtv1.CreatedByLabel: string(vmi.UID)}); err != nil {
			return err
		}
		if len(pods.Items) != 1 {
			return fmt.Errorf("%d virt-launcher pods", len(pods.Items))
		}
		return nil
	})

	// The APFS-safe stop goes through this subresource.
	stop(ctx, t, cluster.Config, good)
	eventually(ctx, t, "the stop subresource halts the VM and virt-controller stops its VMI", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(good), good); err != nil {
			return err
		}
		if rs := good.Spec.RunStrategy; rs == nil || *rs != kubevirtv1.RunStrategyHalted {
			return fmt.Errorf("runStrategy %v", rs)
		}
		err := c.Get(ctx, client.ObjectKeyFromObject(good), vmi)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if vmi.DeletionTimestamp == nil {
			return fmt.Errorf("VMI not being deleted")
		}
		return nil
	})
}

func vm(ns, name string) *kubevirtv1.VirtualMachine {
	return &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(kubevirtv1.RunStrategyAlways),
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				Spec: kubevirtv1.VirtualMachineInstanceSpec{
					Domain: kubevirtv1.DomainSpec{
						Resources: kubevirtv1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
						Devices:   kubevirtv1.Devices{Disks: []kubevirtv1.Disk{{Name: "root"}}},
					},
					Volumes: []kubevirtv1.Volume{{
						Name:         "root",
						VolumeSource: kubevirtv1.VolumeSource{ContainerDisk: &kubevirtv1.ContainerDiskSource{Image: "example.com/macos:15"}},
					}},
				},
			},
		},
	}
}

// stop calls the VM's stop subresource as kubectl-virt does.
func stop(ctx context.Context, t *testing.T, cfg *rest.Config, vm *kubevirtv1.VirtualMachine) {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("%s/apis/subresources.kubevirt.io/v1/namespaces/%s/virtualmachines/%s/stop", strings.TrimSuffix(cfg.Host, "/"), vm.Namespace, vm.Name)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK {
		t.Fatalf("stop %s/%s: %s: %s", vm.Namespace, vm.Name, resp.Status, body)
	}
}

func eventually(ctx context.Context, t *testing.T, what string, check func() error) {
	t.Helper()
	var err error
	for {
		if err = check(); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
