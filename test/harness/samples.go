package harness

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/operator"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// ApplySamples creates what the samples need that a cluster would already
// have (the operator's namespace, where it keeps class snapshots, unless it
// exists; the golden-image DataSources, in the images namespace once the
// operator has made it, as it does at start), then config/samples, with the
// sample pool's idle target set to machines when that is not 0. The pool's
// namespace is the operator's to make, as the install's.
func ApplySamples(ctx context.Context, c client.Client, machines int32) error {
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operator.DefaultNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		err := c.Get(ctx, client.ObjectKey{Name: operator.DefaultImagesNamespace}, &corev1.Namespace{})
		if err == nil {
			break
		}
		if !apierrors.IsNotFound(err) || time.Now().After(deadline) {
			return fmt.Errorf("the operator did not create the images namespace %s: %w", operator.DefaultImagesNamespace, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	for _, name := range []string{"sonoma", "opencore-1.0"} {
		// The golden image's PVC: the simulated CDI, like CDI, clones only
		// from a DataSource whose source PVC exists.
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "macvirt-images", Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Gi")}},
			}}
		if err := c.Create(ctx, pvc); err != nil {
			return err
		}
		ds := &cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Namespace: "macvirt-images", Name: name},
			Spec: cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "macvirt-images", Name: name}}}}
		if err := c.Create(ctx, ds); err != nil {
			return err
		}
	}
	dir := filepath.Join(cluster.RepoRoot(), "config", "samples")
	for _, file := range []string{"macvirt_v1alpha1_macclass.yaml", "macvirt_v1alpha1_macpool.yaml", "macvirt_v1alpha1_macclaim.yaml"} {
		objs, err := ReadObjects(filepath.Join(dir, file), c.Scheme())
		if err != nil {
			return err
		}
		for _, o := range objs {
			if p, ok := o.(*macvirtv1alpha1.MacPool); ok && machines > 0 {
				p.Spec.Idle = &machines
				if p.Spec.MaxMachines != nil && *p.Spec.MaxMachines < machines+1 {
					maxM := machines + 1
					p.Spec.MaxMachines = &maxM
				}
			}
			if err := c.Create(ctx, o); err != nil {
				return fmt.Errorf("applying %s: %w", file, err)
			}
		}
	}
	return nil
}

// CIClass is the class for CI (Options.CIClass): the sample class whose Macs
// heartbeat every 5 s, so a Mac gone silent is seen within 20 s. A warm
// Mac takes its runner or agent through its watch, whatever the interval
// (docs/github-actions.md#how-long-a-job-waits).
const CIClass = "ci-runner"

// ApplyCIClass creates CIClass from the sample class, unless it exists.
func ApplyCIClass(ctx context.Context, c client.Client) error {
	class, err := sampleClass(c.Scheme())
	if err != nil {
		return err
	}
	class.Name = CIClass
	class.Spec.Description = "the sample class for CI runners: its Macs heartbeat every 5 s"
	class.Spec.Lifecycle.HeartbeatTimeout = &metav1.Duration{Duration: 20 * time.Second}
	return createIfMissing(ctx, c, class)
}

// ApplyTenantClass creates TenantClass from the sample class, unless it
// exists.
func ApplyTenantClass(ctx context.Context, c client.Client) error {
	class, err := sampleClass(c.Scheme())
	if err != nil {
		return err
	}
	class.Name = TenantClass
	class.Spec.Description = "the sample class, on demand, with Screen Sharing; ClusterIP (through the tunnel) or NodePort"
	onDemand := true
	class.Spec.Tenancy.OnDemand = &onDemand
	class.Spec.Tenancy.AllowedAccessTypes = []macvirtv1alpha1.AccessType{macvirtv1alpha1.AccessClusterIP, macvirtv1alpha1.AccessNodePort}
	class.Spec.Access.DefaultType = macvirtv1alpha1.AccessClusterIP
	class.Spec.Access.ScreenSharing = true
	return createIfMissing(ctx, c, class)
}

// sampleClass reads config/samples' class.
func sampleClass(scheme *runtime.Scheme) (*macvirtv1alpha1.MacClass, error) {
	objs, err := ReadObjects(filepath.Join(cluster.RepoRoot(), "config", "samples", "macvirt_v1alpha1_macclass.yaml"), scheme)
	if err != nil {
		return nil, err
	}
	if len(objs) != 1 {
		return nil, fmt.Errorf("the sample class file holds %d objects, want 1", len(objs))
	}
	class, ok := objs[0].(*macvirtv1alpha1.MacClass)
	if !ok {
		return nil, fmt.Errorf("the sample class file holds a %T", objs[0])
	}
	return class, nil
}
