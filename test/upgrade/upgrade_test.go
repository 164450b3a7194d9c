package upgrade

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/domainhook/contract"
	"github.com/macvirt/macvirt/test/harness"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// The kinds whose objects an upgrade must leave as they were: macvirt's
// own, and everything the operator writes for them.
var kinds = []schema.GroupVersionKind{
	macvirtv1alpha1.GroupVersion.WithKind("MacClass"),
	macvirtv1alpha1.GroupVersion.WithKind("MacPool"),
	macvirtv1alpha1.GroupVersion.WithKind("MacMachine"),
	macvirtv1alpha1.GroupVersion.WithKind("MacClaim"),
	{Group: "kubevirt.io", Version: "v1", Kind: "VirtualMachine"},
	{Group: "kubevirt.io", Version: "v1", Kind: "VirtualMachineInstance"},
	{Group: "cdi.kubevirt.io", Version: "v1beta1", Kind: "DataVolume"},
	{Group: "", Version: "v1", Kind: "PersistentVolumeClaim"},
	{Group: "", Version: "v1", Kind: "Service"},
	{Group: "", Version: "v1", Kind: "Secret"},
	{Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSlice"},
}

func TestAnOperatorUpgradeLosesNothingAndRestartsNoMac(t *testing.T) {
	cluster.NeedsAPIServer(t)
	baseline, err := latestBaseline()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("upgrading from the CRDs of %s", filepath.Base(filepath.Dir(baseline)))
	old, err := readCRDs(mustRead(t, baseline))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	world, err := harness.Start(ctx, harness.Options{Log: io.Discard, Scheme: []func(*runtime.Scheme) error{apiextensionsv1.AddToScheme},
		KubeVirt: cluster.KubeVirtOptions{MacvirtCRDs: old}, System: &harness.SystemOptions{Speed: 4, Network: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = world.Stop() })
	ctx, cfg, admin, sys := world.Ctx, world.Config, world.Admin, world.System

	// The world of the old release: the samples' class and pool with one
	// idle machine, and the samples' claim bound to another.
	if err := harness.ApplySamples(ctx, admin, 1); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the sample claim and every machine Ready", func() (bool, string) { return allReady(ctx, admin) })
	before, hooksBefore, err := fingerprints(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	counts := countKinds(before)
	t.Logf("before the upgrade: %s", describeCounts(counts))
	if counts["MacMachine"] < 2 || counts["VirtualMachineInstance"] < 2 || counts["MacClaim"] < 1 {
		t.Fatalf("the world before the upgrade is too small to say anything: %s", describeCounts(counts))
	}

	// Anything a tenant or admin watching would see go wrong from here on.
	seen := watchForNotReady(ctx, t, admin, before)

	// The upgrade, as OLM, kustomize or Argo CD carry it out: the old
	// operator goes, the CRDs are replaced, the new operator starts.
	sys.StopOperator()
	// Before claims were reached through their namespace's headless
	// Service, every claim had a ClusterIP Service of its own, its
	// EndpointSlice and a connection Secret: the sample claim is given
	// them, as the previous operator left them.
	legacy := leaveClaimAsThePreviousOperatorDid(ctx, t, admin)
	// The world was built by this operator: what it made for the claim and
	// the previous one never did is not part of the world being upgraded.
	for _, k := range legacy.notBefore {
		delete(before, k)
	}
	newer, err := cluster.KustomizeBuild("config/crd")
	if err != nil {
		t.Fatal(err)
	}
	if err := upgradeCRDs(ctx, cfg, admin, newer); err != nil {
		t.Fatal(err)
	}
	// A new release's operator runs a new domain-hook image.
	const newHookImage = "ghcr.io/macvirt/macvirt-domain-hook:v99.0.0"
	if err := sys.StartOperator(ctx, harness.OperatorOptions{HookImage: newHookImage}); err != nil {
		t.Fatal(err)
	}
	// The new operator has looked at everything once its controllers have
	// each reconciled as many objects as there are (its first list queues
	// each once).
	waitFor(ctx, t, "the new operator's first pass over every object", func() (bool, string) {
		return reconciledEverything(counts, "-2")
	})

	after, hooksAfter, err := fingerprints(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	if diff := lostOrChanged(before, after); len(diff) > 0 {
		t.Errorf("the upgrade lost or changed %d objects:\n%s", len(diff), strings.Join(diff, "\n"))
	}
	checkLegacyClaimKeptWorking(ctx, t, admin, legacy)
	rewritten := 0
	for k, v := range hooksBefore {
		if hooksAfter[k] != v {
			rewritten++
		}
		if !strings.Contains(hooksAfter[k], newHookImage) {
			t.Errorf("%s would start again with the old operator's domain hook:\n%s", k, hooksAfter[k])
		}
	}
	t.Logf("%d of %d VirtualMachine templates now carry the new operator's domain-hook annotations, for their next start", rewritten, len(hooksBefore))
	if ok, why := allReady(ctx, admin); !ok {
		t.Errorf("after the upgrade: %s", why)
	}
	if got := seen(); len(got) > 0 {
		t.Errorf("while upgrading, a watcher saw:\n%s", strings.Join(got, "\n"))
	}

	// And the new operator serves: a new claim is bound and Ready.
	claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "after-upgrade"},
		Spec: macvirtv1alpha1.MacClaimSpec{ClassName: "sonoma", PoolName: "ci-sonoma"}}
	if err := admin.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "a claim made after the upgrade Ready", func() (bool, string) {
		if err := admin.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(claim.Status.Conditions, macvirtv1alpha1.ConditionReady), fmt.Sprintf("phase %q", claim.Status.Phase)
	})
	// Once more at the end, a while after the new operator's first pass:
	// the Macs that ran before still run the same instance, with the same
	// VirtualMachine, but for the one the new claim was bound to.
	final, _, err := fingerprints(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range before {
		kind := strings.Fields(k)[0]
		if (kind != "VirtualMachine" && kind != "VirtualMachineInstance") || strings.HasSuffix(k, "/"+claim.Status.MachineRef.Name) {
			continue
		}
		if final[k] != v {
			t.Errorf("by the end, %s changed or went:\n  before: %s\n  now:    %s", k, v, final[k])
		}
	}
	if got := seen(); len(got) > 0 {
		t.Errorf("by the end, a watcher saw:\n%s", strings.Join(got, "\n"))
	}
	t.Logf("after the upgrade: %d objects as they were, a new claim Ready on %s", len(before), claim.Status.MachineRef.Name)
}

// latestBaseline is the CRDs of the newest release under testdata.
func latestBaseline() (string, error) {
	dirs, err := filepath.Glob(filepath.Join("testdata", "v*", "crds.yaml"))
	if err != nil || len(dirs) == 0 {
		return "", fmt.Errorf("no testdata/v*/crds.yaml: run `make upgrade-baseline` when a release is cut (%v)", err)
	}
	sort.Slice(dirs, func(i, j int) bool {
		return lessVersion(filepath.Base(filepath.Dir(dirs[i])), filepath.Base(filepath.Dir(dirs[j])))
	})
	return dirs[len(dirs)-1], nil
}

// lessVersion orders v<major>.<minor>.<patch> numerically.
func lessVersion(a, b string) bool {
	var x, y [3]int
	_, _ = fmt.Sscanf(a, "v%d.%d.%d", &x[0], &x[1], &x[2])
	_, _ = fmt.Sscanf(b, "v%d.%d.%d", &y[0], &y[1], &y[2])
	return slices.Compare(x[:], y[:]) < 0
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path) //nolint:gosec // a file of the repository's testdata.
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readCRDs(b []byte) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		err := dec.Decode(crd)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if crd.Name != "" {
			out = append(out, crd)
		}
	}
}

// upgradeCRDs replaces each installed CRD with the new one, keeping what
// the API server owns (its status, the stored versions), and waits until
// the API server serves the new ones.
func upgradeCRDs(ctx context.Context, cfg *rest.Config, c client.Client, manifests []byte) error {
	crds, err := readCRDs(manifests)
	if err != nil {
		return err
	}
	for _, crd := range crds {
		cur := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(crd), cur); err != nil {
			if apierrors.IsNotFound(err) {
				if err := c.Create(ctx, crd); err != nil {
					return err
				}
				continue
			}
			return err
		}
		cur.Labels, cur.Annotations, cur.Spec = crd.Labels, crd.Annotations, crd.Spec
		if err := c.Update(ctx, cur); err != nil {
			return fmt.Errorf("upgrading CRD %s: %w", crd.Name, err)
		}
	}
	return envtest.WaitForCRDs(cfg, crds, envtest.CRDInstallOptions{MaxTime: time.Minute, PollInterval: 100 * time.Millisecond})
}

// fingerprints says, for every object of kinds, what an upgrade must not
// change: its identity, and everything but its status and bookkeeping.
// VirtualMachines' domain-hook annotations are left out of it and returned
// on their own: a new operator writes its hook image into the templates,
// which KubeVirt uses from each VM's next start (docs/upgrades.md).
func fingerprints(ctx context.Context, c client.Client) (map[string]string, map[string]string, error) {
	out, hooks := map[string]string{}, map[string]string{}
	for _, gvk := range kinds {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := c.List(ctx, list); err != nil {
			return nil, nil, fmt.Errorf("listing %s: %w", gvk.Kind, err)
		}
		for _, o := range list.Items {
			key := gvk.Kind + " " + types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}.String()
			generation := o.GetGeneration()
			if gvk.Kind == "VirtualMachine" {
				hook, err := withoutHookAnnotations(&o)
				if err != nil {
					return nil, nil, err
				}
				if hook != "" {
					hooks[key] = hook
				}
				// The generation counts the hook annotations' writes.
				generation = 0
			}
			rest := map[string]any{}
			for k, v := range o.UnstructuredContent() {
				if k != "status" && k != "metadata" {
					rest[k] = v
				}
			}
			b, err := json.Marshal(rest)
			if err != nil {
				return nil, nil, err
			}
			out[key] = fmt.Sprintf("uid %s generation %d labels %v annotations %v owners %d content %x",
				o.GetUID(), generation, o.GetLabels(), withoutBookkeeping(o.GetAnnotations()), len(o.GetOwnerReferences()), sha256.Sum256(b))
		}
	}
	return out, hooks, nil
}

// withoutHookAnnotations takes the domain-hook annotations out of a
// VirtualMachine's template and returns them as a string.
func withoutHookAnnotations(vm *unstructured.Unstructured) (string, error) {
	annotations, _, err := unstructured.NestedStringMap(vm.Object, "spec", "template", "metadata", "annotations")
	if err != nil {
		return "", err
	}
	var hook []string
	for k, v := range annotations {
		if contract.IsDomainHookAnnotation(k) {
			hook = append(hook, k+"="+v)
			delete(annotations, k)
		}
	}
	sort.Strings(hook)
	if err := unstructured.SetNestedStringMap(vm.Object, annotations, "spec", "template", "metadata", "annotations"); err != nil {
		return "", err
	}
	return strings.Join(hook, "\n"), nil
}

// withoutBookkeeping drops the annotation kubectl and the API server keep
// for themselves.
func withoutBookkeeping(a map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		if k != corev1.LastAppliedConfigAnnotation {
			out[k] = v
		}
	}
	return out
}

// lostOrChanged lists what before had that after lacks or holds otherwise.
func lostOrChanged(before, after map[string]string) []string {
	var out []string
	for k, v := range before {
		switch w, ok := after[k]; {
		case !ok:
			out = append(out, "lost: "+k)
		case w != v:
			out = append(out, fmt.Sprintf("changed: %s\n  before: %s\n  after:  %s", k, v, w))
		}
	}
	sort.Strings(out)
	return out
}

func countKinds(fp map[string]string) map[string]int {
	out := map[string]int{}
	for k := range fp {
		out[strings.Fields(k)[0]]++
	}
	return out
}

func describeCounts(counts map[string]int) string {
	var parts []string
	for _, gvk := range kinds {
		parts = append(parts, fmt.Sprintf("%d %s", counts[gvk.Kind], gvk.Kind))
	}
	return strings.Join(parts, ", ")
}

// allReady says whether every claim is Ready, every machine Ready and
// every pool at its idle target, and if not, which is not.
func allReady(ctx context.Context, c client.Client) (bool, string) {
	var claims macvirtv1alpha1.MacClaimList
	var machines macvirtv1alpha1.MacMachineList
	if err := c.List(ctx, &claims); err != nil {
		return false, err.Error()
	}
	if err := c.List(ctx, &machines); err != nil {
		return false, err.Error()
	}
	var pools macvirtv1alpha1.MacPoolList
	if err := c.List(ctx, &pools); err != nil {
		return false, err.Error()
	}
	if len(claims.Items) == 0 || len(machines.Items) == 0 {
		return false, "no claims or machines yet"
	}
	idle := map[string]int32{}
	for _, m := range machines.Items {
		if m.Spec.ClaimRef == nil && m.Labels[macvirtv1alpha1.LabelPool] != "" {
			idle[m.Labels[macvirtv1alpha1.LabelPool]]++
		}
	}
	for _, p := range pools.Items {
		if want := ptr.Deref(p.Spec.Idle, 0); idle[p.Name] < want {
			return false, fmt.Sprintf("pool %s has %d idle machines of %d", p.Name, idle[p.Name], want)
		}
	}
	for _, cl := range claims.Items {
		if !meta.IsStatusConditionTrue(cl.Status.Conditions, macvirtv1alpha1.ConditionReady) {
			return false, fmt.Sprintf("claim %s/%s is %q", cl.Namespace, cl.Name, cl.Status.Phase)
		}
	}
	for _, m := range machines.Items {
		if m.Status.Phase != macvirtv1alpha1.MachineReady {
			return false, fmt.Sprintf("machine %s/%s is %q", m.Namespace, m.Name, m.Status.Phase)
		}
	}
	return true, ""
}

// watchForNotReady watches the claims, machines and VirtualMachineInstances
// of existing (fingerprints' keys) from now on and returns what it saw of
// them that was not Ready, or an instance going: a tenant's view of the
// upgrade, to the end of the test. Objects made since are not its concern.
func watchForNotReady(ctx context.Context, t *testing.T, c client.WithWatch, existing map[string]string) func() []string {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	for _, list := range []client.ObjectList{&macvirtv1alpha1.MacClaimList{}, &macvirtv1alpha1.MacMachineList{}, &kubevirtv1.VirtualMachineInstanceList{}} {
		w, err := c.Watch(ctx, list)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		go func() {
			for ev := range w.ResultChan() {
				var what string
				switch o := ev.Object.(type) {
				case *macvirtv1alpha1.MacClaim:
					if ev.Type == watch.Deleted || !meta.IsStatusConditionTrue(o.Status.Conditions, macvirtv1alpha1.ConditionReady) {
						what = fmt.Sprintf("%s claim %s/%s phase %q", ev.Type, o.Namespace, o.Name, o.Status.Phase)
					}
				case *macvirtv1alpha1.MacMachine:
					if ev.Type == watch.Deleted || o.Status.Phase != macvirtv1alpha1.MachineReady {
						what = fmt.Sprintf("%s machine %s/%s phase %q", ev.Type, o.Namespace, o.Name, o.Status.Phase)
					}
				case *kubevirtv1.VirtualMachineInstance:
					// A Mac restarted is an instance deleted (or stopped).
					if ev.Type == watch.Deleted || o.IsFinal() || o.DeletionTimestamp != nil {
						what = fmt.Sprintf("%s VirtualMachineInstance %s/%s phase %q", ev.Type, o.Namespace, o.Name, o.Status.Phase)
					}
				}
				if o, ok := ev.Object.(client.Object); !ok || existing[kindOf(ev.Object)+" "+client.ObjectKeyFromObject(o).String()] == "" {
					what = ""
				}
				if what != "" {
					mu.Lock()
					seen = append(seen, what)
					mu.Unlock()
				}
			}
		}()
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// reconciledEverything reads controller-runtime's reconcile counters for
// the controllers named with suffix and says whether each has reconciled
// successfully at least as often as it has objects.
func reconciledEverything(counts map[string]int, suffix string) (bool, string) {
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return false, err.Error()
	}
	done := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if label(m, "result") == "error" {
				continue
			}
			done[label(m, "controller")] += m.GetCounter().GetValue()
		}
	}
	for controller, kind := range map[string]string{"macclass": "MacClass", "macpool": "MacPool", "macmachine": "MacMachine", "macclaim": "MacClaim"} {
		if got, want := done[controller+suffix], float64(counts[kind]); got < want {
			return false, fmt.Sprintf("%s%s reconciled %v of %v", controller, suffix, got, want)
		}
	}
	return true, ""
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func waitFor(ctx context.Context, t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	why := ""
	for {
		var ok bool
		if ok, why = cond(); ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v; last: %s", what, ctx.Err(), why)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestTheNewCRDsServeWhatTheLastReleaseStored holds the working tree's CRDs
// to the last release's: every kind is still there, and every version the
// release served is still served, so objects stored under it stay
// readable. (Removing a version takes a storage migration first, and
// status.storedVersions is the API server's record of what remains.)
func TestTheNewCRDsServeWhatTheLastReleaseStored(t *testing.T) {
	baseline, err := latestBaseline()
	if err != nil {
		t.Fatal(err)
	}
	old, err := readCRDs(mustRead(t, baseline))
	if err != nil {
		t.Fatal(err)
	}
	manifests, err := cluster.KustomizeBuild("config/crd")
	if err != nil {
		t.Fatal(err)
	}
	newer, err := readCRDs(manifests)
	if err != nil {
		t.Fatal(err)
	}
	if problems := servingGaps(old, newer); len(problems) > 0 {
		t.Errorf("upgrading from %s would lose objects:\n%s", baseline, strings.Join(problems, "\n"))
	}
	// The check itself: a CRD that stops serving a version, and one that
	// is gone.
	broken := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(newer))
	for _, crd := range newer[1:] {
		c := crd.DeepCopy()
		for i := range c.Spec.Versions {
			c.Spec.Versions[i].Served = false
		}
		broken = append(broken, c)
	}
	if got := servingGaps(old, broken); len(got) != len(old) {
		t.Errorf("servingGaps found %d problems in %d broken CRDs: %v", len(got), len(old), got)
	}
}

// servingGaps lists each kind or version of old that newer does not serve.
func servingGaps(old, newer []*apiextensionsv1.CustomResourceDefinition) []string {
	byName := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, crd := range newer {
		byName[crd.Name] = crd
	}
	var out []string
	for _, o := range old {
		n, ok := byName[o.Name]
		if !ok {
			out = append(out, o.Name+": the CRD is gone")
			continue
		}
		for _, v := range o.Spec.Versions {
			if !v.Served {
				continue
			}
			served := slices.ContainsFunc(n.Spec.Versions, func(w apiextensionsv1.CustomResourceDefinitionVersion) bool {
				return w.Name == v.Name && w.Served
			})
			if !served {
				out = append(out, fmt.Sprintf("%s: version %s is no longer served", o.Name, v.Name))
			}
		}
	}
	return out
}

// kindOf is the kind of the watched types, as fingerprints' keys name it.
func kindOf(o any) string {
	switch o.(type) {
	case *macvirtv1alpha1.MacClaim:
		return "MacClaim"
	case *macvirtv1alpha1.MacMachine:
		return "MacMachine"
	case *kubevirtv1.VirtualMachineInstance:
		return "VirtualMachineInstance"
	}
	return ""
}

// legacyClaim is what the previous operator gave a claim: a Service of its
// own, that Service's EndpointSlice and a connection Secret.
type legacyClaim struct {
	claim   types.NamespacedName
	service *corev1.Service
	secret  *corev1.Secret
	// notBefore are the fingerprint keys of what this operator made for
	// the claim that the previous one did not (its name under the
	// namespace Service), deleted here.
	notBefore []string
}

// leaveClaimAsThePreviousOperatorDid gives the first claim, Ready, what the
// operator before the write-budget change made for every claim: a ClusterIP
// Service named after it with an EndpointSlice at its machine's address, a
// connection Secret (patched by that operator, so it records no UID), and
// the status that named both.
func leaveClaimAsThePreviousOperatorDid(ctx context.Context, t *testing.T, c client.Client) legacyClaim {
	t.Helper()
	var claims macvirtv1alpha1.MacClaimList
	if err := c.List(ctx, &claims); err != nil || len(claims.Items) == 0 {
		t.Fatalf("listing claims: %v (%d)", err, len(claims.Items))
	}
	cl := &claims.Items[0]
	conn := cl.Status.Connection
	if conn == nil || conn.Address == "" {
		t.Fatalf("claim %s has no connection: %+v", cl.Name, cl.Status)
	}
	owner := metav1.OwnerReference{APIVersion: macvirtv1alpha1.GroupVersion.String(), Kind: "MacClaim", Name: cl.Name, UID: cl.UID, Controller: ptr.To(true)}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: cl.Name, Namespace: cl.Namespace,
		Labels: map[string]string{macvirtv1alpha1.LabelClaim: cl.Name}, OwnerReferences: []metav1.OwnerReference{owner}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP,
			Ports: []corev1.ServicePort{{Name: "ssh", Protocol: corev1.ProtocolTCP, Port: 22, TargetPort: intstr.FromInt32(22)}}}}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: cl.Name, Namespace: cl.Namespace,
		Labels: map[string]string{macvirtv1alpha1.LabelClaim: cl.Name, discoveryv1.LabelServiceName: cl.Name,
			discoveryv1.LabelManagedBy: "macvirt.io"}, OwnerReferences: []metav1.OwnerReference{owner}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("ssh"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](22)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{conn.Address}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: cl.Name + "-connection", Namespace: cl.Namespace,
		OwnerReferences: []metav1.OwnerReference{owner}},
		Data: map[string][]byte{"host": []byte(cl.Name + "." + cl.Namespace + ".svc"), "address": []byte(conn.Address), "port": []byte("22"), "user": []byte("admin")}}
	var notBefore []string
	var slices discoveryv1.EndpointSliceList
	if err := c.List(ctx, &slices, client.InNamespace(cl.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: "macs"}); err != nil {
		t.Fatal(err)
	}
	for i := range slices.Items {
		if err := c.Delete(ctx, &slices.Items[i]); err != nil {
			t.Fatal(err)
		}
		notBefore = append(notBefore, "EndpointSlice "+client.ObjectKeyFromObject(&slices.Items[i]).String())
	}
	for _, o := range []client.Object{svc, slice, secret} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	conn.Host, conn.ServiceName, conn.User = cl.Name+"."+cl.Namespace+".svc", cl.Name, ""
	cl.Status.ConnectionSecretName = secret.Name
	for _, cond := range []metav1.Condition{
		{Type: macvirtv1alpha1.ConditionServiceReady, Status: metav1.ConditionTrue, Reason: macvirtv1alpha1.ReasonAsExpected, Message: "routes"},
		{Type: macvirtv1alpha1.ConditionConnectionSecretReady, Status: metav1.ConditionTrue, Reason: macvirtv1alpha1.ReasonAsExpected, Message: "holds"},
		{Type: macvirtv1alpha1.ConditionStalled, Status: metav1.ConditionFalse, Reason: macvirtv1alpha1.ReasonAsExpected, Message: "no action needed"},
	} {
		meta.SetStatusCondition(&cl.Status.Conditions, cond)
	}
	if err := c.Status().Update(ctx, cl); err != nil {
		t.Fatal(err)
	}
	return legacyClaim{claim: client.ObjectKeyFromObject(cl), service: svc, secret: secret, notBefore: notBefore}
}

// checkLegacyClaimKeptWorking: after the upgrade the claim is reached as it
// was: its own Service, kept, routing to its machine, under the same host
// name. Its connection Secret, written before the connection had a user, is
// left as it is (the new operator only creates Secrets), and the claim says
// it is stale and how to have it written again.
func checkLegacyClaimKeptWorking(ctx context.Context, t *testing.T, c client.Client, l legacyClaim) {
	t.Helper()
	cl := &macvirtv1alpha1.MacClaim{}
	var why string
	waitFor(ctx, t, "the claim bound before the upgrade to say its Secret is stale", func() (bool, string) {
		if err := c.Get(ctx, l.claim, cl); err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(cl.Status.Conditions, macvirtv1alpha1.ConditionConnectionSecretReady)
		why = fmt.Sprintf("status %+v", cl.Status)
		return cond != nil && cond.Reason == macvirtv1alpha1.ReasonConnectionSecretStale &&
			strings.Contains(cond.Message, "Secret "+l.secret.Namespace+"/"+l.secret.Name+" holds an earlier connection"), why
	})
	conn := cl.Status.Connection
	if !meta.IsStatusConditionTrue(cl.Status.Conditions, macvirtv1alpha1.ConditionReady) || conn == nil ||
		conn.Host != l.service.Name+"."+l.service.Namespace+".svc" || conn.ServiceName != l.service.Name || conn.User != "admin" {
		t.Errorf("the claim bound before the upgrade: %s; want Ready, reached at its own Service's name as before, with its user", why)
	}
	svc := &corev1.Service{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(l.service), svc); err != nil || svc.UID != l.service.UID {
		t.Errorf("its Service: %v (UID %s, was %s); want it kept", err, svc.UID, l.service.UID)
	}
	slice := &discoveryv1.EndpointSlice{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(l.service), slice); err != nil || len(slice.Endpoints) != 1 ||
		slice.Endpoints[0].Addresses[0] != conn.Address {
		t.Errorf("its EndpointSlice: %v %+v; want it at %s", err, slice.Endpoints, conn.Address)
	}
	secret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(l.secret), secret); err != nil || secret.UID != l.secret.UID {
		t.Errorf("its Secret: %v (UID %s, was %s); want it left as it was", err, secret.UID, l.secret.UID)
	}
	if cond := meta.FindStatusCondition(cl.Status.Conditions, macvirtv1alpha1.ConditionStalled); cond != nil {
		t.Errorf("Stalled %+v on a Ready claim; want the padding gone", cond)
	}
}
