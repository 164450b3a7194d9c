package tenancy

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

func class(mods ...func(*macvirtv1alpha1.TenancySpec)) *macvirtv1alpha1.MacClass {
	c := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "sonoma"}}
	for _, m := range mods {
		m(&c.Spec.Tenancy)
	}
	return c
}

func TestCheck(t *testing.T) {
	forbid := false
	tenants := func(s *macvirtv1alpha1.TenancySpec) {
		s.AllowedNamespaces = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "ios"}}
	}
	noRetain := func(s *macvirtv1alpha1.TenancySpec) { s.AllowRetain = &forbid }
	broken := func(s *macvirtv1alpha1.TenancySpec) {
		s.AllowedNamespaces = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Near"}}}
	}
	for name, tc := range map[string]struct {
		class  *macvirtv1alpha1.MacClass
		labels map[string]string
		policy macvirtv1alpha1.ReclaimPolicy
		reason string
	}{
		"no rules admit anyone":                  {class(), nil, macvirtv1alpha1.ReclaimRetain, ""},
		"an empty selector admits anyone":        {class(func(s *macvirtv1alpha1.TenancySpec) { s.AllowedNamespaces = &metav1.LabelSelector{} }), nil, macvirtv1alpha1.ReclaimDelete, ""},
		"a matching namespace is admitted":       {class(tenants), map[string]string{"team": "ios"}, macvirtv1alpha1.ReclaimDelete, ""},
		"another namespace is refused":           {class(tenants), map[string]string{"team": "web"}, macvirtv1alpha1.ReclaimDelete, macvirtv1alpha1.ReasonNamespaceNotAllowed},
		"Retain where the class forbids it":      {class(noRetain), nil, macvirtv1alpha1.ReclaimRetain, macvirtv1alpha1.ReasonRetainNotAllowed},
		"Delete where the class forbids Retain":  {class(noRetain), nil, macvirtv1alpha1.ReclaimDelete, ""},
		"the namespace is checked before Retain": {class(tenants, noRetain), nil, macvirtv1alpha1.ReclaimRetain, macvirtv1alpha1.ReasonNamespaceNotAllowed},
		"an unparsable selector admits nobody":   {class(broken), map[string]string{"team": "ios"}, macvirtv1alpha1.ReclaimDelete, macvirtv1alpha1.ReasonInvalidClass},
	} {
		t.Run(name, func(t *testing.T) {
			got := Check(tc.class, "team-x", tc.labels, tc.policy)
			switch {
			case tc.reason == "" && got != nil:
				t.Errorf("refused: %+v", got)
			case tc.reason != "" && (got == nil || got.Reason != tc.reason):
				t.Errorf("got %+v, want reason %s", got, tc.reason)
			}
		})
	}
}

func TestReleasedFull(t *testing.T) {
	two := int32(2)
	bounded := class(func(s *macvirtv1alpha1.TenancySpec) { s.MaxReleasedPerNamespace = &two })
	for _, tc := range []struct {
		class    *macvirtv1alpha1.MacClass
		released int
		full     bool
	}{{class(), 100, false}, {bounded, 1, false}, {bounded, 2, true}, {bounded, 3, true}} {
		if got := ReleasedFull(tc.class, "team-x", tc.released); (got != nil) != tc.full {
			t.Errorf("ReleasedFull(bound %v, %d released) = %+v, want full %v", tc.class.Spec.Tenancy.MaxReleasedPerNamespace, tc.released, got, tc.full)
		}
	}
}

// TestAccess is the one decision of a claim's access type: what the
// claim's Service is, and what its machine's NetworkPolicy lets in.
func TestAccess(t *testing.T) {
	class := func(def macvirtv1alpha1.AccessType, allowed ...macvirtv1alpha1.AccessType) *macvirtv1alpha1.MacClass {
		c := &macvirtv1alpha1.MacClass{}
		c.Spec.Access.DefaultType, c.Spec.Tenancy.AllowedAccessTypes = def, allowed
		return c
	}
	for name, tc := range map[string]struct {
		asks    macvirtv1alpha1.AccessType
		class   *macvirtv1alpha1.MacClass
		want    macvirtv1alpha1.AccessType
		refused bool
	}{
		"nothing asked, no default":          {"", class(""), macvirtv1alpha1.AccessClusterIP, false},
		"nothing asked, the class's default": {"", class(macvirtv1alpha1.AccessNodePort, macvirtv1alpha1.AccessClusterIP, macvirtv1alpha1.AccessNodePort), macvirtv1alpha1.AccessNodePort, false},
		"asked, and allowed":                 {macvirtv1alpha1.AccessClusterIP, class(macvirtv1alpha1.AccessNodePort, macvirtv1alpha1.AccessClusterIP, macvirtv1alpha1.AccessNodePort), macvirtv1alpha1.AccessClusterIP, false},
		"asked, not allowed":                 {macvirtv1alpha1.AccessLoadBalancer, class(""), macvirtv1alpha1.AccessClusterIP, true},
		"a default the class does not allow": {"", class(macvirtv1alpha1.AccessLoadBalancer), macvirtv1alpha1.AccessClusterIP, true},
		"no class":                           {macvirtv1alpha1.AccessNodePort, nil, macvirtv1alpha1.AccessClusterIP, true},
	} {
		got, refusal := Access(tc.class, tc.asks)
		if got != tc.want {
			t.Errorf("%s: Access = %s, want %s", name, got, tc.want)
		}
		if (refusal != nil) != tc.refused {
			t.Errorf("%s: refusal %+v, want one: %v", name, refusal, tc.refused)
		}
		if refusal != nil && (refusal.Field != "spec.access.type" || refusal.Reason != macvirtv1alpha1.ReasonAccessTypeNotAllowed) {
			t.Errorf("%s: refusal %+v, want %s on spec.access.type", name, refusal, macvirtv1alpha1.ReasonAccessTypeNotAllowed)
		}
	}
}

// TestBootstrap is the one decision of what a claim's bootstrap may do.
func TestBootstrap(t *testing.T) {
	off := false
	noTenant := class(func(s *macvirtv1alpha1.TenancySpec) { s.AllowTenantBootstrap = &off })
	rootOK := class(func(s *macvirtv1alpha1.TenancySpec) { s.AllowRootBootstrap = true })
	script := &macvirtv1alpha1.Bootstrap{Script: &macvirtv1alpha1.BootstrapScript{Inline: "true"}}
	asRoot := &macvirtv1alpha1.Bootstrap{User: "root", Script: script.Script}
	rootFile := &macvirtv1alpha1.Bootstrap{Files: []macvirtv1alpha1.BootstrapFile{{Path: "/etc/x", Owner: "root"}}}
	cases := map[string]struct {
		class     *macvirtv1alpha1.MacClass
		bootstrap *macvirtv1alpha1.Bootstrap
		field     string // empty: allowed
	}{
		"no bootstrap":                         {class(), nil, ""},
		"a login-user script by default":       {class(), script, ""},
		"a script where tenants may not":       {noTenant, script, "spec.bootstrap"},
		"root by default":                      {class(), asRoot, "spec.bootstrap.user"},
		"a root-owned file by default":         {class(), rootFile, "spec.bootstrap.files[0].owner"},
		"root where the class allows it":       {rootOK, asRoot, ""},
		"root file where the class allows":     {rootOK, rootFile, ""},
		"no class: a script as the login user": {nil, script, ""},
		"no class: nothing as root":            {nil, asRoot, "spec.bootstrap.user"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := Bootstrap(tc.class, tc.bootstrap)
			switch {
			case tc.field == "" && r != nil:
				t.Fatalf("refused: %+v", r)
			case tc.field != "" && (r == nil || r.Field != tc.field || r.Reason != ReasonBootstrapNotAllowed):
				t.Fatalf("got %+v, want a refusal of %s", r, tc.field)
			}
		})
	}
}

func TestPoolServes(t *testing.T) {
	pool := func(name string, labels map[string]string) *macvirtv1alpha1.MacPool {
		return &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	byClass := &macvirtv1alpha1.MacClaim{Spec: macvirtv1alpha1.MacClaimSpec{ClassName: "sonoma"}}
	byPool := func(name string) *macvirtv1alpha1.MacClaim {
		return &macvirtv1alpha1.MacClaim{Spec: macvirtv1alpha1.MacClaimSpec{PoolName: name}}
	}
	runnerOf := func(ns, label, owner, poolName string) *macvirtv1alpha1.MacClaim {
		c := byPool(poolName)
		c.Namespace, c.Labels = ns, map[string]string{label: owner}
		return c
	}
	setPool := pool("runners-ci-ios", map[string]string{macvirtv1alpha1.LabelRunnerSet: "ios", macvirtv1alpha1.LabelRunnerSetNamespace: "ci"})
	queuePool := pool("buildkite-ci-mac", map[string]string{macvirtv1alpha1.LabelBuildkiteQueue: "mac", macvirtv1alpha1.LabelBuildkiteQueueNamespace: "ci"})
	for _, tc := range []struct {
		name  string
		pool  *macvirtv1alpha1.MacPool
		claim *macvirtv1alpha1.MacClaim
		want  bool
	}{
		{"an admin's pool serves claims of its class", pool("sonoma-warm", nil), byClass, true},
		{"an admin's pool serves claims naming it", pool("sonoma-warm", nil), byPool("sonoma-warm"), true},
		{"a pool serves no claim naming another", pool("sonoma-warm", nil), byPool("other"), false},
		{"a runner set's pool serves no claim by class", setPool, byClass, false},
		{"a runner set's pool serves no other set's claims", setPool, byPool("runners-ci-macos"), false},
		{"a runner set's pool serves its own set's claims", setPool, runnerOf("ci", macvirtv1alpha1.LabelRunnerSet, "ios", "runners-ci-ios"), true},
		{"a runner set's pool serves no claim naming it from another namespace", setPool,
			runnerOf("team-b", macvirtv1alpha1.LabelRunnerSet, "ios", "runners-ci-ios"), false},
		{"a runner set's pool serves no unlabelled claim naming it", setPool, byPool("runners-ci-ios"), false},
		{"a runner set's pool serves no other set's runner naming it", setPool,
			runnerOf("ci", macvirtv1alpha1.LabelRunnerSet, "macos", "runners-ci-ios"), false},
		{"a Buildkite queue's pool serves no claim by class", queuePool, byClass, false},
		{"a Buildkite queue's pool serves its queue's claims", queuePool,
			runnerOf("ci", macvirtv1alpha1.LabelBuildkiteQueue, "mac", "buildkite-ci-mac"), true},
		{"a Buildkite queue's pool serves no claim naming it from another namespace", queuePool,
			runnerOf("team-b", macvirtv1alpha1.LabelBuildkiteQueue, "mac", "buildkite-ci-mac"), false},
		{"a Buildkite queue's pool serves no runner set's claim naming it", queuePool,
			runnerOf("ci", macvirtv1alpha1.LabelRunnerSet, "mac", "buildkite-ci-mac"), false},
	} {
		if got := PoolServes(tc.pool, tc.claim); got != tc.want {
			t.Errorf("%s: PoolServes = %v, want %v", tc.name, got, tc.want)
		}
	}
}
