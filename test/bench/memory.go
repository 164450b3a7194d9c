package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/operator"
)

// benchMemory reports the operator's memory with count MacMachines in its
// cache. The manager runs in a process of its own (this binary again, with
// -memory-of), so its resident set is the operator's alone, not that of a
// bench that has just bound thousands of claims.
func benchMemory(ctx context.Context, env *envtest.Environment, c client.Client, count int) error {
	const ns = "bench-cache"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	start := time.Now()
	if err := parallel(count, func(i int) error {
		return c.Create(ctx, &macvirtv1alpha1.MacMachine{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("m-%d", i), Namespace: ns,
				Labels: map[string]string{macvirtv1alpha1.LabelPool: "cache", macvirtv1alpha1.LabelClass: "bench"},
				// Controlled by a pool, as pool machines are, so the cache
				// indexes them as bindable.
				OwnerReferences: []metav1.OwnerReference{{APIVersion: macvirtv1alpha1.GroupVersion.String(), Kind: "MacPool",
					Name: "cache", UID: "00000000-0000-0000-0000-00000000cace", Controller: ptr.To(true)}}},
			Spec: macvirtv1alpha1.MacMachineSpec{ClassName: "bench", ClassRevision: "0123456789"},
		})
	}); err != nil {
		return err
	}
	created := time.Since(start)
	kubeconfig, cleanup, err := adminKubeconfig(env, "macvirt-bench-memory")
	if err != nil {
		return err
	}
	defer cleanup()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, self, "-memory-of", ns, "-memory-kubeconfig", kubeconfig).CombinedOutput() //nolint:gosec // this binary.
	if err != nil {
		return fmt.Errorf("the operator's process for the memory figure: %w: %s", err, out)
	}
	fmt.Printf("\nmemory: %d MacMachines created in %s; %s", count, created.Round(time.Second), out)
	return nil
}

// memoryOf is the operator's process of benchMemory: it runs the claim,
// pool and class controllers against the API server of kubeconfig until
// the machines of ns are in its cache, then prints its heap and resident
// set and returns.
func memoryOf(kubeconfig, ns string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	base := heapInUse()
	ctx := context.Background()
	op, err := operator.New(ctx, cfg, operator.Options{NameSuffix: "-memory", Controllers: []operator.Controller{
		operator.ClaimController, operator.PoolController, operator.ClassController}})
	if err != nil {
		return err
	}
	// Not stopped: the process ends once it has printed, and its manager
	// with it.
	if _, err := startOperator(ctx, op); err != nil {
		return err
	}
	mgr := op.Manager()
	var list macvirtv1alpha1.MacMachineList
	if err := mgr.GetCache().List(ctx, &list, client.InNamespace(ns)); err != nil {
		return err
	}
	heap := heapInUse()
	rss := procStatus("VmRSS:")
	fmt.Printf("the operator's process (claim, pool and class controllers) with %d in its cache: resident set %s, peak %s "+
		"(target under 150 MiB: %s); heap in use %.1f MiB, %.1f MiB of it for the manager and its cache\n",
		len(list.Items), rss, procStatus("VmHWM:"), underMiB(rss, 150), mib(heap), mib(heap-base))
	return nil
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// procStatus reads one of this process's memory figures (VmRSS: resident
// now; VmHWM: the high-water mark).
func procStatus(field string) string {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// underMiB says whether a /proc figure ("123456 kB") is under limit MiB.
func underMiB(figure string, limit float64) string {
	kb, ok := strings.CutSuffix(figure, " kB")
	v, err := strconv.ParseFloat(strings.TrimSpace(kb), 64)
	if !ok || err != nil {
		return "unknown"
	}
	return verdict(v/1024 < limit)
}
