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
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

const testDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestImportNameIsTheDataSourceAndTwelveDigestCharacters(t *testing.T) {
	for name, tc := range map[string]struct {
		dataSource, digest, want string
		fails                    bool
	}{
		"registry digest":   {dataSource: "macos-15", digest: testDigest, want: "macos-15-0123456789ab"},
		"PVC UID":           {dataSource: "macos-15", digest: "uid:7f3c2a10-aaaa-bbbb", want: "macos-15-7f3c2a10-aaa"},
		"unknown prefix":    {dataSource: "macos-15", digest: "md5:0123456789abcdef", fails: true},
		"too short":         {dataSource: "macos-15", digest: "sha256:0123", fails: true},
		"long names hashed": {dataSource: strings.Repeat("m", 250), digest: testDigest},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := importName(tc.dataSource, tc.digest)
			if tc.fails {
				g.Expect(err).To(HaveOccurred())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			if tc.want != "" {
				g.Expect(got).To(Equal(tc.want))
				return
			}
			g.Expect(got).To(HaveLen(resourceNameLimit))
			g.Expect(got).To(MatchRegexp(`^m{231}-[0-9a-f]{8}-0123456789ab$`))
		})
	}
}

func TestPinnedImageURLDropsTheTag(t *testing.T) {
	for url, want := range map[string]string{
		"docker://quay.io/org/macos:15":           "docker://quay.io/org/macos@" + testDigest,
		"docker://quay.io/org/macos":              "docker://quay.io/org/macos@" + testDigest,
		"docker://localhost:5000/macos:15":        "docker://localhost:5000/macos@" + testDigest,
		"docker://library/macos:15":               "docker://docker.io/library/macos@" + testDigest,
		"docker://org/macos:15":                   "docker://docker.io/org/macos@" + testDigest,
		"docker://index.docker.io/org/macos:15":   "docker://docker.io/org/macos@" + testDigest,
		"docker://registry.example.com:443/a/b:c": "docker://registry.example.com:443/a/b@" + testDigest,
		// Go reads "macos:15@sha256" as user and host: CDI leaves it be.
		"docker://macos:15": "docker://macos:15@" + testDigest,
	} {
		t.Run(url, func(t *testing.T) {
			NewWithT(t).Expect(pinnedImageURL(url, testDigest)).To(Equal(want))
		})
	}
}

func TestOutdatedImportsAreTheLeastRecentlyUsed(t *testing.T) {
	uses := map[string]string{
		"a": "2026-01-01T00:00:01Z",
		"b": "2026-01-01T00:00:02Z",
		"c": "2026-01-01T00:00:03Z",
	}
	for keep, want := range map[int][]string{0: {"c", "b", "a"}, 1: {"b", "a"}, 2: {"a"}, 3: nil, 4: nil} {
		NewWithT(t).Expect(outdatedImports(uses, keep)).To(Equal(want), "keep %d", keep)
	}
}

func TestCronProgressFollowsTheImportPhase(t *testing.T) {
	for phase, want := range map[cdiv1.DataVolumePhase][3]string{
		cdiv1.ImportScheduled:  {"False", "Import is scheduled", "ImportScheduled"},
		cdiv1.ImportInProgress: {"True", "Import is progressing", "ImportProgressing"},
		cdiv1.Pending:          {"False", "Import DataVolume phase Pending", "Pending"},
		cdiv1.PhaseUnset:       {"False", "Import DataVolume phase ", ""},
	} {
		status, msg, reason := cronProgressOf(phase)
		NewWithT(t).Expect([3]string{string(status), msg, reason}).To(Equal(want), "phase %q", phase)
	}
}

func TestCronConditionTimesMoveOnlyOnChange(t *testing.T) {
	g := NewWithT(t)
	old := metav1.NewTime(time.Now().Add(-time.Hour))
	st := &cdiv1.DataImportCronStatus{Conditions: []cdiv1.DataImportCronCondition{{
		Type: cdiv1.DataImportCronUpToDate,
		ConditionState: cdiv1.ConditionState{Status: corev1.ConditionFalse, Reason: reasonCronNoDigest,
			Message: msgCronNoDigest, LastTransitionTime: old, LastHeartbeatTime: old},
	}}}
	setCronCondition(st, cdiv1.DataImportCronUpToDate, corev1.ConditionFalse, msgCronNoDigest, reasonCronNoDigest)
	g.Expect(st.Conditions[0].LastHeartbeatTime).To(Equal(old))

	setCronCondition(st, cdiv1.DataImportCronUpToDate, corev1.ConditionFalse, msgCronOutdated, reasonCronOutdated)
	g.Expect(st.Conditions[0].LastTransitionTime).To(Equal(old))
	g.Expect(st.Conditions[0].LastHeartbeatTime.After(old.Time)).To(BeTrue())

	setCronCondition(st, cdiv1.DataImportCronUpToDate, corev1.ConditionTrue, msgCronUpToDate, reasonCronUpToDate)
	g.Expect(st.Conditions[0].LastTransitionTime.After(old.Time)).To(BeTrue())

	setCronCondition(st, cdiv1.DataImportCronProgressing, corev1.ConditionFalse, msgCronNoImport, reasonCronNoImport)
	g.Expect(st.Conditions).To(HaveLen(2))
}

func TestImportDataVolumeIsTheTemplatePinnedAndLabelled(t *testing.T) {
	g := NewWithT(t)
	url := "docker://quay.io/org/macos:15"
	dic := &cdiv1.DataImportCron{
		ObjectMeta: metav1.ObjectMeta{Namespace: "images", Name: "macos", Labels: map[string]string{
			"instancetype.kubevirt.io/default-preference": "macos",
			"team": "mac",
		}, Annotations: map[string]string{AnnSourceDesiredDigest: testDigest}},
		Spec: cdiv1.DataImportCronSpec{
			ManagedDataSource: "macos-15",
			RetentionPolicy:   ptr.To(cdiv1.DataImportCronRetainNone),
			Template: cdiv1.DataVolume{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"from": "template"}},
				Spec:       cdiv1.DataVolumeSpec{Source: &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: &url}}},
			},
		},
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.UTC)
	dv := newImportDataVolume(dic, "macos-15-0123456789ab", now)

	g.Expect(dv.Namespace).To(Equal("images"))
	g.Expect(*dv.Spec.Source.Registry.URL).To(Equal("docker://quay.io/org/macos@" + testDigest))
	g.Expect(*dic.Spec.Template.Spec.Source.Registry.URL).To(Equal(url), "the cron's template is not changed")
	g.Expect(dv.Labels).To(Equal(map[string]string{
		"from":                         "template",
		"app.kubernetes.io/managed-by": "cdi-controller",
		"app.kubernetes.io/component":  "storage",
		"instancetype.kubevirt.io/default-preference": "macos",
		LabelDataImportCronName:                       "macos",
		"cdi.kubevirt.io/dataImportCron.cleanup":      "true",
	}))
	g.Expect(dv.Annotations).To(Equal(map[string]string{
		AnnImmediateBinding: "true",
		annLastUseTime:      "2026-01-02T03:04:05.6Z",
	}))
	g.Expect(dv.OwnerReferences).To(BeEmpty())
}
