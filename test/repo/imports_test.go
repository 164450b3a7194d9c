package repo

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// The direction of imports, as docs/architecture.md draws it. Each rule
// names packages by their path in the module (a trailing "/..." takes the
// packages under a folder) and what they may not depend on, directly or
// through another package.

const module = "github.com/macvirt/macvirt/"

// kinds are the controllers, one package per kind.
var kinds = []string{
	"internal/controller/machine", "internal/controller/claim", "internal/controller/pool",
	"internal/controller/class", "internal/controller/nodeslots", "internal/controller/image", "internal/controller/runnerset",
	"internal/controller/buildkitequeue",
}

// controllerBase is what the kinds share.
var controllerBase = []string{
	"internal/controller/base", "internal/controller/index", "internal/controller/state",
	"internal/controller/drain", "internal/controller/slots", "internal/controller/metrics",
	"internal/controller/controllertest", "internal/controller/runnercore",
}

// hookImage is the code that ships in the domain-hook image.
var hookImage = []string{"cmd/domain-hook", "internal/domainhook/contract", "internal/domainhook/hook", "internal/domainhook/server"}

// guest is the code that runs inside macOS.
var guest = []string{"cmd/macvirt-agent", "internal/guestagent", "internal/guestprotocol"}

// importRule says that no package of from depends on one of never.
type importRule struct {
	from, never []string
	why         string
}

func importRules() []importRule {
	var rules []importRule
	for _, k := range kinds {
		var others []string
		for _, o := range kinds {
			if o != k {
				others = append(others, o)
			}
		}
		rules = append(rules, importRule{[]string{k}, others,
			"a kind's controller imports no other kind's: what two kinds share belongs in the shared base"})
	}
	return append(rules,
		importRule{controllerBase, kinds, "the shared base knows no kind"},
		importRule{append(append([]string{}, kinds...), controllerBase...),
			[]string{"internal/operator", "internal/webhook/...", "test/...", "internal/domainhook/install"},
			"the controllers are composed by internal/operator and know nothing of what composes or plays around them"},
		importRule{[]string{"internal/controller/runnercore"}, []string{"internal/github/...", "internal/gitlab/...", "internal/buildkite/..."},
			"the runner core knows no CI system: each is a backend of it"},
		importRule{hookImage, []string{"api/...", "internal/domainhook/install", "internal/operator", "internal/controller/...", "internal/render"},
			"the hook image carries the contract and Apply, no API types and nothing of the operator's"},
		importRule{guest, []string{"api/...", "internal/controller/...", "internal/operator", "internal/guestendpoint", "sigs.k8s.io/controller-runtime/..."},
			"the guest agent speaks only the protocol: it knows nothing of the cluster"},
		importRule{[]string{"internal/render"}, []string{"sigs.k8s.io/controller-runtime/...", "internal/controller/...", "internal/operator"},
			"render is pure: objects in, objects out, no client"},
		importRule{[]string{"api/..."}, []string{"internal/..."}, "the API types import nothing of the operator"},
		importRule{[]string{"internal/..."}, []string{"test/...", "cmd/..."},
			"nothing inside the operator depends on the test wing or on a command"},
	)
}

// matches reports whether pkg (a full import path) is one of patterns.
func matches(pkg string, patterns []string) bool {
	for _, p := range patterns {
		full := p
		if !strings.Contains(strings.SplitN(p, "/", 2)[0], ".") {
			full = module + p
		}
		if prefix, ok := strings.CutSuffix(full, "/..."); ok {
			if pkg == prefix || strings.HasPrefix(pkg, prefix+"/") {
				return true
			}
			continue
		}
		if pkg == full {
			return true
		}
	}
	return false
}

// violations lists, for each rule, the packages of the module that depend
// on what the rule forbids them: "from -> dependency: why". deps maps each
// package to every package it depends on (go list's Deps).
func violations(deps map[string][]string, rules []importRule) []string {
	var out []string
	for pkg, ds := range deps {
		for _, r := range rules {
			if !matches(pkg, r.from) {
				continue
			}
			for _, d := range ds {
				if d != pkg && matches(d, r.never) {
					out = append(out, pkg+" -> "+d+": "+r.why)
				}
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// moduleDeps is every package of the module, tests left out, with every
// package it depends on, as go list says.
func moduleDeps(t *testing.T) map[string][]string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command, to list the packages: %v", err)
	}
	cmd := exec.Command(gobin, "list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", "./...") //nolint:gosec // the toolchain running this test.
	cmd.Dir = cluster.RepoRoot()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	deps := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 0 {
			deps[fields[0]] = fields[1:]
		}
	}
	if len(deps) == 0 {
		t.Fatal("go list listed no package")
	}
	return deps
}

// TestImportDirection holds the module's packages to the direction of
// imports docs/architecture.md gives.
func TestImportDirection(t *testing.T) {
	deps := moduleDeps(t)
	for _, k := range append(append(append([]string{}, kinds...), controllerBase...), hookImage...) {
		if _, ok := deps[module+k]; !ok {
			t.Errorf("%s is not a package any more: keep the rules (and docs/architecture.md) true", k)
		}
	}
	for _, v := range violations(deps, importRules()) {
		t.Error(v)
	}
}

// TestImportDirectionCatchesWhatItForbids: the check itself fails a kind
// that imports another, directly or through a package between, a shared
// package that imports a kind, and API types in the hook image.
func TestImportDirectionCatchesWhatItForbids(t *testing.T) {
	for name, tc := range map[string]struct {
		deps map[string][]string
		want string
	}{
		"a kind imports another": {map[string][]string{
			module + "internal/controller/claim": {module + "internal/controller/machine", "fmt"}},
			"internal/controller/claim -> " + module + "internal/controller/machine"},
		"a kind depends on another through a package": {map[string][]string{
			module + "internal/controller/pool": {module + "internal/controller/base", module + "internal/controller/class"}},
			"internal/controller/pool -> " + module + "internal/controller/class"},
		"the shared base imports a kind": {map[string][]string{
			module + "internal/controller/drain": {module + "internal/controller/machine"}},
			"internal/controller/drain -> " + module + "internal/controller/machine"},
		"the hook image imports the API types": {map[string][]string{
			module + "internal/domainhook/hook": {module + "api/v1alpha1"}},
			"internal/domainhook/hook -> " + module + "api/v1alpha1"},
	} {
		got := violations(tc.deps, importRules())
		if len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), tc.want) {
			t.Errorf("%s: violations %q, want one naming %s", name, got, tc.want)
		}
	}
	if got := violations(map[string][]string{module + "internal/controller/claim": {module + "internal/controller/base"}}, importRules()); len(got) != 0 {
		t.Errorf("a kind importing the shared base is allowed, got %q", got)
	}
}
