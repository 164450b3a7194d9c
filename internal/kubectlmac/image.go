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
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	flag "github.com/spf13/pflag"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// imageCmd is `kubectl mac image capture|list`: an admin's golden images
// (MacImages), captured from a claim's Mac or a machine.
type imageCmd struct {
	machine             bool
	storageClass, descr string
	wait                bool
	timeout             time.Duration
}

func imageFlags(fs *flag.FlagSet) runner {
	c := &imageCmd{}
	fs.BoolVar(&c.machine, "machine", false, "capture: the source is a MacMachine (NAMESPACE/NAME), not a claim")
	fs.StringVar(&c.storageClass, "storage-class", "", "capture: the StorageClass of the image's volume (default: the source disk's)")
	fs.StringVar(&c.descr, "description", "", "capture: what the image holds (macOS 15.5 + Xcode 16, say)")
	fs.BoolVar(&c.wait, "wait", false, "capture: follow the capture until the image is Ready")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Hour, "capture: how long --wait waits")
	return c
}

func (c *imageCmd) run(ctx context.Context, env *Env, args []string) (int, error) {
	if len(args) == 0 {
		return 2, errors.New("give a subcommand: kubectl mac image capture CLAIM NAME, or kubectl mac image list [NAME]")
	}
	switch args[0] {
	case "capture":
		return c.capture(ctx, env, args[1:])
	case "list", "get":
		return listImages(ctx, env, args[1:])
	}
	return 2, fmt.Errorf("unknown subcommand %q: kubectl mac image capture CLAIM NAME, or kubectl mac image list [NAME]", args[0])
}

// capture creates the MacImage and, with --wait, follows it.
func (c *imageCmd) capture(ctx context.Context, env *Env, args []string) (int, error) {
	if len(args) != 2 || args[0] == "" || args[1] == "" {
		return 2, errors.New("give the source and the image's name: kubectl mac image capture CLAIM NAME, " +
			"or kubectl mac image capture --machine NAMESPACE/MACHINE NAME")
	}
	src, err := sourceRef(args[0], env.Namespace)
	if err != nil {
		return 2, err
	}
	img := &macvirtv1alpha1.MacImage{ObjectMeta: metav1.ObjectMeta{Name: args[1]},
		Spec: macvirtv1alpha1.MacImageSpec{Description: c.descr}}
	kind := "claim"
	if c.machine {
		kind = "machine"
		img.Spec.Source.Machine = &src
	} else {
		img.Spec.Source.Claim = &src
	}
	if c.storageClass != "" {
		img.Spec.StorageClassName = &c.storageClass
	}
	if err := env.Client.Create(ctx, img); err != nil {
		return 1, err
	}
	_, _ = fmt.Fprintf(env.Out, "macimage %s created: capturing %s %s/%s\n", img.Name, kind, src.Namespace, src.Name)
	if !c.wait {
		_, _ = fmt.Fprintf(env.Out, "follow it with: kubectl mac image list %s\n", img.Name)
		return 0, nil
	}
	return waitImage(ctx, env, img, c.timeout)
}

// sourceRef reads NAMESPACE/NAME, or NAME in namespace.
func sourceRef(arg, namespace string) (macvirtv1alpha1.NamespacedName, error) {
	ns, name, qualified := strings.Cut(arg, "/")
	if !qualified {
		ns, name = namespace, arg
	}
	if ns == "" || name == "" || strings.Contains(name, "/") {
		return macvirtv1alpha1.NamespacedName{}, fmt.Errorf("%q is not NAME or NAMESPACE/NAME", arg)
	}
	return macvirtv1alpha1.NamespacedName{Namespace: ns, Name: name}, nil
}

// waitImage follows the image by a watch until it is Ready, printing each
// new step; it gives up when the capture failed, is Stalled, or the image
// is gone (or another of its name replaced it), or after timeout.
func waitImage(ctx context.Context, env *Env, created *macvirtv1alpha1.MacImage, timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start, last := env.now(), ""
	f := &follower{env: env, name: created.Name, kind: "macimage",
		newList: func() client.ObjectList { return &macvirtv1alpha1.MacImageList{} },
		settle: func(obj client.Object, _ bool) (int, bool, error) {
			img, _ := obj.(*macvirtv1alpha1.MacImage)
			if img == nil || created.UID != "" && img.UID != created.UID {
				return 1, true, fmt.Errorf("macimage %s was deleted", created.Name)
			}
			return imageSettled(env, img, start, &last)
		}}
	code, done, err := f.run(ctx)
	if !done && ctx.Err() != nil {
		return 1, fmt.Errorf("macimage %s is not Ready after %s: %s", created.Name, timeout, last)
	}
	return code, err
}

// imageSettled prints the image's step when it changed and says whether
// waiting is over.
func imageSettled(env *Env, img *macvirtv1alpha1.MacImage, start time.Time, last *string) (int, bool, error) {
	ready := meta.FindStatusCondition(img.Status.Conditions, macvirtv1alpha1.ConditionReady)
	st := img.Status
	if st.Phase == macvirtv1alpha1.ImageReady && st.DataSource != nil {
		_, _ = fmt.Fprintf(env.Out, "macimage %s is Ready after %s: DataSource %s/%s%s\n", img.Name,
			env.now().Sub(start).Round(time.Second), st.DataSource.Namespace, st.DataSource.Name, imageFacts(img))
		_, _ = fmt.Fprintf(env.Out, "Use it in a MacClass:\n  image: {sourceRef: {kind: DataSource, namespace: %s, name: %s}}\n",
			st.DataSource.Namespace, st.DataSource.Name)
		return 0, true, nil
	}
	if st.Phase == macvirtv1alpha1.ImageFailed {
		why := "no reason given"
		if ready != nil {
			why = ready.Reason + ": " + guestprotocol.Printable(ready.Message)
		}
		return 1, true, fmt.Errorf("macimage %s failed (%s)", img.Name, why)
	}
	if s := meta.FindStatusCondition(st.Conditions, macvirtv1alpha1.ConditionStalled); s != nil && s.Status == metav1.ConditionTrue {
		return 1, true, fmt.Errorf("macimage %s needs a human (%s): %s", img.Name, s.Reason, guestprotocol.Printable(s.Message))
	}
	step := "waiting for the operator"
	if st.Phase != "" {
		step = string(st.Phase) + imageFacts(img)
		if ready != nil && ready.Message != "" {
			step += ": " + guestprotocol.Printable(ready.Message)
		}
	}
	if step != *last {
		_, _ = fmt.Fprintf(env.Out, "  %s\n", step)
		*last = step
	}
	return 0, false, nil
}

// imageFacts are, in parentheses, the copy's progress and clone strategy
// and the image's size, as far as they are known.
func imageFacts(img *macvirtv1alpha1.MacImage) string {
	var facts []string
	if cp := img.Status.Copy; cp != nil {
		if cp.Progress != "" {
			facts = append(facts, cp.Progress)
		}
		if cp.CloneStrategy != "" {
			facts = append(facts, "clone strategy "+cp.CloneStrategy)
		}
	}
	if img.Status.PublishedAs != "" {
		facts = append(facts, "published as "+img.Status.PublishedAs)
	}
	if sz := img.Status.Size; sz != nil {
		facts = append(facts, sz.String())
	}
	if len(facts) == 0 {
		return ""
	}
	return " (" + strings.Join(facts, ", ") + ")"
}

// listImages prints the cluster's images, or one.
func listImages(ctx context.Context, env *Env, args []string) (int, error) {
	var images []macvirtv1alpha1.MacImage
	switch len(args) {
	case 0:
		var list macvirtv1alpha1.MacImageList
		if err := env.Client.List(ctx, &list); err != nil {
			return 1, err
		}
		images = list.Items
	case 1:
		img := &macvirtv1alpha1.MacImage{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: args[0]}, img); err != nil {
			return 1, err
		}
		images = []macvirtv1alpha1.MacImage{*img}
	default:
		return 2, errors.New("give at most one image: kubectl mac image list [NAME]")
	}
	if len(images) == 0 {
		_, _ = fmt.Fprintln(env.Out, "No images.")
		return 0, nil
	}
	w := tabwriter.NewWriter(env.Out, 0, 4, 3, ' ', 0)
	_, _ = fmt.Fprintln(w, "NAME\tPHASE\tMACHINE\tSTRATEGY\tSIZE\tDATASOURCE\tAGE")
	for i := range images {
		img := &images[i]
		st := img.Status
		machine, strategy, size, ds := "<none>", "<none>", "<none>", "<none>"
		if st.Machine != nil {
			machine = st.Machine.Namespace + "/" + st.Machine.Name
		}
		if st.Copy != nil {
			strategy = orNone(st.Copy.CloneStrategy)
		}
		if st.Size != nil {
			size = st.Size.String()
		}
		if st.DataSource != nil {
			ds = st.DataSource.Namespace + "/" + st.DataSource.Name
		}
		_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", img.Name, orNone(string(st.Phase)), machine, strategy, size, ds,
			duration.HumanDuration(env.now().Sub(img.CreationTimestamp.Time)))
	}
	if err := w.Flush(); err != nil {
		return 1, err
	}
	for i := range images {
		img := &images[i]
		if img.Status.Phase == macvirtv1alpha1.ImageReady {
			continue
		}
		if c := meta.FindStatusCondition(img.Status.Conditions, macvirtv1alpha1.ConditionReady); c != nil && c.Message != "" {
			_, _ = fmt.Fprintf(env.Out, "\n%s: %s: %s\n", img.Name, c.Reason, guestprotocol.Printable(c.Message))
		}
	}
	return 0, nil
}
