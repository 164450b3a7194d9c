package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/operator"
)

// benchMemory reports the manager's heap with count MacMachines in its
// cache: heap in use after a GC with the manager synced, minus before.
func benchMemory(ctx context.Context, cfg *rest.Config, c client.Client, count int) error {
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
	before := heapInUse()
	mgr, err := managerFor(cfg)
	if err != nil {
		return err
	}
	if err := operator.Setup(mgr, operator.Options{NameSuffix: "-memory", Controllers: []operator.Controller{
		operator.ClaimController, operator.PoolController, operator.ClassController}}); err != nil {
		return err
	}
	stop, err := startManager(ctx, mgr)
	if err != nil {
		return err
	}
	defer stop()
	var list macvirtv1alpha1.MacMachineList
	if err := mgr.GetCache().List(ctx, &list, client.InNamespace(ns)); err != nil {
		return err
	}
	after := heapInUse()
	fmt.Printf("\nmemory: %d MacMachines in the manager's cache (created in %s): heap in use %.1f MiB (%.1f MiB more than before the manager), process peak RSS %s (target under 300 MiB)\n",
		len(list.Items), created.Round(time.Second), mib(after), mib(after-before), peakRSS())
	return nil
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// peakRSS reads the process's high-water resident set size.
func peakRSS() string {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
