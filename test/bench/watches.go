package main

import (
	"bufio"
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestagent"
	"github.com/macvirt/macvirt/internal/guestendpoint"
	"github.com/macvirt/macvirt/internal/guestprotocol"
	"github.com/macvirt/macvirt/internal/pki"
	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
)

// The watch figure: the agent endpoint's memory and goroutines with n
// guest agents each holding its watch. The endpoint (the real Server and
// Handler over TLS, machines read from an in-memory client as from the
// operator's cache) runs in a process of its own (-watch-server), and the
// n agents (the real guestagent.Client, one TLS connection each, as n Macs
// have) in another (-watch-agents), so each process's figures are its own.

const watchNS = "bench-watch"

// benchWatches runs the endpoint's process and prints what it measured.
func benchWatches(ctx context.Context, n int) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, self, "-watch-server", strconv.Itoa(n)).CombinedOutput() //nolint:gosec // this binary.
	if err != nil {
		return fmt.Errorf("the endpoint's process for the watch figure: %w: %s", err, out)
	}
	fmt.Printf("\n%s", out)
	return nil
}

// watchServer is the endpoint's process: it serves n machines, starts the
// agents' process, and measures once all n watches are held.
func watchServer(n int) error {
	dir, err := os.MkdirTemp("", "macvirt-bench-watch-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	ca, err := pki.NewCA("macvirt-bench", time.Hour)
	if err != nil {
		return err
	}
	certPEM, keyPEM, err := ca.Issue(x509.Certificate{DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	if err != nil {
		return err
	}
	for name, b := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "ca.crt": ca.PEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
	}
	scheme, err := macvirtscheme.New()
	if err != nil {
		return err
	}
	objs := []kruntime.Object{&macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}}
	for i := range n {
		objs = append(objs, &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("m-%d", i), Namespace: watchNS,
			Annotations: map[string]string{macvirtv1alpha1.AnnotationAgentTokenHash: guestprotocol.HashToken(watchToken(i))}},
			Spec: macvirtv1alpha1.MacMachineSpec{ClassName: "bench"}})
	}
	h := &guestendpoint.Handler{Client: fake.NewClientBuilder().WithScheme(scheme).WithRuntimeObjects(objs...).Build()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	srv := &guestendpoint.Server{Addr: addr, CertDir: dir, Handler: h}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- srv.Start(ctx) }()
	for srv.ListeningSince().IsZero() {
		select {
		case err := <-served:
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
	baseHeap, baseStack, baseG := heapInUse(), stackInUse(), runtime.NumGoroutine()
	baseRSS := procStatus("VmRSS:")
	self, err := os.Executable()
	if err != nil {
		return err
	}
	agents := exec.CommandContext(ctx, self, "-watch-agents", strconv.Itoa(n), "-watch-endpoint", "https://"+addr, //nolint:gosec // this binary.
		"-watch-ca", filepath.Join(dir, "ca.crt"))
	agents.Stderr = os.Stderr
	stdout, err := agents.StdoutPipe()
	if err != nil {
		return err
	}
	start := time.Now()
	if err := agents.Start(); err != nil {
		return err
	}
	defer func() { _ = agents.Process.Kill(); _ = agents.Wait() }()
	for h.Watching() < n {
		if time.Since(start) > 5*time.Minute {
			return fmt.Errorf("%d of %d watches held after 5 minutes", h.Watching(), n)
		}
		select {
		case err := <-served:
			return fmt.Errorf("the endpoint stopped: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	connected := time.Since(start)
	// The steady state: each collection halves the stacks that use less
	// than a quarter of their size, as the operator's collections do over
	// the minutes a watch is held.
	for range 4 {
		runtime.GC()
	}
	heap, stack, g := heapInUse(), stackInUse(), runtime.NumGoroutine()
	rss := procStatus("VmRSS:")
	agentsSaid, _ := bufio.NewReader(stdout).ReadString('\n')
	per := func(v, base uint64) float64 { return float64(v-base) / float64(n) / 1024 }
	fmt.Printf("watches: %d guest agents each holding its watch on the agent endpoint (TLS, one connection each), all held %s after they started\n"+
		"  the endpoint's process: heap in use %.1f MiB (+%.1f KiB per agent), goroutine stacks %.1f MiB (+%.1f KiB per agent), "+
		"%d goroutines (+%.2f per agent), resident set %s (%s before)\n  %s",
		n, connected.Round(time.Millisecond), mib(heap), per(heap, baseHeap), mib(stack), per(stack, baseStack),
		g, float64(g-baseG)/float64(n), rss, baseRSS, agentsSaid)
	return nil
}

func stackInUse() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.StackInuse
}

func watchToken(i int) string { return fmt.Sprintf("bench-watch-token-%06d-0123456789abcdef", i) }

// watchAgents is the agents' process: n clients, each with a connection
// of its own, take their machine's revision and then hold the watch until
// the process is killed.
func watchAgents(n int, endpoint, caFile string) error {
	caPEM, err := os.ReadFile(caFile) //nolint:gosec // the bench's own file.
	if err != nil {
		return err
	}
	ctx := context.Background()
	var failed, retried atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	held := make(chan struct{}, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := guestagent.NewClient(&guestagent.Config{Endpoint: endpoint, CABundle: caPEM, Token: watchToken(i),
				Namespace: watchNS, Machine: fmt.Sprintf("m-%d", i)})
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				held <- struct{}{}
				return
			}
			// As the agent does: a failed watch is tried again after a
			// backoff; the first answer is the revision to hold.
			rev, first := "", true
			for tries := 0; ; {
				answer, err := c.Watch(ctx, rev)
				if err != nil {
					retried.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					time.Sleep(guestagent.Backoff(tries, time.Second, 30*time.Second))
					tries++
					continue
				}
				tries, rev = 0, answer
				if first {
					first = false
					held <- struct{}{}
				}
			}
		}()
		if i%200 == 199 {
			time.Sleep(100 * time.Millisecond) // a fleet's agents do not start in one instant.
		}
	}
	for range n {
		<-held
	}
	msg := ""
	if e := firstErr.Load(); e != nil {
		msg = fmt.Sprintf(" (first error: %s)", e)
	}
	fmt.Printf("the agents' process: %d watching, %d failed, %d watches retried%s, resident set %s\n", n-int(failed.Load()), failed.Load(),
		retried.Load(), msg, procStatus("VmRSS:"))
	wg.Wait()
	return nil
}
