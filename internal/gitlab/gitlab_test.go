package gitlab

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"gitlab.com/gitlab-org/fleeting/fleeting/provider"
	"golang.org/x/crypto/ssh"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

var started = time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)

func claimOf(mut func(c *macvirtv1alpha1.MacClaim)) *macvirtv1alpha1.MacClaim {
	c := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ci", Name: "g-01",
		CreationTimestamp: metav1.NewTime(started.Add(time.Minute)),
		Labels:            map[string]string{LabelGroup: "g"}, Annotations: map[string]string{AnnotationKey: "mine"}}}
	if mut != nil {
		mut(c)
	}
	return c
}

func ready(c *macvirtv1alpha1.MacClaim) {
	c.Status.Phase = macvirtv1alpha1.ClaimReady
	c.Status.Connection = &macvirtv1alpha1.ClaimConnection{User: "admin", Address: "10.244.0.7", SSHPort: 22}
}

func TestJudge(t *testing.T) {
	now := metav1.NewTime(started.Add(2 * time.Minute))
	rows := []struct {
		name    string
		claim   *macvirtv1alpha1.MacClaim
		state   provider.State
		release bool
		foreign bool
		why     string
	}{
		{"new, unbound", claimOf(nil), provider.StateCreating, false, false, "waiting for a Ready Mac"},
		{"bound, booting", claimOf(func(c *macvirtv1alpha1.MacClaim) { c.Status.Phase = macvirtv1alpha1.ClaimBound }), provider.StateCreating, false, false, "phase Bound"},
		{"stalled says why", claimOf(func(c *macvirtv1alpha1.MacClaim) {
			c.Status.Conditions = []metav1.Condition{{Type: macvirtv1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Message: `MacClass "nosuch" not found`}}
		}), provider.StateCreating, false, false, `stalled: MacClass "nosuch" not found`},
		{"Ready with an address", claimOf(ready), provider.StateRunning, false, false, ""},
		{"Ready without an address yet", claimOf(func(c *macvirtv1alpha1.MacClaim) { ready(c); c.Status.Connection.Address = "" }), provider.StateCreating, false, false, "phase Ready"},
		{"Lost: released", claimOf(func(c *macvirtv1alpha1.MacClaim) {
			c.Status.Phase = macvirtv1alpha1.ClaimLost
			c.Status.Conditions = []metav1.Condition{{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Message: "its machine was lost"}}
		}), provider.StateDeleting, true, false, "its machine was lost"},
		{"Expired: released", claimOf(func(c *macvirtv1alpha1.MacClaim) { c.Status.Phase = macvirtv1alpha1.ClaimExpired }), provider.StateDeleting, true, false, "Expired"},
		{"deleting", claimOf(func(c *macvirtv1alpha1.MacClaim) { ready(c); c.DeletionTimestamp = &now }), provider.StateDeleting, false, false, "stopping"},
		{"an earlier process's: released", claimOf(func(c *macvirtv1alpha1.MacClaim) {
			ready(c)
			c.Annotations[AnnotationKey] = "old"
			c.CreationTimestamp = metav1.NewTime(started.Add(-time.Hour))
		}), provider.StateDeleting, true, false, "earlier plugin process"},
		{"an earlier process's, already deleting: not released again", claimOf(func(c *macvirtv1alpha1.MacClaim) {
			c.Annotations[AnnotationKey] = "old"
			c.CreationTimestamp = metav1.NewTime(started.Add(-time.Hour))
			c.DeletionTimestamp = &now
		}), provider.StateDeleting, false, false, "stopping"},
		{"an earlier process's that still runs: left alone", claimOf(func(c *macvirtv1alpha1.MacClaim) {
			ready(c)
			c.Annotations[AnnotationKey] = "draining"
			c.CreationTimestamp = metav1.NewTime(started.Add(-time.Hour))
		}), "", false, true, "still runs"},
		{"a process sharing this one's static key, earlier and still running: left alone", claimOf(func(c *macvirtv1alpha1.MacClaim) {
			ready(c)
			c.Annotations[AnnotationProcess] = "p-draining"
			c.CreationTimestamp = metav1.NewTime(started.Add(-time.Hour))
		}), "", false, true, "still runs"},
		{"a process sharing this one's static key, earlier and gone: released", claimOf(func(c *macvirtv1alpha1.MacClaim) {
			ready(c)
			c.Annotations[AnnotationProcess] = "p-gone"
			c.CreationTimestamp = metav1.NewTime(started.Add(-time.Hour))
		}), provider.StateDeleting, true, false, "no longer runs"},
		{"this process's own: its", claimOf(func(c *macvirtv1alpha1.MacClaim) { ready(c); c.Annotations[AnnotationProcess] = "p-mine" }),
			provider.StateRunning, false, false, ""},
		{"another live process's: left alone", claimOf(func(c *macvirtv1alpha1.MacClaim) { ready(c); c.Annotations[AnnotationKey] = "other" }), "", false, true, "a name of its own"},
		{"made in the second this process started, by another: left alone", claimOf(func(c *macvirtv1alpha1.MacClaim) {
			c.Annotations = nil
			c.CreationTimestamp = metav1.NewTime(started.Truncate(time.Second))
		}), "", false, true, "after this one started"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			v := judge(r.claim, process{id: "p-mine", keyID: "mine"}, started.Add(300*time.Millisecond),
				map[string]bool{"p-mine": true, "key:draining": true, "p-draining": true})
			if v.state != r.state || v.release != r.release || v.foreign != r.foreign || !strings.Contains(v.why, r.why) {
				t.Errorf("judge = %+v; want state %q, release %v, foreign %v, why containing %q", v, r.state, r.release, r.foreign, r.why)
			}
		})
	}
}

func TestValidateNamesTheField(t *testing.T) {
	rows := []struct {
		c    Config
		want []string
	}{
		{Config{Name: "macs", Class: "ci"}, nil},
		{Config{Name: "macs", Pool: "warm", Via: ViaTunnel, Lifetime: "2h"}, nil},
		{Config{}, []string{"plugin_config name", "plugin_config class"}},
		{Config{Name: "Macs_1", Class: "ci"}, []string{`name "Macs_1"`}},
		{Config{Name: strings.Repeat("m", 41), Class: "ci"}, []string{"at most 40"}},
		{Config{Name: "macs", Class: "ci", Via: "ssh"}, []string{`via "ssh"`}},
		{Config{Name: "macs", Class: "ci", MaxSize: -1}, []string{"max_size -1"}},
		{Config{Name: "macs", Class: "ci", Lifetime: "2 hours"}, []string{`lifetime "2 hours"`}},
	}
	for _, r := range rows {
		g := &InstanceGroup{Config: r.c}
		err := g.validate()
		if len(r.want) == 0 {
			if err != nil {
				t.Errorf("%+v: %v; want it valid", r.c, err)
			}
			continue
		}
		for _, w := range r.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %v; want an error naming %q", r.c, err, w)
			}
		}
	}
	g := InstanceGroup{Config: Config{Name: "macs", Class: "ci"}}
	_ = g.validate()
	if g.Via != ViaDirect || g.MaxSize != DefaultMaxSize {
		t.Errorf("defaults: via %q, max_size %d; want %q, %d", g.Via, g.MaxSize, ViaDirect, DefaultMaxSize)
	}
}

func TestEachInstanceHasItsOwnKeyAndOnlyThePublicHalfIsClaimed(t *testing.T) {
	k, err := newKeyring(nil)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := k.authorizedKey("g-01")
	b, _ := k.authorizedKey("g-02")
	if a == b {
		t.Fatal("two instances got the same key")
	}
	if again, _ := k.authorizedKey("g-01"); again != a {
		t.Fatal("an instance's key changed between calls")
	}
	priv, err := k.privatePEM("g-01")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(a, "PRIVATE") {
		t.Fatalf("the claim's line holds private material: %q", a)
	}
	signer, err := ssh.ParsePrivateKey(priv)
	if err != nil {
		t.Fatalf("the runner's connector cannot read the key: %v", err)
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(a))
	if err != nil {
		t.Fatal(err)
	}
	if string(pub.Marshal()) != string(signer.PublicKey().Marshal()) {
		t.Fatal("the private key handed to the runner is not the claim's public key's")
	}
	other, _ := newKeyring(nil)
	if o, _ := other.authorizedKey("g-01"); o == a || other.id == k.id {
		t.Fatal("a second process derived the first one's key or id")
	}

	// The runner's own key: every claim gets its public half; no key is handed out.
	_, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	block, err := ssh.MarshalPrivateKey(edPriv, "")
	if err != nil {
		t.Fatal(err)
	}
	static, err := newKeyring(pem.EncodeToMemory(block))
	if err != nil {
		t.Fatal(err)
	}
	s1, _ := static.authorizedKey("g-01")
	s2, _ := static.authorizedKey("g-02")
	if strings.Fields(s1)[1] != strings.Fields(s2)[1] {
		t.Error("with the runner's own key the claims' keys differ")
	}
	if _, err := static.privatePEM("g-01"); err == nil {
		t.Error("the plugin handed out a key while the runner holds its own")
	}
	if _, err := newKeyring([]byte("not a key")); err == nil || !strings.Contains(err.Error(), "connector_config key") {
		t.Errorf("a bad static key: %v; want an error naming connector_config key", err)
	}
}

func TestConnectInfo(t *testing.T) {
	c := claimOf(ready)
	info, err := connectInfo(provider.ConnectorConfig{}, c)
	if err != nil {
		t.Fatal(err)
	}
	if info.Username != "admin" || info.InternalAddr != "10.244.0.7:22" || info.ExternalAddr != "" || info.Protocol != provider.ProtocolSSH || info.OS != "darwin" || info.ID != "g-01" {
		t.Errorf("a ClusterIP claim: %+v", info)
	}
	c.Status.Connection.External = &macvirtv1alpha1.ExternalAccess{Address: "192.0.2.10", SSHPort: 30022}
	info, _ = connectInfo(provider.ConnectorConfig{Username: "ci", ProtocolPort: 2222}, c)
	if info.Username != "ci" || info.ExternalAddr != "192.0.2.10:30022" || info.InternalAddr != "10.244.0.7:2222" {
		t.Errorf("a NodePort claim with the runner's user and port: %+v", info)
	}
	c.Status.Phase = macvirtv1alpha1.ClaimBound
	if _, err := connectInfo(provider.ConnectorConfig{}, c); err == nil || !strings.Contains(err.Error(), "not Ready") {
		t.Errorf("a claim not Ready: %v; want an error", err)
	}
}

func newGroup(t *testing.T, objs ...client.Object) (*InstanceGroup, client.Client) {
	t.Helper()
	s := runtime.NewScheme()
	if err := macvirtv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := coordinationv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithStatusSubresource(&macvirtv1alpha1.MacClaim{}).Build()
	k, err := newKeyring(nil)
	if err != nil {
		t.Fatal(err)
	}
	g := &InstanceGroup{Config: Config{Name: "g", Namespace: "ci", Class: "ci-mac"}, log: hclog.NewNullLogger(), client: c, keys: k,
		started: started, forwards: map[string]*forward{}, said: map[string]string{}, seen: map[string]sighting{}, ctx: context.Background(),
		self: process{id: "p-test", keyID: k.id}}
	if err := g.validate(); err != nil {
		t.Fatal(err)
	}
	return g, c
}

func TestIncreaseUpdateDecrease(t *testing.T) {
	ctx := context.Background()
	stale := claimOf(func(c *macvirtv1alpha1.MacClaim) {
		c.Name = "g-stale"
		c.Annotations[AnnotationKey] = "old"
		c.CreationTimestamp = metav1.NewTime(started.Add(-time.Hour))
		ready(c)
	})
	otherGroup := claimOf(func(c *macvirtv1alpha1.MacClaim) { c.Name = "h-01"; c.Labels[LabelGroup] = "h" })
	g, c := newGroup(t, stale, otherGroup)

	n, err := g.Increase(ctx, 3)
	if err != nil || n != 3 {
		t.Fatalf("Increase(3) = %d, %v", n, err)
	}
	list := &macvirtv1alpha1.MacClaimList{}
	if err := c.List(ctx, list, client.MatchingLabels{LabelGroup: "g"}); err != nil {
		t.Fatal(err)
	}
	var made []string
	for _, cl := range list.Items {
		if cl.Name == "g-stale" {
			continue
		}
		made = append(made, cl.Name)
		if cl.Spec.ClassName != "ci-mac" || len(cl.Spec.SSHAuthorizedKeys) != 1 || cl.Annotations[AnnotationKey] != g.keys.id || !strings.HasPrefix(cl.Name, "g-") {
			t.Errorf("claim %s: %+v %v", cl.Name, cl.Spec, cl.Annotations)
		}
		if want, _ := g.keys.authorizedKey(cl.Name); cl.Spec.SSHAuthorizedKeys[0] != want {
			t.Errorf("claim %s carries %q, want its own instance key", cl.Name, cl.Spec.SSHAuthorizedKeys[0])
		}
	}
	if len(made) != 3 {
		t.Fatalf("made %v; want 3 claims", made)
	}

	states := map[string]provider.State{}
	if err := g.Update(ctx, func(id string, s provider.State) { states[id] = s }); err != nil {
		t.Fatal(err)
	}
	if len(states) != 4 || states["g-stale"] != provider.StateDeleting || states[made[0]] != provider.StateCreating {
		t.Errorf("Update reported %v; want the 3 new creating and the stale one deleting, nothing of group h", states)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(stale), &macvirtv1alpha1.MacClaim{}); err == nil {
		t.Error("the claim an earlier process left was not released")
	}

	// The first becomes Ready: running, and its connect info carries its key.
	cl := &macvirtv1alpha1.MacClaim{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ci", Name: made[0]}, cl); err != nil {
		t.Fatal(err)
	}
	ready(cl)
	if err := c.Status().Update(ctx, cl); err != nil {
		t.Fatal(err)
	}
	states = map[string]provider.State{}
	_ = g.Update(ctx, func(id string, s provider.State) { states[id] = s })
	if states[made[0]] != provider.StateRunning || len(states) != 3 {
		t.Errorf("after Ready: %v", states)
	}
	if err := g.Heartbeat(ctx, made[0]); err != nil {
		t.Errorf("Heartbeat of a Ready claim: %v", err)
	}
	if err := g.Heartbeat(ctx, made[1]); err == nil {
		t.Error("Heartbeat of a claim not Ready passed")
	}
	info, err := g.ConnectInfo(ctx, made[0])
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(info.Key)
	if err != nil {
		t.Fatal(err)
	}
	if pub, _, _, _, _ := ssh.ParseAuthorizedKey([]byte(cl.Spec.SSHAuthorizedKeys[0])); string(pub.Marshal()) != string(signer.PublicKey().Marshal()) {
		t.Error("ConnectInfo's key does not open the claim's Mac")
	}

	done, err := g.Decrease(ctx, []string{made[0], "g-gone"})
	if err != nil || len(done) != 2 {
		t.Errorf("Decrease = %v, %v; want both (one already gone)", done, err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ci", Name: "h-01"}, &macvirtv1alpha1.MacClaim{}); err != nil {
		t.Errorf("another group's claim: %v", err)
	}
}

// TestRunningIsJudgedByThisProcesssClock: a Lease is live while this
// process sees its renewal change within leaseDuration, whatever clock
// wrote it (the other host's may be minutes off), and not once it stops
// changing.
func TestRunningIsJudgedByThisProcesssClock(t *testing.T) {
	ctx := context.Background()
	lease := func(id string, renew time.Time) *coordinationv1.Lease {
		at := metav1.NewMicroTime(renew)
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ci", Name: leaseName("g", id),
			Labels: map[string]string{LabelGroup: "g"}, Annotations: map[string]string{AnnotationProcess: id}},
			Spec: coordinationv1.LeaseSpec{RenewTime: &at}}
	}
	skewed := lease("p-behind", started.Add(-10*time.Minute)) // its host's clock is 10 minutes behind
	g, c := newGroup(t, skewed, lease("p-ahead", started.Add(time.Hour)))
	g.leases = true
	now := started
	look := func(step string, want map[string]bool) {
		t.Helper()
		got, err := g.running(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"p-behind", "p-ahead", "p-test"} {
			if got[id] != want[id] {
				t.Errorf("%s: %s running %v, want %v", step, id, got[id], want[id])
			}
		}
	}
	look("first seen", map[string]bool{"p-behind": true, "p-ahead": true, "p-test": true})
	now = now.Add(45 * time.Second)
	skewed.Spec.RenewTime = ptrMicro(started.Add(-10*time.Minute + 40*time.Second))
	if err := c.Update(ctx, skewed); err != nil {
		t.Fatal(err)
	}
	look("the skewed one renewed, the other not yet past its minute", map[string]bool{"p-behind": true, "p-ahead": true, "p-test": true})
	now = now.Add(30 * time.Second)
	look("the other never renewed in 75 s", map[string]bool{"p-behind": true, "p-test": true})
	now = now.Add(time.Minute)
	look("neither renewed for a minute", map[string]bool{"p-test": true})
}

func ptrMicro(t time.Time) *metav1.MicroTime { m := metav1.NewMicroTime(t); return &m }
