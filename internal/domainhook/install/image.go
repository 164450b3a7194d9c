package install

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The domain-hook image is KubeVirt's sidecar-shim with macvirt's hook in
// it, and the shim must come from the cluster's KubeVirt minor version. A
// release builds one hook image per minor of KubeVirtMinors: HOOK_IMG
// for KubeVirtMinor, and HOOK_IMG-kubevirt<minor> for the others. The
// Makefile sets both variables from its KUBEVIRT_VERSION and
// KUBEVIRT_MINORS (-ldflags -X).
var (
	// KubeVirtMinor is the KubeVirt minor DefaultImage is built for.
	KubeVirtMinor = "1.9"
	// KubeVirtMinors are the KubeVirt minors a release has hook images
	// for, comma-separated.
	KubeVirtMinors = "1.7,1.8,1.9"
)

// RelatedImageEnv names the environment variable with the domain-hook
// image for the KubeVirt minor KubeVirtMinor; RelatedImageEnvFor
// names the one for another minor. OLM's CSV sets them, by digest, next to
// relatedImages, so a disconnected cluster's mirror rewrites them
// (RELATED_IMAGE_* is the convention OLM and its mirroring tools follow).
const RelatedImageEnv = "RELATED_IMAGE_DOMAIN_HOOK"

// RelatedImageEnvFor is RelatedImageEnv for a KubeVirt minor such as
// "1.8": RELATED_IMAGE_DOMAIN_HOOK_KUBEVIRT_1_8.
func RelatedImageEnvFor(minor string) string {
	return RelatedImageEnv + "_KUBEVIRT_" + strings.ReplaceAll(minor, ".", "_")
}

// ImageTagFor is the hook image of a KubeVirt minor, from the image of
// KubeVirtMinor: the same name with -kubevirt<minor> after its tag.
func ImageTagFor(image, minor string) string {
	if minor == KubeVirtMinor {
		return image
	}
	return image + "-kubevirt" + minor
}

// ImageChoice is the domain-hook image the operator runs, and why.
type ImageChoice struct {
	Image string
	Why   string
	// Warning is set when the image may not suit the cluster's KubeVirt.
	Warning bool
}

// ChooseImage picks the domain-hook image. An explicit one (the
// --hook-image flag) wins. Otherwise the image for the cluster's KubeVirt
// minor (kubevirtVersion, as the KubeVirt CR's observedKubeVirtVersion
// says; empty when unknown): from RelatedImageEnvFor(minor) when set,
// from RelatedImageEnv for KubeVirtMinor, and else the tag
// ImageTagFor derives from DefaultImage. A KubeVirt minor without
// a hook image gets the default one, with a warning.
func ChooseImage(explicit string, lookupEnv func(string) (string, bool), kubevirtVersion string) ImageChoice {
	if explicit != "" {
		return ImageChoice{Image: explicit, Why: "--hook-image"}
	}
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	fallback := func(why string, warn bool) ImageChoice {
		if img, ok := lookupEnv(RelatedImageEnv); ok && img != "" {
			return ImageChoice{Image: img, Why: why + "; $" + RelatedImageEnv, Warning: warn}
		}
		return ImageChoice{Image: DefaultImage, Why: why + "; the built-in default", Warning: warn}
	}
	minor, ok := kubevirtMinor(kubevirtVersion)
	switch {
	case !ok:
		return fallback(fmt.Sprintf("KubeVirt's version is unknown (%q); the image for KubeVirt %s", kubevirtVersion, KubeVirtMinor), true)
	case minor == KubeVirtMinor:
		return fallback("KubeVirt "+kubevirtVersion, false)
	case !slices.Contains(strings.Split(KubeVirtMinors, ","), minor):
		return fallback(fmt.Sprintf("no hook image is built for KubeVirt %s (only %s); the image for KubeVirt %s, "+
			"whose sidecar-shim may not speak to this virt-launcher: set --hook-image", minor, KubeVirtMinors, KubeVirtMinor), true)
	}
	if img, ok := lookupEnv(RelatedImageEnvFor(minor)); ok && img != "" {
		return ImageChoice{Image: img, Why: "KubeVirt " + kubevirtVersion + "; $" + RelatedImageEnvFor(minor)}
	}
	return ImageChoice{Image: ImageTagFor(DefaultImage, minor), Why: "KubeVirt " + kubevirtVersion + "; the built-in default's tag for it"}
}

// kubevirtMinor is "1.8" of "v1.8.2" (or "1.8.2", or "v1.8.0-rc.1").
func kubevirtMinor(version string) (string, bool) {
	parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return "", false
	}
	for _, p := range parts[:2] {
		if strings.Trim(p, "0123456789") != "" {
			return "", false
		}
	}
	return parts[0] + "." + parts[1], true
}

// +kubebuilder:rbac:groups=kubevirt.io,resources=kubevirts,verbs=list

// ObservedKubeVirtVersion is the KubeVirt version the cluster runs, as its
// KubeVirt CR reports it (status.observedKubeVirtVersion); empty when there
// is none or it cannot be read, with the reason.
func ObservedKubeVirtVersion(ctx context.Context, c client.Reader) (string, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(schema.GroupVersionKind{Group: "kubevirt.io", Version: "v1", Kind: "KubeVirtList"})
	if err := c.List(ctx, list); err != nil {
		return "", fmt.Errorf("listing KubeVirt CRs: %w", err)
	}
	if len(list.Items) == 0 {
		return "", errors.New("no KubeVirt CR in the cluster")
	}
	for _, kv := range list.Items {
		if v, _, _ := unstructured.NestedString(kv.Object, "status", "observedKubeVirtVersion"); v != "" {
			return v, nil
		}
	}
	return "", fmt.Errorf("%w: none of %d KubeVirt CRs reports status.observedKubeVirtVersion", errNoVersionYet, len(list.Items))
}

// errNoVersionYet: a KubeVirt CR exists, and has not yet said its version.
var errNoVersionYet = errors.New("KubeVirt has not reported its version yet")

// WaitForKubeVirtVersion reads ObservedKubeVirtVersion every interval while
// a KubeVirt CR exists that has not yet reported its version (a fresh
// install), until ctx ends, and returns the last reason it is unknown.
// Anything else (a refusal to list, no KubeVirt kind or CR) is final.
func WaitForKubeVirtVersion(ctx context.Context, c client.Reader, interval time.Duration) (string, error) {
	for {
		v, err := ObservedKubeVirtVersion(ctx, c)
		if err == nil || !errors.Is(err, errNoVersionYet) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return "", err
		case <-time.After(interval):
		}
	}
}

// DefaultImage is the domain-hook sidecar image used when none is set.
// The Makefile sets it to its HOOK_IMG when it builds the manager
// (-ldflags -X), in a binary and in the image, so an install that names no
// --hook-image runs the hook built alongside it.
var DefaultImage = "ghcr.io/macvirt/macvirt-domain-hook:v0.1.0"
