package runnerset

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/github"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func TestFirstHolderKeepsAScaleSetToTheOldestSet(t *testing.T) {
	mk := func(ns, name, url, scaleSet, group string, age time.Duration) macvirtv1alpha1.MacRunnerSet {
		return macvirtv1alpha1.MacRunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name),
			CreationTimestamp: metav1.NewTime(t0.Add(-age))},
			Spec: macvirtv1alpha1.MacRunnerSetSpec{ScaleSetName: scaleSet, GitHub: macvirtv1alpha1.GitHubRunnerTarget{URL: url, RunnerGroup: group}}}
	}
	old := mk("team-a", "ios", "https://github.com/acme", "macos", "", time.Hour)
	same := mk("team-b", "ios", "https://github.com/ACME/", "macos", "default", time.Minute)
	otherName := mk("team-c", "ios", "https://github.com/acme", "macos-2", "", time.Minute)
	otherGroup := mk("team-d", "ios", "https://github.com/acme", "macos", "xcode", time.Minute)
	otherRepo := mk("team-e", "ios", "https://github.com/acme/app", "macos", "", time.Minute)
	all := []macvirtv1alpha1.MacRunnerSet{old, same, otherName, otherGroup, otherRepo}
	scope := func(s macvirtv1alpha1.MacRunnerSet) github.Scope {
		sc, err := github.ParseScope(s.Spec.GitHub.URL)
		if err != nil {
			t.Fatal(err)
		}
		return sc
	}
	if h := firstHolder(&same, scope(same), all); h == nil || h.Name != "ios" || h.Namespace != "team-a" {
		t.Errorf("the newer set of the same scale set is not refused: %v", h)
	}
	for _, s := range []macvirtv1alpha1.MacRunnerSet{old, otherName, otherGroup, otherRepo} {
		if h := firstHolder(&s, scope(s), all); h != nil {
			t.Errorf("%s/%s is refused for %s/%s", s.Namespace, s.Name, h.Namespace, h.Name)
		}
	}
}
