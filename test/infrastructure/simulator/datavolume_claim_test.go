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

package simulator

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

const ms = time.Millisecond

func storageDV(size string, mutate ...func(*cdiv1.StorageSpec)) *cdiv1.DataVolume {
	dv := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "disk", UID: "dv-uid"}}
	dv.Spec.Storage = &cdiv1.StorageSpec{}
	if size != "" {
		dv.Spec.Storage.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}
	}
	for _, m := range mutate {
		m(dv.Spec.Storage)
	}
	return dv
}

func profileWith(sets ...cdiv1.ClaimPropertySet) *cdiv1.StorageProfile {
	return &cdiv1.StorageProfile{Status: cdiv1.StorageProfileStatus{StorageClass: ptr.To("sc"), ClaimPropertySets: sets}}
}

// TestRenderClaimSpecLikeCDI pins renderPvcSpec: the profile's modes
// where the DataVolume gives none, the filesystem overhead, the profile's
// minimum size, spec.pvc untouched.
func TestRenderClaimSpecLikeCDI(t *testing.T) {
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "sc"}, Provisioner: "p"}
	rbd := profileWith(rbdCapabilities()...)
	rwo, rwx := corev1.ReadWriteOnce, corev1.ReadWriteMany
	block, fs := corev1.PersistentVolumeBlock, corev1.PersistentVolumeFilesystem
	cases := map[string]struct {
		dv      *cdiv1.DataVolume
		sc      *storagev1.StorageClass
		profile *cdiv1.StorageProfile
		modes   []corev1.PersistentVolumeAccessMode
		mode    *corev1.PersistentVolumeMode
		size    int64
	}{
		"the profile's first set": {dv: storageDV("64Gi"), sc: sc, profile: rbd, modes: []corev1.PersistentVolumeAccessMode{rwx}, mode: &block,
			size: 64 << 30},
		"the access modes of the DataVolume's volume mode": {dv: storageDV("64Gi", func(s *cdiv1.StorageSpec) { s.VolumeMode = &fs }),
			sc: sc, profile: rbd, modes: []corev1.PersistentVolumeAccessMode{rwo}, mode: &fs, size: 72842645341},
		"the volume mode of the DataVolume's access mode": {dv: storageDV("64Gi", func(s *cdiv1.StorageSpec) { s.AccessModes = []corev1.PersistentVolumeAccessMode{rwo} }),
			sc: sc, profile: rbd, modes: []corev1.PersistentVolumeAccessMode{rwo}, mode: &block, size: 64 << 30},
		"no class: ReadWriteOnce and the overhead": {dv: storageDV("64Gi"), modes: []corev1.PersistentVolumeAccessMode{rwo}, size: 72842645341},
		"a size rounded up to MiB before the overhead": {dv: storageDV("1500Ki"), modes: []corev1.PersistentVolumeAccessMode{rwo},
			size: 2222982},
		"the profile's minimum": {dv: storageDV("1Mi", func(s *cdiv1.StorageSpec) { s.VolumeMode = &block }), sc: sc,
			profile: func() *cdiv1.StorageProfile {
				p := profileWith()
				p.Annotations = map[string]string{annMinimumSupportedPVC: "4Gi"}
				return p
			}(), modes: []corev1.PersistentVolumeAccessMode{rwo}, mode: &block, size: 4 << 30},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			spec, err := renderClaimSpec(tc.dv, tc.sc, tc.profile, false, resource.Quantity{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(spec.AccessModes).To(Equal(tc.modes))
			g.Expect(spec.VolumeMode).To(Equal(tc.mode))
			g.Expect(spec.Resources.Requests.Storage().Value()).To(Equal(tc.size))
			if tc.sc != nil {
				g.Expect(spec.StorageClassName).To(HaveValue(Equal(tc.sc.Name)))
			}
		})
	}

	g := NewWithT(t)
	pvcDV := &cdiv1.DataVolume{Spec: cdiv1.DataVolumeSpec{PVC: &corev1.PersistentVolumeClaimSpec{
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Gi")}}}}}
	spec, err := renderClaimSpec(pvcDV, sc, rbd, false, resource.Quantity{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(spec).To(Equal(*pvcDV.Spec.PVC), "spec.pvc is taken as it is")

	_, err = renderClaimSpec(storageDV(""), nil, nil, false, resource.Quantity{})
	g.Expect(err).To(MatchError("PVC Spec is not valid - missing storage size"))
	_, err = renderClaimSpec(storageDV("1Ki"), nil, nil, false, resource.Quantity{})
	g.Expect(err).To(MatchError("PVC Spec is not valid - storage size should be at least 1MiB"))
	spec, err = renderClaimSpec(storageDV(""), nil, nil, true, resource.MustParse("80Gi"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(spec.Resources.Requests.Storage().String()).To(Equal("80Gi"), "a clone without a size takes the source's")
}

// TestNewClaimCarriesCDIsMetadata: the DataVolume's labels and
// annotations, CDI's own, and a controller reference.
func TestNewClaimCarriesCDIsMetadata(t *testing.T) {
	g := NewWithT(t)
	dv := storageDV("64Gi")
	dv.Labels = map[string]string{"macvirt.io/machine": "m", "app.kubernetes.io/managed-by": "macvirt"}
	dv.Annotations = map[string]string{AnnImmediateBinding: "true"}
	dv.Spec.Source = &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "https://example.com/a.img"}}
	spec, err := renderClaimSpec(dv, nil, nil, false, resource.Quantity{})
	g.Expect(err).NotTo(HaveOccurred())
	pvc := newClaim(dv, spec, importAnnotations(dv.Spec.Source))
	g.Expect(pvc.Labels).To(Equal(map[string]string{
		"app": "containerized-data-importer", "alerts.k8s.io/KubePersistentVolumeFillingUp": "disabled",
		"macvirt.io/machine": "m", "app.kubernetes.io/managed-by": "cdi-controller", "app.kubernetes.io/component": "storage",
	}))
	g.Expect(pvc.Annotations).To(Equal(map[string]string{
		AnnImmediateBinding: "true", annPodRestarts: "0", annContentType: "kubevirt", annPreallocationRequested: "false",
		annCreatedForDataVolume: "dv-uid", annImportSource: "http", annImportEndpoint: "https://example.com/a.img",
	}))
	g.Expect(metav1.IsControlledBy(pvc, dv)).To(BeTrue())
}

// TestChooseCloneStrategyLikeCDIsPlanner pins the planner's choice and its
// fallbacks to copy.
func TestChooseCloneStrategyLikeCDIsPlanner(t *testing.T) {
	target := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "sc"}, Provisioner: "p", AllowVolumeExpansion: ptr.To(true)}
	rigid := target.DeepCopy()
	rigid.AllowVolumeExpansion = nil
	spec := corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("80Gi")}}}
	strategy := func(s cdiv1.CDICloneStrategy) *cdiv1.StorageProfile {
		return &cdiv1.StorageProfile{Status: cdiv1.StorageProfileStatus{CloneStrategy: &s}}
	}
	small := resource.MustParse("64Gi")
	fs := corev1.PersistentVolumeFilesystem
	base := func(m func(*cloneInput)) cloneInput {
		in := cloneInput{target: target, targetSpec: spec, populator: true, sourceDriver: "p", sourceMode: fs,
			sourceSize: &small, snapshotClass: "vsc"}
		if m != nil {
			m(&in)
		}
		return in
	}
	cases := map[string]struct {
		in     cloneInput
		want   clonePlan
		reason string
	}{
		"snapshot by default": {in: base(nil),
			want: clonePlan{strategy: cdiv1.CloneStrategySnapshot, populator: true}},
		"the profile's csi-clone": {in: base(func(in *cloneInput) { in.profile = strategy(cdiv1.CloneStrategyCsiClone) }),
			want: clonePlan{strategy: cdiv1.CloneStrategyCsiClone, populator: true}},
		"no CSI driver: the legacy copy": {in: base(func(in *cloneInput) { in.populator = false }),
			want: clonePlan{strategy: cdiv1.CloneStrategyHostAssisted}, reason: reasonNoPopulator},
		"no snapshot class": {in: base(func(in *cloneInput) { in.snapshotClass = "" }),
			want: clonePlan{strategy: cdiv1.CloneStrategyHostAssisted, populator: true}, reason: reasonNoVolumeSnapshotClass},
		"another driver": {in: base(func(in *cloneInput) { in.sourceDriver = "q"; in.profile = strategy(cdiv1.CloneStrategyCsiClone) }),
			want: clonePlan{strategy: cdiv1.CloneStrategyHostAssisted, populator: true}, reason: reasonIncompatibleProvisioners},
		"another volume mode": {in: base(func(in *cloneInput) { in.sourceMode = corev1.PersistentVolumeBlock }),
			want: clonePlan{strategy: cdiv1.CloneStrategyHostAssisted, populator: true}, reason: reasonIncompatibleVolumeModes},
		"a bigger target on a class that cannot expand": {in: base(func(in *cloneInput) { in.target = rigid }),
			want: clonePlan{strategy: cdiv1.CloneStrategyHostAssisted, populator: true}, reason: reasonNoVolumeExpansion},
		"a restore by snapshot": {in: base(func(in *cloneInput) { in.fromSnapshot = true; in.snapshotClass = "" }),
			want: clonePlan{strategy: cdiv1.CloneStrategySnapshot, fromSnapshot: true, populator: true}},
		"a restore on another driver's class": {in: base(func(in *cloneInput) { in.fromSnapshot = true; in.sourceDriver = "q" }),
			want: clonePlan{strategy: cdiv1.CloneStrategyHostAssisted, fromSnapshot: true, populator: true}, reason: reasonNoProvisionerMatch},
		"no class: Options.CloneStrategy": {in: cloneInput{fallback: cdiv1.CloneStrategyCsiClone},
			want: clonePlan{strategy: cdiv1.CloneStrategyCsiClone, populator: true}},
		"no class and no option: copy": {in: cloneInput{}, want: clonePlan{strategy: cdiv1.CloneStrategyHostAssisted}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := chooseCloneStrategy(tc.in)
			g := NewWithT(t)
			g.Expect(got.plan).To(Equal(tc.want))
			g.Expect(got.fallbackReason).To(Equal(tc.reason))
		})
	}
}

// TestCloneDurations: a smart clone's phases share its strategy's
// duration; a copy's steps share the time to copy its size.
func TestCloneDurations(t *testing.T) {
	g := NewWithT(t)
	sim := New(nil, Options{ImportSteps: 4, StepInterval: 50 * ms, CloneDurations: map[cdiv1.CDICloneStrategy]time.Duration{
		cdiv1.CloneStrategySnapshot: 800 * ms, cdiv1.CloneStrategyHostAssisted: 10 * ms,
	}})
	clone := func(phase cdiv1.DataVolumePhase) *cdiv1.DataVolume {
		return &cdiv1.DataVolume{Spec: cdiv1.DataVolumeSpec{SourceRef: &cdiv1.DataVolumeSourceRef{Name: "base"}},
			Status: cdiv1.DataVolumeStatus{Phase: phase}}
	}
	snap := clonePlan{strategy: cdiv1.CloneStrategySnapshot, populator: true}
	g.Expect(sim.dataVolumeStep(clone(cdiv1.SnapshotForSmartCloneInProgress), snap, 0, 4)).To(Equal(200 * ms))
	g.Expect(sim.dataVolumeStep(clone(cdiv1.CloneScheduled), snap, 0, 4)).To(Equal(50*ms), "scheduling is a step")
	restore := clonePlan{strategy: cdiv1.CloneStrategySnapshot, fromSnapshot: true, populator: true}
	g.Expect(sim.dataVolumeStep(clone(cdiv1.RebindInProgress), restore, 0, 4)).To(Equal(200*ms), "a restore skips the snapshot")
	copyPlan := clonePlan{strategy: cdiv1.CloneStrategyHostAssisted}
	g.Expect(sim.dataVolumeStep(clone(cdiv1.CloneInProgress), copyPlan, 128<<30, 4)).To(Equal(320*ms), "128 GiB at 10 ms/GiB in 4 steps")
	g.Expect(sim.dataVolumeStep(clone(cdiv1.CloneInProgress), copyPlan, 0, 4)).To(Equal(160*ms), "an unknown size counts as 64 GiB")
	csi := clonePlan{strategy: cdiv1.CloneStrategyCsiClone, populator: true}
	g.Expect(sim.dataVolumeStep(clone(cdiv1.CSICloneInProgress), csi, 0, 4)).To(Equal(50*ms), "default: a StepInterval a phase")

	plain := New(nil, Options{ImportSteps: 4, StepInterval: 50 * ms})
	g.Expect(plain.dataVolumeStep(clone(cdiv1.CloneInProgress), copyPlan, 64<<30, 4)).To(Equal(50*ms), "default: a 64 GiB copy takes an import's time")
}
