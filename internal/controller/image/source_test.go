package image

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
)

func reconcilerWith(t *testing.T, objs ...client.Object) *Reconciler {
	t.Helper()
	s, err := macvirtscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	return &Reconciler{Client: fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build(), ImagesNamespace: "macvirt-images"}
}

func capturedMac(mods ...func(*macvirtv1alpha1.MacMachine)) *macvirtv1alpha1.MacMachine {
	m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "macvirt-pools", Name: "ci-0", UID: "m1",
		CreationTimestamp: metav1.NewTime(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))},
		Spec: macvirtv1alpha1.MacMachineSpec{ClassName: "sonoma", Running: ptr.To(true)}}
	for _, mod := range mods {
		mod(m)
	}
	return m
}

func image(name string) *macvirtv1alpha1.MacImage {
	return &macvirtv1alpha1.MacImage{ObjectMeta: metav1.ObjectMeta{Name: name, UID: "i-" + "uid",
		CreationTimestamp: metav1.NewTime(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))},
		Spec: macvirtv1alpha1.MacImageSpec{Source: macvirtv1alpha1.ImageSource{Machine: &macvirtv1alpha1.NamespacedName{Namespace: "macvirt-pools", Name: "ci-0"}}}}
}

func TestASecondCaptureWaitsForTheFirstEvenOnceTheMacIsStopped(t *testing.T) {
	m := capturedMac(func(m *macvirtv1alpha1.MacMachine) {
		m.Annotations = map[string]string{macvirtv1alpha1.AnnotationCapture: "first"}
		m.Spec.Running = ptr.To(false)
		m.Status.Phase = macvirtv1alpha1.MachineStopped
	})
	r := reconcilerWith(t, m)
	s := &imageScope{Image: image("second"), Machine: m}
	if proceed, err := r.stopSource(context.Background(), s); err != nil || proceed {
		t.Fatalf("stopSource = (%v, %v), want to wait for the first capture", proceed, err)
	}
	if s.Problem == nil || s.Problem.Reason != macvirtv1alpha1.ReasonStoppingSource {
		t.Errorf("problem = %+v", s.Problem)
	}
}

func TestAMacReleasedDuringItsCaptureStaysStopped(t *testing.T) {
	for name, mod := range map[string]func(*macvirtv1alpha1.MacMachine){
		"released": func(m *macvirtv1alpha1.MacMachine) {
			m.Labels = map[string]string{macvirtv1alpha1.LabelReleased: "true"}
		},
		"running": func(*macvirtv1alpha1.MacMachine) {},
	} {
		t.Run(name, func(t *testing.T) {
			m := capturedMac(mod, func(m *macvirtv1alpha1.MacMachine) {
				m.Annotations = map[string]string{macvirtv1alpha1.AnnotationCapture: "img"}
				m.Spec.Running = ptr.To(false)
			})
			r := reconcilerWith(t, m)
			if err := r.releaseSource(context.Background(), &imageScope{Image: image("img"), Machine: m}); err != nil {
				t.Fatal(err)
			}
			got := &macvirtv1alpha1.MacMachine{}
			if err := r.Get(context.Background(), client.ObjectKeyFromObject(m), got); err != nil {
				t.Fatal(err)
			}
			if _, ok := got.Annotations[macvirtv1alpha1.AnnotationCapture]; ok {
				t.Error("the capture's annotation stayed")
			}
			if want := name == "running"; ptr.Deref(got.Spec.Running, true) != want {
				t.Errorf("running = %v, want %v", ptr.Deref(got.Spec.Running, true), want)
			}
		})
	}
}

func TestAMacMadeAfterTheImageUnderItsNameIsNotCaptured(t *testing.T) {
	m := capturedMac(func(m *macvirtv1alpha1.MacMachine) {
		m.CreationTimestamp = metav1.NewTime(time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC))
	})
	r := reconcilerWith(t, m)
	s := &imageScope{Image: image("img")}
	if err := r.findMachine(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if s.Machine != nil || !s.Terminal || s.Problem.Reason != macvirtv1alpha1.ReasonSourceNotCapturable {
		t.Errorf("scope = machine %v, terminal %v, problem %+v; want the newer Mac refused for good", s.Machine, s.Terminal, s.Problem)
	}
}
