package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// benchPVs runs kube-controller-manager's PV binder (client limit lifted)
// and binds n PVCs over n pre-created PVs, timed like the claims: from
// each create call to the first watch event showing it Bound.
func benchPVs(ctx context.Context, env *envtest.Environment, c client.Client, n int, kcmPath, label string) (result, error) {
	const ns, class = "bench-pvcs", "bench"
	mode := storagev1.VolumeBindingImmediate
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return result{}, err
	}
	if err := c.Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: class},
		Provisioner: "kubernetes.io/no-provisioner", VolumeBindingMode: &mode}); err != nil {
		return result{}, err
	}
	if err := parallel(n+1, func(i int) error { return c.Create(ctx, pv(fmt.Sprintf("pv-%d", i), class)) }); err != nil {
		return result{}, err
	}
	kcm, err := startKCM(env, kcmPath)
	if err != nil {
		return result{}, err
	}
	defer kcm.stop()
	// One PVC first, so the measurement starts with the binder running.
	if err := c.Create(ctx, pvc("warmup", ns, class)); err != nil {
		return result{}, err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got := &corev1.PersistentVolumeClaim{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "warmup"}, got); err == nil && got.Status.Phase == corev1.ClaimBound {
			break
		}
		if time.Now().After(deadline) {
			return result{}, fmt.Errorf("kube-controller-manager bound no PVC within 2 minutes")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The binder's volume worker writes each PV's status Available first:
	// that work is setting up, not binding.
	if err := waitAvailable(ctx, c, n); err != nil {
		return result{}, err
	}
	r, err := measure(ctx, env.Config, c, side{label: label, n: n, binder: kcm,
		build: func(i int) client.Object { return pvc(fmt.Sprintf("c-%d", i), ns, class) },
		watches: []watchSpec{{list: &corev1.PersistentVolumeClaimList{}, ns: ns, stages: func(o runtime.Object) (string, bool, bool) {
			p, ok := o.(*corev1.PersistentVolumeClaim)
			if !ok || p.Name == "warmup" {
				return "", false, false
			}
			// A bound PVC is ready for its pod.
			bound := p.Status.Phase == corev1.ClaimBound
			return p.Name, bound, bound
		}}}})
	if err != nil {
		return r, err
	}
	r.bytes, err = sizeOf(ctx, c, corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"), types.NamespacedName{Namespace: ns, Name: "c-0"})
	return r, err
}

// waitAvailable waits until n PVs are Available.
func waitAvailable(ctx context.Context, c client.Client, n int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var list corev1.PersistentVolumeList
		if err := c.List(ctx, &list); err != nil {
			return err
		}
		available := 0
		for i := range list.Items {
			if list.Items[i].Status.Phase == corev1.VolumeAvailable {
				available++
			}
		}
		if available >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d PVs Available after 2 minutes", available, n)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func pv(name, class string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              class,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv/" + name}},
		},
	}
}

func pvc(name, ns, class string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &class,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
}

// kcmProcess is kube-controller-manager running the PV binder.
type kcmProcess struct {
	cmd  *exec.Cmd
	stop func()
}

func (k *kcmProcess) pid() int                { return k.cmd.Process.Pid }
func (k *kcmProcess) begin(string) error      { return nil }
func (k *kcmProcess) end() (*opReport, error) { return nil, nil }

// startKCM runs kube-controller-manager with only the PV binder, as an
// administrator of the envtest API server.
func startKCM(env *envtest.Environment, path string) (*kcmProcess, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("%s: %w (run 'make envtest')", path, err)
	}
	kc, cleanup, err := adminKubeconfig(env, "kube-controller-manager")
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(kc)
	cmd := exec.Command(path, //nolint:gosec // the binary built by make envtest.
		"--kubeconfig="+kc, "--controllers=persistentvolume-binder-controller", "--leader-elect=false",
		"--kube-api-qps=1000", "--kube-api-burst=2000", "--secure-port=0", "--v=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	logFile, err := os.Create(filepath.Join(dir, "kube-controller-manager.log")) //nolint:gosec // a fresh temp dir.
	if err == nil {
		cmd.Stdout, cmd.Stderr = logFile, logFile
	}
	if err := cmd.Start(); err != nil {
		cleanup()
		return nil, err
	}
	return &kcmProcess{cmd: cmd, stop: func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if logFile != nil {
			_ = logFile.Close()
		}
		if os.Getenv("BENCH_KEEP_LOGS") == "" {
			cleanup()
		} else {
			fmt.Fprintln(os.Stderr, "kube-controller-manager log kept in", dir)
		}
	}}, nil
}

// adminKubeconfig writes a kubeconfig of a new administrator of the envtest
// API server into a directory of its own, which cleanup removes.
func adminKubeconfig(env *envtest.Environment, name string) (path string, cleanup func(), err error) {
	user, err := env.ControlPlane.AddUser(envtest.User{Name: name, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", nil, err
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "macvirt-bench-")
	if err != nil {
		return "", nil, err
	}
	path = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	return path, func() { _ = os.RemoveAll(dir) }, nil
}
