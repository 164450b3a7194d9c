package machine

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/events"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/controllertest"
	"github.com/macvirt/macvirt/internal/domainhook/contract"
	"github.com/macvirt/macvirt/internal/domainhook/contract/contracttest"
	"github.com/macvirt/macvirt/internal/render"
)

func hookTestConfig(t *testing.T) string {
	t.Helper()
	raw, err := contracttest.Config().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestHookAnnotationsFollowTheTransport(t *testing.T) {
	raw := hookTestConfig(t)
	sidecar := render.Options{DomainHook: contract.TransportSidecar, HookImage: "hook:1"}
	cel := render.Options{DomainHook: contract.TransportPluginCEL}
	// A VM an operator before the Plugin transports rendered: the JSON and
	// the hook sidecar, no flat values.
	old := map[string]string{contract.Annotation: raw, contract.SidecarsAnnotation: `[{"args":["--version","v1alpha3"],"image":"hook:1"}]`,
		"someone.example/note": "kept"}

	next, changed, err := hookAnnotationsFor(old, cel)
	if err != nil || !changed {
		t.Fatalf("sidecar VM under plugin-cel: changed=%v err=%v", changed, err)
	}
	if _, ok := next[contract.SidecarsAnnotation]; ok {
		t.Error("the hook sidecar stays under plugin-cel: the Sidecar gate could not be turned off")
	}
	if next[contract.AnnotationCPUModel] != "Haswell-noTSX" || next[contract.AnnotationSystemPrefix+"serial"] != "C02XK1ZJHX87" ||
		next[contract.Annotation] != raw || next["someone.example/note"] != "kept" {
		t.Errorf("annotations under plugin-cel: %v", next)
	}
	if _, again, _ := hookAnnotationsFor(next, cel); again {
		t.Error("annotations already right for plugin-cel changed again")
	}
	back, changed, err := hookAnnotationsFor(next, sidecar)
	if err != nil || !changed || back[contract.SidecarsAnnotation] == "" || back[contract.AnnotationCPUModel] == "" {
		t.Errorf("plugin-cel VM under sidecar: changed=%v err=%v %v", changed, err, back)
	}
	if got, changed, _ := hookAnnotationsFor(map[string]string{"a": "b"}, cel); changed || got["a"] != "b" {
		t.Error("a template macvirt did not render was changed")
	}
	if _, _, err := hookAnnotationsFor(map[string]string{contract.Annotation: "{"}, cel); err == nil {
		t.Error("a malformed configuration was taken")
	}
}

// sidecarVM is a VM an operator rendered for KubeVirt's hook sidecar.
func sidecarVM(t *testing.T, strategy kubevirtv1.VirtualMachineRunStrategy) *kubevirtv1.VirtualMachine {
	t.Helper()
	v := &kubevirtv1.VirtualMachine{}
	v.Name, v.Namespace = "m", "ns"
	v.Spec.RunStrategy = &strategy
	v.Spec.Template = &kubevirtv1.VirtualMachineInstanceTemplateSpec{}
	v.Spec.Template.ObjectMeta.Annotations = map[string]string{contract.Annotation: hookTestConfig(t),
		contract.SidecarsAnnotation: `[{"image":"hook:1"}]`}
	return v
}

func TestAVMGetsTheTransportsAnnotationsWithoutARestart(t *testing.T) {
	always := kubevirtv1.RunStrategyAlways
	v := sidecarVM(t, always)
	c := fake.NewClientBuilder().WithScheme(controllertest.Scheme(t)).WithObjects(v).Build()
	r := &Reconciler{Client: c, Render: render.Options{DomainHook: contract.TransportPluginCEL}}
	o := &machineObservation{Machine: machine(), VM: v.DeepCopy()}
	if proceed, err := r.ensureDomainHookAnnotations(context.Background(), o); !proceed || err != nil {
		t.Fatalf("proceed=%v err=%v", proceed, err)
	}
	got := &kubevirtv1.VirtualMachine{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(v), got); err != nil {
		t.Fatal(err)
	}
	a := got.Spec.Template.ObjectMeta.Annotations
	if _, ok := a[contract.SidecarsAnnotation]; ok || a[contract.AnnotationVideoModel] != "vga" || *got.Spec.RunStrategy != always {
		t.Errorf("VM after the patch: annotations %v, runStrategy %s", a, *got.Spec.RunStrategy)
	}
}

// A VM is neither created nor started while the domain hook is not in
// place; the machine says why and looks again.
func TestNoVMStartsWithoutItsDomainSettings(t *testing.T) {
	strategy := kubevirtv1.RunStrategyHalted
	v := &kubevirtv1.VirtualMachine{}
	v.Name, v.Namespace = "m", "ns"
	v.Spec.RunStrategy = &strategy
	patches := 0
	c := fake.NewClientBuilder().WithScheme(controllertest.Scheme(t)).WithObjects(v).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			patches++
			return cl.Patch(ctx, obj, p, opts...)
		},
	}).Build()
	notReady := errors.New("KubeVirt's Plugins feature gate is off")
	r := &Reconciler{Client: c, DomainHook: func() error { return notReady }}
	o := &machineObservation{Machine: machine(), Class: class(), VM: v.DeepCopy()}
	if proceed, err := r.ensureRunState(context.Background(), o); proceed || err != nil || patches != 0 {
		t.Fatalf("start while the hook is not ready: proceed=%v err=%v patches=%d", proceed, err, patches)
	}
	st := computeMachineStatus(*o)
	ready := meta.FindStatusCondition(st.Status.Conditions, macvirtv1alpha1.ConditionReady)
	if ready == nil || ready.Reason != macvirtv1alpha1.ReasonDomainHookNotReady || !strings.Contains(ready.Message, notReady.Error()) ||
		st.RequeueAfter != domainHookRecheck {
		t.Errorf("Ready %+v, requeue %v", ready, st.RequeueAfter)
	}
	// Waiting, not stuck: the wait ends by itself.
	if stalled := meta.FindStatusCondition(st.Status.Conditions, macvirtv1alpha1.ConditionStalled); stalled == nil || stalled.Status != "False" {
		t.Errorf("Stalled %+v, want False", stalled)
	}
	// Creating is held the same way.
	o = &machineObservation{Machine: machine(), Class: class()}
	if proceed, err := r.ensureVirtualMachine(context.Background(), o); proceed || err != nil || o.Blocked == nil ||
		o.Blocked.Reason != macvirtv1alpha1.ReasonDomainHookNotReady {
		t.Errorf("create while the hook is not ready: proceed=%v err=%v blocked=%+v", proceed, err, o.Blocked)
	}
	// Once ready, the VM starts.
	r.DomainHook = func() error { return nil }
	o = &machineObservation{Machine: machine(), Class: class(), VM: v.DeepCopy()}
	if _, err := r.ensureRunState(context.Background(), o); err != nil || patches != 1 {
		t.Errorf("start once ready: err=%v patches=%d", err, patches)
	}
}

// A VM whose template could not be given the transport's annotations is not
// started: KubeVirt would start it with the old transport.
func TestAVMWhoseTemplateWasNotUpdatedIsNotStarted(t *testing.T) {
	v := sidecarVM(t, kubevirtv1.RunStrategyHalted)
	patches := 0
	c := fake.NewClientBuilder().WithScheme(controllertest.Scheme(t)).WithObjects(v).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			patches++
			return apierrors.NewForbidden(kubevirtv1.Resource("virtualmachines"), "m", errors.New("a policy freezes VM templates"))
		},
	}).Build()
	r := &Reconciler{Client: c, Recorder: events.NewFakeRecorder(8), Render: render.Options{DomainHook: contract.TransportPluginCEL},
		DomainHook: func() error { return nil }}
	o := &machineObservation{Machine: machine(), Class: class(), VM: v.DeepCopy()}
	if proceed, err := r.ensureDomainHookAnnotations(context.Background(), o); !proceed || err != nil {
		t.Fatalf("proceed=%v err=%v", proceed, err)
	}
	if proceed, err := r.ensureRunState(context.Background(), o); proceed || err != nil || patches != 1 {
		t.Fatalf("started a VM with a stale template: proceed=%v err=%v patches=%d", proceed, err, patches)
	}
	if o.Blocked == nil || o.Blocked.Reason != macvirtv1alpha1.ReasonDomainHookNotReady ||
		!strings.Contains(o.Blocked.Message, "not yet written for the plugin-cel transport") || !strings.Contains(o.Blocked.Message, "a policy freezes VM templates") {
		t.Errorf("blocked %+v", o.Blocked)
	}
}
