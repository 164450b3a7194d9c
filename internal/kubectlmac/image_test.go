/*
Copyright 2026 The macvirt Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package kubectlmac

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// imageEnv is an Env over a fake cluster holding objs, in namespace dev.
func imageEnv(t *testing.T, c client.WithWatch) (*Env, *bytes.Buffer) {
	t.Helper()
	var out bytes.Buffer
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	return &Env{Client: c, Namespace: "dev", Streams: Streams{Out: &out, Err: &out},
		Now: func() time.Time { return now }, PollInterval: time.Millisecond}, &out
}

// imageFake is a fake cluster that lists images by metadata.name, as the
// API server does.
func imageFake(t *testing.T) *fake.ClientBuilder {
	t.Helper()
	return fake.NewClientBuilder().WithScheme(imageScheme(t)).
		WithIndex(&macvirtv1alpha1.MacImage{}, "metadata.name", func(o client.Object) []string { return []string{o.GetName()} })
}

func imageScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := macvirtv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// parseImage parses the image command's flags as Main would.
func parseImage(t *testing.T, args ...string) (*imageCmd, []string) {
	t.Helper()
	r, rest := parseCommand(t, "image", args...)
	return r.(*imageCmd), rest
}

func TestImageCaptureCreatesAnImageOfTheClaimInTheNamespace(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(imageScheme(t)).Build()
	env, out := imageEnv(t, c)
	cmd, args := parseImage(t, "capture", "alice-mac", "xcode-16", "--storage-class", "fast", "--description", "macOS 15.5 + Xcode 16")
	if code, err := cmd.run(context.Background(), env, args); code != 0 || err != nil {
		t.Fatalf("capture: %d %v", code, err)
	}
	img := &macvirtv1alpha1.MacImage{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "xcode-16"}, img); err != nil {
		t.Fatal(err)
	}
	if src := img.Spec.Source; src.Machine != nil || src.Claim == nil || *src.Claim != (macvirtv1alpha1.NamespacedName{Namespace: "dev", Name: "alice-mac"}) {
		t.Errorf("source = %+v, want claim dev/alice-mac", src)
	}
	if sc := img.Spec.StorageClassName; sc == nil || *sc != "fast" || img.Spec.Description != "macOS 15.5 + Xcode 16" {
		t.Errorf("storage class %v, description %q", sc, img.Spec.Description)
	}
	if want := "macimage xcode-16 created: capturing claim dev/alice-mac\n"; !strings.HasPrefix(out.String(), want) {
		t.Errorf("output %q, want it to start with %q", out.String(), want)
	}
}

func TestImageCaptureOfAMachineNamesItsNamespace(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(imageScheme(t)).Build()
	env, _ := imageEnv(t, c)
	cmd, args := parseImage(t, "capture", "--machine", "macvirt-pools/ci-sonoma-0", "sonoma-base")
	if code, err := cmd.run(context.Background(), env, args); code != 0 || err != nil {
		t.Fatalf("capture: %d %v", code, err)
	}
	img := &macvirtv1alpha1.MacImage{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "sonoma-base"}, img); err != nil {
		t.Fatal(err)
	}
	if src := img.Spec.Source; src.Claim != nil || src.Machine == nil || *src.Machine != (macvirtv1alpha1.NamespacedName{Namespace: "macvirt-pools", Name: "ci-sonoma-0"}) {
		t.Errorf("source = %+v, want machine macvirt-pools/ci-sonoma-0", src)
	}
}

func TestImageCaptureRefusesWhatItCannotName(t *testing.T) {
	env, _ := imageEnv(t, fake.NewClientBuilder().WithScheme(imageScheme(t)).Build())
	for name, args := range map[string][]string{
		"no subcommand":     nil,
		"no image name":     {"capture", "alice-mac"},
		"a source too deep": {"capture", "a/b/c", "x"},
		"an empty source":   {"capture", "dev/", "x"},
		"another verb":      {"delete", "x"},
	} {
		cmd, rest := parseImage(t, args...)
		if code, err := cmd.run(context.Background(), env, rest); code != 2 || err == nil {
			t.Errorf("%s: %d %v, want usage error 2", name, code, err)
		}
	}
}

// progress moves a MacImage through a capture, one step per event, as the
// operator would.
type progress struct {
	mu    sync.Mutex
	reads int
	steps []func(*macvirtv1alpha1.MacImageStatus)
}

func (p *progress) next(st *macvirtv1alpha1.MacImageStatus) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := min(p.reads, len(p.steps)-1)
	p.reads++
	for _, s := range p.steps[:i+1] {
		s(st)
	}
}

func TestImageCaptureWaitPrintsEachStepAndHowToUseTheImage(t *testing.T) {
	size := resource.MustParse("128Gi")
	steps := &progress{steps: []func(*macvirtv1alpha1.MacImageStatus){
		func(*macvirtv1alpha1.MacImageStatus) {},
		func(st *macvirtv1alpha1.MacImageStatus) {
			st.Phase = macvirtv1alpha1.ImageStopping
			meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
				Reason: macvirtv1alpha1.ReasonStoppingSource, Message: "waiting for macvirt-pools/ci-0 to stop"})
		},
		func(st *macvirtv1alpha1.MacImageStatus) {
			st.Phase = macvirtv1alpha1.ImageCopying
			st.Copy = &macvirtv1alpha1.ImageCopyStatus{DataVolume: "xcode-16", CloneStrategy: "csi-clone", Progress: "40.00%"}
			meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
				Reason: macvirtv1alpha1.ReasonCopying, Message: "CDI is cloning the disk"})
		},
		func(st *macvirtv1alpha1.MacImageStatus) { st.Copy.Progress = "100.0%" },
		func(st *macvirtv1alpha1.MacImageStatus) {
			st.Phase, st.PublishedAs, st.Size = macvirtv1alpha1.ImageReady, macvirtv1alpha1.ImagePublishedAsSnapshot, &size
			st.DataSource = &macvirtv1alpha1.NamespacedName{Namespace: "macvirt-images", Name: "xcode-16"}
			meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionTrue,
				Reason: macvirtv1alpha1.ReasonPublished, Message: "published"})
		},
	}}
	// The watch that --wait opens sees the operator's every step.
	c := imageFake(t).WithInterceptorFuncs(interceptor.Funcs{
		Watch: func(ctx context.Context, c client.WithWatch, _ client.ObjectList, _ ...client.ListOption) (watch.Interface, error) {
			img := &macvirtv1alpha1.MacImage{}
			if err := c.Get(ctx, client.ObjectKey{Name: "xcode-16"}, img); err != nil {
				return nil, err
			}
			w := watch.NewFakeWithChanSize(len(steps.steps), false)
			for range steps.steps {
				next := img.DeepCopy()
				steps.next(&next.Status)
				w.Modify(next)
			}
			return w, nil
		},
	}).Build()
	env, out := imageEnv(t, c)
	cmd, args := parseImage(t, "capture", "alice-mac", "xcode-16", "--wait")
	if code, err := cmd.run(context.Background(), env, args); code != 0 || err != nil {
		t.Fatalf("capture --wait: %d %v\n%s", code, err, out.String())
	}
	want := "macimage xcode-16 created: capturing claim dev/alice-mac\n" +
		"  waiting for the operator\n" +
		"  Stopping: waiting for macvirt-pools/ci-0 to stop\n" +
		"  Copying (40.00%, clone strategy csi-clone): CDI is cloning the disk\n" +
		"  Copying (100.0%, clone strategy csi-clone): CDI is cloning the disk\n" +
		"macimage xcode-16 is Ready after 0s: DataSource macvirt-images/xcode-16 (100.0%, clone strategy csi-clone, published as VolumeSnapshot, 128Gi)\n" +
		"Use it in a MacClass:\n" +
		"  image: {sourceRef: {kind: DataSource, namespace: macvirt-images, name: xcode-16}}\n"
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestImageCaptureWaitStopsWhenTheCaptureFails(t *testing.T) {
	img := &macvirtv1alpha1.MacImage{ObjectMeta: metav1.ObjectMeta{Name: "xcode-16", UID: "u1"}}
	img.Status.Phase = macvirtv1alpha1.ImageFailed
	meta.SetStatusCondition(&img.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: macvirtv1alpha1.ReasonCopyFailed, Message: "CDI: clone failed: no space left"})
	env, _ := imageEnv(t, imageFake(t).WithObjects(img).Build())
	code, err := waitImage(context.Background(), env, img, time.Minute)
	if code != 1 || err == nil || !strings.Contains(err.Error(), "CopyFailed: CDI: clone failed: no space left") {
		t.Errorf("wait on a failed capture: %d %v", code, err)
	}
}

func TestImageListShowsEachImage(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	size := resource.MustParse("128Gi")
	ready := &macvirtv1alpha1.MacImage{ObjectMeta: metav1.ObjectMeta{Name: "xcode-16", CreationTimestamp: metav1.NewTime(now.Add(-2 * time.Hour))}}
	ready.Status = macvirtv1alpha1.MacImageStatus{Phase: macvirtv1alpha1.ImageReady,
		Machine:    &macvirtv1alpha1.ObjectRef{Namespace: "macvirt-pools", Name: "ci-0"},
		Copy:       &macvirtv1alpha1.ImageCopyStatus{CloneStrategy: "snapshot", Progress: "100.0%"},
		DataSource: &macvirtv1alpha1.NamespacedName{Namespace: "macvirt-images", Name: "xcode-16"}, Size: &size}
	copying := &macvirtv1alpha1.MacImage{ObjectMeta: metav1.ObjectMeta{Name: "base", CreationTimestamp: metav1.NewTime(now.Add(-5 * time.Minute))}}
	copying.Status = macvirtv1alpha1.MacImageStatus{Phase: macvirtv1alpha1.ImageCopying,
		Machine: &macvirtv1alpha1.ObjectRef{Namespace: "dev", Name: "m-1"}, Copy: &macvirtv1alpha1.ImageCopyStatus{CloneStrategy: "copy"}}
	meta.SetStatusCondition(&copying.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: macvirtv1alpha1.ReasonCopying, Message: "CDI copies the disk host-assisted (copy): a full copy, slow"})
	env, out := imageEnv(t, fake.NewClientBuilder().WithScheme(imageScheme(t)).WithObjects(ready, copying).Build())
	env.Now = func() time.Time { return now }
	cmd, args := parseImage(t, "list")
	if code, err := cmd.run(context.Background(), env, args); code != 0 || err != nil {
		t.Fatalf("list: %d %v", code, err)
	}
	got := out.String()
	for _, want := range []string{
		"NAME       PHASE     MACHINE              STRATEGY   SIZE     DATASOURCE                AGE",
		"base       Copying   dev/m-1              copy       <none>   <none>                    5m",
		"xcode-16   Ready     macvirt-pools/ci-0   snapshot   128Gi    macvirt-images/xcode-16   120m",
		"base: Copying: CDI copies the disk host-assisted (copy): a full copy, slow",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("list output lacks %q:\n%s", want, got)
		}
	}
	out.Reset()
	env.Client = fake.NewClientBuilder().WithScheme(imageScheme(t)).Build()
	if code, err := cmd.run(context.Background(), env, []string{"get"}); code != 0 || err != nil || !strings.Contains(out.String(), "No images.") {
		t.Fatalf("list of none: %d %v %q", code, err, out.String())
	}
}
