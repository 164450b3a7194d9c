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
	"fmt"
	"hash/fnv"
	neturl "net/url"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// The DataImportCron's conditions in CDI's words
// (pkg/controller/dataimportcron-conditions.go and
// dataimportcron-controller.go, update).
const (
	reasonCronNoDigest   = "NoDigest"
	reasonCronNoImport   = "NoImport"
	reasonCronOutdated   = "Outdated"
	reasonCronScheduled  = "ImportScheduled"
	reasonCronInProgress = "ImportProgressing"
	reasonCronUpToDate   = "UpToDate"

	msgCronNoDigest   = "No source digest"
	msgCronNoImport   = "No current import"
	msgCronOutdated   = "Source digest updated since last import"
	msgCronScheduled  = "Import is scheduled"
	msgCronInProgress = "Import is progressing"
	msgCronUpToDate   = "Latest import is up to date"
	msgCronDVPhase    = "Import DataVolume phase %s"
)

// Lengths in CDI's names of imports (dataimportcron-controller.go,
// createDvName, and pkg/util/naming, GetResourceName).
const (
	digestNameLength  = 12
	resourceNameLimit = 253
	nameHashLength    = 10 // "-" and eight hex digits of the FNV-32a hash and "-"
)

// The prefixes CDI accepts on a digest: a registry's, and the UID of a
// source PVC (createDvName).
const (
	digestSHA256Prefix = "sha256:"
	digestUIDPrefix    = "uid:"
)

// cronCopiedLabel matches the labels CDI copies from a DataImportCron onto
// what it creates: kubevirt.io/ and *.kubevirt.io/ keys
// (pkg/controller/common/util.go, CopyAllowedLabels, validLabelsMatch).
var cronCopiedLabel = regexp.MustCompile(`^(kubevirt\.io|[\w.]+\.kubevirt\.io)/[\w.-]+$`)

// setCronCondition sets a condition of a DataImportCron as CDI's
// updateDataImportCronCondition does: the transition time moves only when
// the status changes, the heartbeat when anything changes, and nothing
// moves when nothing changes.
func setCronCondition(st *cdiv1.DataImportCronStatus, t cdiv1.DataImportCronConditionType,
	status corev1.ConditionStatus, message, reason string) {
	now := metav1.Now()
	for i := range st.Conditions {
		c := &st.Conditions[i]
		if c.Type != t {
			continue
		}
		if c.Status == status && c.Message == message && c.Reason == reason {
			return
		}
		if c.Status != status {
			c.LastTransitionTime = now
		}
		c.LastHeartbeatTime = now
		c.Status, c.Message, c.Reason = status, message, reason
		return
	}
	st.Conditions = append(st.Conditions, cdiv1.DataImportCronCondition{Type: t, ConditionState: cdiv1.ConditionState{
		Status: status, Message: message, Reason: reason, LastTransitionTime: now, LastHeartbeatTime: now,
	}})
}

// cronProgressOf is the Progressing condition CDI derives from the phase of
// an import that has not succeeded yet (update: ImportScheduled,
// ImportInProgress, and any other phase by name; an unset phase gives an
// empty reason).
func cronProgressOf(phase cdiv1.DataVolumePhase) (corev1.ConditionStatus, string, string) {
	switch phase {
	case cdiv1.ImportScheduled:
		return corev1.ConditionFalse, msgCronScheduled, reasonCronScheduled
	case cdiv1.ImportInProgress:
		return corev1.ConditionTrue, msgCronInProgress, reasonCronInProgress
	}
	return corev1.ConditionFalse, fmt.Sprintf(msgCronDVPhase, phase), string(phase)
}

// importName is the name CDI gives the DataVolume (and PVC) importing
// digest for the DataSource dataSource: the DataSource's name and the first
// 12 characters after the digest's prefix (createDvName).
func importName(dataSource, digest string) (string, error) {
	var prefix string
	switch {
	case strings.HasPrefix(digest, digestSHA256Prefix):
		prefix = digestSHA256Prefix
	case strings.HasPrefix(digest, digestUIDPrefix):
		prefix = digestUIDPrefix
	default:
		return "", fmt.Errorf("digest %q has no supported prefix", digest)
	}
	if len(digest) < len(prefix)+digestNameLength {
		return "", fmt.Errorf("digest %q is too short", digest)
	}
	return resourceName(dataSource, digest[len(prefix):len(prefix)+digestNameLength]), nil
}

// resourceName joins base and suffix with a dash as CDI's GetResourceName
// does (pkg/util/naming, after OpenShift's build naming): when that is
// longer than a resource name may be, base is cut short and followed by
// the FNV-32a hash of the whole of it. The suffixes the simulator passes
// (12 characters) always leave room for some of base.
func resourceName(base, suffix string) string {
	name := base + "-" + suffix
	if len(name) <= resourceNameLimit {
		return name
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(base))
	keep := resourceNameLimit - nameHashLength - len(suffix)
	return fmt.Sprintf("%s-%08x-%s", base[:keep], h.Sum32(), suffix)
}

// pinnedImageURL is the registry URL an import uses: the cron's URL with
// "@" and the digest appended, and, when the URL names a tag, the tag
// dropped and the repository written in full (docker.io/library/... for
// Docker Hub's short names), as CDI's untagDigestedDockerURL does through
// the distribution reference parser. A URL Go cannot parse (one without a
// path, such as docker://fedora:40) is left as it is, tag and all, as in CDI.
func pinnedImageURL(url, digest string) string {
	pinned := url + "@" + digest
	u, err := neturl.Parse(pinned)
	if err != nil {
		return pinned
	}
	ref := u.Host + u.Path
	at := strings.LastIndex(ref, "@")
	if at < 0 {
		return pinned
	}
	named := ref[:at]
	colon := strings.LastIndex(named, ":")
	if colon < 0 || colon < strings.LastIndex(named, "/") || colon == len(named)-1 {
		return pinned
	}
	return u.Scheme + "://" + normalizedRepository(named[:colon]) + ref[at:]
}

// normalizedRepository writes a repository name in full as the
// distribution reference parser does: a first component that is not a
// host (no "." or ":", not "localhost", no capitals) means Docker Hub, whose
// official images live under library/.
func normalizedRepository(name string) string {
	domain, rest := "", name
	if i := strings.Index(name, "/"); i >= 0 {
		first := name[:i]
		if strings.ContainsAny(first, ".:") || first == "localhost" || strings.ToLower(first) != first {
			domain, rest = first, name[i+1:]
		}
	}
	if domain == "" || domain == "index.docker.io" {
		domain = "docker.io"
	}
	if domain == "docker.io" && !strings.Contains(rest, "/") {
		rest = "library/" + rest
	}
	return domain + "/" + rest
}

// cronLabels gives obj the labels CDI puts on everything a DataImportCron
// creates (setDataImportCronResourceLabels): its own managed-by and
// component labels (pkg/util/util.go, SetRecommendedLabels), the cron's
// kubevirt.io labels, the cron's name, and the cleanup label when the
// cron's retentionPolicy is None. CDI's installer labels (part-of,
// version, from the CDI resource) are not simulated.
func cronLabels(cron *cdiv1.DataImportCron, obj metav1.Object) {
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[labelManagedBy] = cdiControllerName
	labels[labelComponent] = "storage"
	for k, v := range cron.Labels {
		if cronCopiedLabel.MatchString(k) {
			labels[k] = v
		}
	}
	labels[LabelDataImportCronName] = cron.Name
	if p := cron.Spec.RetentionPolicy; p != nil && *p == cdiv1.DataImportCronRetainNone {
		labels[labelDataImportCronCleanup] = "true"
	}
	obj.SetLabels(labels)
}

// importsToKeep is how many imports the garbage collection of a cron
// keeps (garbageCollectOldImports): spec.importsToKeep when it is set and
// not negative, else 3.
func importsToKeep(cron *cdiv1.DataImportCron) int {
	if n := cron.Spec.ImportsToKeep; n != nil && *n >= 0 {
		return int(*n)
	}
	return defaultImportsToKeep
}

// collectsGarbage reports whether old imports of the cron are deleted:
// unless spec.garbageCollect is set to something other than Outdated.
func collectsGarbage(cron *cdiv1.DataImportCron) bool {
	gc := cron.Spec.GarbageCollect
	return gc == nil || *gc == cdiv1.DataImportCronGarbageCollectOutdated
}
