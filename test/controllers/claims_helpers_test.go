package controllers_test

import (
	"context"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// guests plays the guest agents of one namespace; paused, they are as
// silent as agents whose endpoint is down.
type guests struct {
	// mu is held for a whole round of heartbeats, so Pause returns only
	// once no heartbeat is on its way.
	mu     sync.Mutex
	paused bool
}

// Pause silences the guests; Resume lets them heartbeat again.
func (g *guests) Pause()  { g.mu.Lock(); g.paused = true; g.mu.Unlock() }
func (g *guests) Resume() { g.mu.Lock(); g.paused = false; g.mu.Unlock() }

func (g *guests) round(ctx context.Context, ns string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.paused {
		heartbeatRunning(ctx, ns)
	}
}

// startGuests plays the guest agent of every running machine in ns: it
// heartbeats them until the test ends, reporting the address a guest behind
// KubeVirt's masquerade binding sees (10.0.2.2), as a real one does.
func startGuests(ns string) *guests {
	g := &guests{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	DeferCleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				g.round(ctx, ns)
			}
		}
	}()
	return g
}

// testHostKey is the SSH host key simulated guests report.
const testHostKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE0Ow6DQP+//k6m8zioktAbUb0Su/x93h9rtsTyq+kAs"

// heartbeatRunning heartbeats, as the agent of each running machine in ns,
// when the guest has said nothing for 30 s or has booted since it last
// spoke: a real agent reports as soon as macOS starts it.
func heartbeatRunning(ctx context.Context, ns string) {
	var list macvirtv1alpha1.MacMachineList
	if err := k8sClient.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return
	}
	var vmis kubevirtv1.VirtualMachineInstanceList
	if err := k8sClient.List(ctx, &vmis, client.InNamespace(ns)); err != nil {
		return
	}
	// KubeVirt stamps real time; heartbeats carry the test's clock, which
	// specs move on.
	offset := time.Until(clock.Now())
	booted := map[string]time.Time{}
	for _, vmi := range vmis.Items {
		for _, t := range vmi.Status.PhaseTransitionTimestamps {
			if t.Phase == kubevirtv1.Running {
				booted[vmi.Name] = t.PhaseTransitionTimestamp.Add(offset)
			}
		}
	}
	for i := range list.Items {
		m := &list.Items[i]
		if !meta.IsStatusConditionTrue(m.Status.Conditions, macvirtv1alpha1.ConditionVMRunning) {
			continue
		}
		if g := m.Status.Guest; g != nil && g.LastHeartbeat != nil && clock.Now().Sub(g.LastHeartbeat.Time) < 30*time.Second &&
			!g.LastHeartbeat.Time.Before(booted[m.Name]) {
			continue
		}
		before := m.DeepCopy()
		now := metav1.NewTime(clock.Now())
		m.Status.Guest = &macvirtv1alpha1.GuestStatus{LastHeartbeat: &now, AgentVersion: "test", IPAddresses: []string{"10.0.2.2"},
			SSHHostKeys: []string{testHostKey}}
		_ = k8sClient.Status().Patch(ctx, m, client.MergeFrom(before))
	}
}

// newPool creates a pool of class whose machines live in a fresh namespace.
func newPool(class string, idle, maxMachines int32, mods ...func(*macvirtv1alpha1.MacPool)) (*macvirtv1alpha1.MacPool, string) {
	ns := newNamespace()
	pool := &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{GenerateName: "pool-"},
		Spec: macvirtv1alpha1.MacPoolSpec{ClassName: class, Namespace: ns, Idle: &idle, MaxMachines: &maxMachines}}
	for _, mod := range mods {
		mod(pool)
	}
	Expect(k8sClient.Create(context.Background(), pool)).To(Succeed())
	DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), pool) })
	return pool, ns
}

func newClaim(ns string, mod func(*macvirtv1alpha1.MacClaim)) *macvirtv1alpha1.MacClaim {
	c := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{GenerateName: "claim-", Namespace: ns}}
	mod(c)
	Expect(k8sClient.Create(context.Background(), c)).To(Succeed())
	return c
}

func getClaim(k types.NamespacedName) *macvirtv1alpha1.MacClaim { return getClaimWith(Default, k) }

// launcherPodIP is the address of the machine's running virt-launcher pod,
// as the kubelet reports it (each new pod has a new one).
func launcherPodIP(ns, machine string) string {
	pods := &corev1.PodList{}
	ExpectWithOffset(1, k8sClient.List(context.Background(), pods, client.InNamespace(ns),
		client.MatchingLabels{"kubevirt.io": "virt-launcher", macvirtv1alpha1.LabelMachine: machine})).To(Succeed())
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			return p.Status.PodIP
		}
	}
	Fail("machine "+ns+"/"+machine+" has no running virt-launcher pod", 1)
	return ""
}

// getClaimWith gets a claim, asserting with g (see getMachineWith).
func getClaimWith(g Gomega, k types.NamespacedName) *macvirtv1alpha1.MacClaim {
	c := &macvirtv1alpha1.MacClaim{}
	g.Expect(k8sClient.Get(context.Background(), k, c)).To(Succeed())
	return c
}

func claimPhase(k types.NamespacedName) func() macvirtv1alpha1.ClaimPhase {
	return func() macvirtv1alpha1.ClaimPhase {
		c := &macvirtv1alpha1.MacClaim{}
		if err := k8sClient.Get(context.Background(), k, c); err != nil {
			return ""
		}
		return c.Status.Phase
	}
}

func claimCondition(k types.NamespacedName, t string) func() metav1.Condition {
	return pollCondition(k, t, &macvirtv1alpha1.MacClaim{}, func(c *macvirtv1alpha1.MacClaim) []metav1.Condition {
		return c.Status.Conditions
	})
}

func poolStatus(name string) func() macvirtv1alpha1.MacPoolStatus {
	return func() macvirtv1alpha1.MacPoolStatus {
		p := &macvirtv1alpha1.MacPool{}
		if err := k8sClient.Get(context.Background(), types.NamespacedName{Name: name}, p); err != nil {
			return macvirtv1alpha1.MacPoolStatus{}
		}
		return p.Status
	}
}

func machinesIn(ns string) []macvirtv1alpha1.MacMachine { return machinesInWith(Default, ns) }

// machinesInWith lists a namespace's machines, asserting with g (see
// getMachineWith).
func machinesInWith(g Gomega, ns string) []macvirtv1alpha1.MacMachine {
	var list macvirtv1alpha1.MacMachineList
	g.Expect(k8sClient.List(context.Background(), &list, client.InNamespace(ns))).To(Succeed())
	return list.Items
}

func labelNamespace(ns string, labels map[string]string) {
	n := &corev1.Namespace{}
	Expect(k8sClient.Get(context.Background(), types.NamespacedName{Name: ns}, n)).To(Succeed())
	before := n.DeepCopy()
	n.Labels = labels
	Expect(k8sClient.Patch(context.Background(), n, client.MergeFrom(before))).To(Succeed())
}
