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

package v1alpha1

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// imageOfClaim is a MacImage capturing claim namespace/name.
func imageOfClaim(namespace, name string) *macvirtv1alpha1.MacImage {
	return &macvirtv1alpha1.MacImage{ObjectMeta: metav1.ObjectMeta{Name: "xcode-16"},
		Spec: macvirtv1alpha1.MacImageSpec{Source: macvirtv1alpha1.ImageSource{
			Claim: &macvirtv1alpha1.NamespacedName{Namespace: namespace, Name: name}}}}
}

// imageOfMachine is a MacImage capturing machine namespace/name.
func imageOfMachine(namespace, name string) *macvirtv1alpha1.MacImage {
	return &macvirtv1alpha1.MacImage{ObjectMeta: metav1.ObjectMeta{Name: "xcode-16"},
		Spec: macvirtv1alpha1.MacImageSpec{Source: macvirtv1alpha1.ImageSource{
			Machine: &macvirtv1alpha1.NamespacedName{Namespace: namespace, Name: name}}}}
}

// boundClaim is claim dev/alice-mac bound to machine macvirt-pools/ci-0.
func boundClaim() *macvirtv1alpha1.MacClaim {
	c := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "dev", Name: "alice-mac"}}
	c.Status.Phase = macvirtv1alpha1.ClaimReady
	c.Status.MachineRef = &macvirtv1alpha1.ObjectRef{Namespace: "macvirt-pools", Name: "ci-0", UID: "0b9c2f3e-0000-4000-8000-000000000001"}
	return c
}

// poolMachine is machine macvirt-pools/ci-0 in phase, bound to dev/alice-mac
// when bound.
func poolMachine(phase macvirtv1alpha1.MachinePhase, bound bool) *macvirtv1alpha1.MacMachine {
	m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "macvirt-pools", Name: "ci-0"},
		Spec: macvirtv1alpha1.MacMachineSpec{ClassName: "sonoma"}}
	m.Status.Phase = phase
	if bound {
		m.Spec.ClaimRef = &macvirtv1alpha1.ObjectRef{Namespace: "dev", Name: "alice-mac", UID: "0b9c2f3e-0000-4000-8000-000000000002"}
	}
	return m
}

func TestValidateMacImageNamesTheField(t *testing.T) {
	cases := map[string]struct {
		img   *macvirtv1alpha1.MacImage
		field string // empty: valid
	}{
		"a claim":               {img: imageOfClaim("dev", "alice-mac")},
		"a machine":             {img: imageOfMachine("macvirt-pools", "ci-0")},
		"a dotted name":         {img: func() *macvirtv1alpha1.MacImage { i := imageOfClaim("dev", "a"); i.Name = "xcode.16"; return i }(), field: "metadata.name"},
		"an upper-case name":    {img: func() *macvirtv1alpha1.MacImage { i := imageOfClaim("dev", "a"); i.Name = "Xcode"; return i }(), field: "metadata.name"},
		"a bad claim namespace": {img: imageOfClaim("Dev", "alice-mac"), field: "spec.source.claim.namespace"},
		"a bad machine name":    {img: imageOfMachine("macvirt-pools", "ci_0"), field: "spec.source.machine.name"},
		"no source":             {img: &macvirtv1alpha1.MacImage{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, field: "spec.source"},
		"a malformed storage class": {img: func() *macvirtv1alpha1.MacImage {
			i := imageOfClaim("dev", "a")
			i.Spec.StorageClassName = strPtr("Fast SSD")
			return i
		}(), field: "spec.storageClassName"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			errs := ValidateMacImage(tc.img)
			if tc.field == "" {
				if len(errs) > 0 {
					t.Fatalf("refused: %v", errs)
				}
				return
			}
			for _, e := range errs {
				if e.Field == tc.field {
					return
				}
			}
			t.Fatalf("got %v, want an error naming %s", errs, tc.field)
		})
	}
}

func TestTheNameOfAnImageSaysItNamesTheDataSource(t *testing.T) {
	img := imageOfClaim("dev", "alice-mac")
	img.Name = "xcode.16"
	expectError(t, ValidateMacImage(img), "metadata.name", "the published DataSource's")
}

func TestOnlyWhoMayWriteTheMachineCapturesIt(t *testing.T) {
	cases := map[string]struct {
		img         *macvirtv1alpha1.MacImage
		env         ImageEnv
		field, want string // want empty: admitted
		warn        string
	}{
		"a tenant who may not read the claim": {
			img: imageOfClaim("dev", "alice-mac"), env: ImageEnv{User: "mallory"},
			field: "spec.source.claim",
			want:  `mallory may not get macclaims.macvirt.io "alice-mac" in namespace dev; capturing stops the Mac and publishes its disk to the whole cluster, so only cluster admins capture images`,
		},
		"a claim that does not exist": {
			img: imageOfClaim("dev", "gone"), env: ImageEnv{User: "alice", MayGetClaim: true},
			field: "spec.source.claim", want: "claim dev/gone does not exist",
		},
		"a claim not bound yet": {
			img: imageOfClaim("dev", "alice-mac"), env: ImageEnv{User: "alice", MayGetClaim: true, Claim: &macvirtv1alpha1.MacClaim{}},
			field: "spec.source.claim",
			want:  "claim dev/alice-mac is not bound to a machine; capture it once `kubectl get macclaim` shows it Bound",
		},
		"the claim's owner, who may not write the pools' machines": {
			img: imageOfClaim("dev", "alice-mac"), env: ImageEnv{User: "alice", MayGetClaim: true, Claim: boundClaim()},
			field: "spec.source.claim",
			want:  "alice may not update macmachines.macvirt.io in namespace macvirt-pools; capturing stops the Mac and publishes its disk",
		},
		"a machine source, by someone who may not write machines there": {
			img: imageOfMachine("macvirt-pools", "ci-0"), env: ImageEnv{User: "carol"},
			field: "spec.source.machine", want: "carol may not update macmachines.macvirt.io in namespace macvirt-pools",
		},
		"a machine that does not exist": {
			img: imageOfMachine("macvirt-pools", "ci-9"), env: ImageEnv{User: "admin", MayUpdateMachine: true},
			field: "spec.source.machine", want: "machine macvirt-pools/ci-9 does not exist",
		},
		"a bound claim whose machine is gone": {
			img: imageOfClaim("dev", "alice-mac"), env: ImageEnv{User: "admin", MayGetClaim: true, Claim: boundClaim(), MayUpdateMachine: true},
			field: "spec.source.claim", want: "claim dev/alice-mac's machine macvirt-pools/ci-0 does not exist",
		},
		"an admin capturing a claim's running Mac, warned": {
			img:  imageOfClaim("dev", "alice-mac"),
			env:  ImageEnv{User: "admin", MayGetClaim: true, Claim: boundClaim(), MayUpdateMachine: true, Machine: poolMachine(macvirtv1alpha1.MachineReady, true)},
			warn: "capturing stops dev/alice-mac's Mac until the copy is done",
		},
		"an admin capturing a released, stopped machine": {
			img: imageOfMachine("macvirt-pools", "ci-0"),
			env: ImageEnv{User: "admin", MayUpdateMachine: true, Machine: poolMachine(macvirtv1alpha1.MachineStopped, false)},
		},
		"an admin capturing a bound Mac already stopped, warned of what its users left": {
			img:  imageOfMachine("macvirt-pools", "ci-0"),
			env:  ImageEnv{User: "admin", MayUpdateMachine: true, Machine: poolMachine(macvirtv1alpha1.MachineStopped, true)},
			warn: "the image carries whatever dev/alice-mac's users left on the Mac",
		},
		"an admin capturing an idle pool machine": {
			img: imageOfMachine("macvirt-pools", "ci-0"),
			env: ImageEnv{User: "admin", MayUpdateMachine: true, Machine: poolMachine(macvirtv1alpha1.MachineReady, false)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			errs, warns := ValidateMacImageSource(tc.img, tc.env)
			if tc.want == "" && len(errs) > 0 {
				t.Fatalf("refused: %v", errs)
			}
			if tc.want != "" {
				expectError(t, errs, tc.field, tc.want)
			}
			if got := strings.Join(warns, "\n"); (tc.warn == "") != (got == "") || !strings.Contains(got, tc.warn) {
				t.Errorf("warnings %q, want %q", got, tc.warn)
			}
		})
	}
}

func TestAMachineStoppingOrToldToStopIsNotRunning(t *testing.T) {
	for phase, want := range map[macvirtv1alpha1.MachinePhase]bool{
		macvirtv1alpha1.MachineStarting: true, macvirtv1alpha1.MachineBooting: true, macvirtv1alpha1.MachineReady: true,
		macvirtv1alpha1.MachineProvisioning: false, macvirtv1alpha1.MachineStopping: false, macvirtv1alpha1.MachineStopped: false,
		macvirtv1alpha1.MachineFailed: false,
	} {
		if got := machineRuns(poolMachine(phase, true)); got != want {
			t.Errorf("a %s machine runs: %v, want %v", phase, got, want)
		}
	}
	m := poolMachine(macvirtv1alpha1.MachineReady, true)
	m.Spec.Running = ptrTo(false)
	if machineRuns(m) {
		t.Error("a Ready machine told to stop runs")
	}
}
