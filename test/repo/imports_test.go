package repo

import (
	"bufio"
	"bytes"
	"os"
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
	"internal/controller/class", "internal/controller/host", "internal/controller/nodeslots", "internal/controller/image",
	"internal/controller/runnerset", "internal/controller/buildkitequeue",
}

// controllerBase is what the kinds share.
var controllerBase = []string{
	"internal/controller/base", "internal/controller/index", "internal/controller/state",
	"internal/controller/drain", "internal/controller/slots", "internal/controller/metrics",
	"internal/controller/controllertest", "internal/controller/runnercore",
}

// hookImage is the code that ships in the domain-hook image.
var hookImage = []string{"cmd/domain-hook", "internal/domainhook/contract", "internal/domainhook/hook", "internal/domainhook/server"}

// guest is the code that runs inside macOS; guestEndpoint the operator's
// side of the same protocol.
var (
	guest         = []string{"cmd/macvirt-agent", "internal/guestagent", "internal/guestprotocol"}
	guestEndpoint = []string{"internal/guestendpoint"}
)

// testWing is what exists to test: the stand-ins for the world around
// macvirt, the harness, the sandbox, the suites and the bench.
var testWing = []string{"test/..."}

// standIns are the test wing's copies of the tools and services around
// macvirt. Each copies what the real one does, so it imports nothing of the
// operator; the simulator's guests alone run the real guest agent.
var (
	fakes     = []string{"test/infrastructure/fakegithub/...", "test/infrastructure/fakebuildkite/...", "test/infrastructure/fakegitlabrunner/...", "test/infrastructure/faketart/...", "test/infrastructure/fakelume/..."}
	simulator = []string{"test/infrastructure/simulator"}
)

// shippedBinaries are the commands a release ships (the manager, the hook,
// the guest agent, the host agent, kubectl mac, the fleeting plugin), each
// with the platforms it is built for.
var shippedBinaries = map[string][]string{
	"cmd":                         {"linux/amd64", "linux/arm64"},
	"cmd/domain-hook":             {"linux/amd64"},
	"cmd/macvirt-agent":           {"darwin/amd64", "darwin/arm64"},
	"cmd/macvirt-host-agent":      {"darwin/arm64"},
	"cmd/kubectl-mac":             {"linux/amd64", "darwin/arm64", "windows/amd64"},
	"cmd/fleeting-plugin-macvirt": {"linux/amd64", "darwin/arm64"},
}

// testOnly is what a shipped binary never links: the test wing, test
// support beside the product, and the test parts of its libraries.
var testOnly = append(append([]string{}, testWing...),
	"internal/controller/controllertest", "internal/domainhook/contract/contracttest",
	"sigs.k8s.io/controller-runtime/pkg/envtest/...", "sigs.k8s.io/controller-runtime/pkg/client/fake", "testing")

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
			[]string{"internal/operator", "internal/webhook/...", "internal/domainhook/install"},
			"the controllers are composed by internal/operator and know nothing of what composes or plays around them"},
		importRule{[]string{"internal/controller/runnercore"}, []string{"internal/github/...", "internal/gitlab/...", "internal/buildkite/..."},
			"the runner core knows no CI system: each is a backend of it"},
		importRule{hookImage, []string{"api/...", "internal/domainhook/install", "internal/operator", "internal/controller/...", "internal/render"},
			"the hook image carries the contract and Apply, no API types and nothing of the operator's"},
		importRule{guest, append([]string{"api/...", "internal/controller/...", "internal/operator", "sigs.k8s.io/controller-runtime/..."}, guestEndpoint...),
			"the guest agent speaks only the protocol: it knows nothing of the cluster or of the operator's side"},
		importRule{guestEndpoint, []string{"internal/guestagent"},
			"the operator's endpoint speaks the protocol; the agent's code runs only in macOS"},
		importRule{[]string{"internal/guestprotocol"}, []string{"api/...", "internal/..."},
			"the protocol is the one thing both sides share, and depends on neither"},
		importRule{[]string{"internal/render"}, []string{"sigs.k8s.io/controller-runtime/...", "internal/controller/...", "internal/operator"},
			"render is pure: objects in, objects out, no client"},
		importRule{[]string{"api/..."}, []string{"internal/..."}, "the API types import nothing of the operator"},
		importRule{[]string{"api/...", "internal/..."}, append([]string{"cmd/..."}, testWing...),
			"the product depends on no command and on nothing of the test wing"},
		importRule{fakes, []string{"api/...", "internal/..."},
			"a fake copies the tool or service it stands in for, not macvirt's idea of it: it imports nothing of the operator"},
		importRule{simulator, []string{"api/...", "internal/..."},
			"the simulator plays KubeVirt's nodes, CDI and macOS; its guests run the real guest agent and nothing else of the operator"},
	)
}

// ruleExceptions are what a rule's never takes back for some of its from:
// the simulator's guests run the real guest agent and speak its protocol.
var ruleExceptions = map[string][]string{
	"test/infrastructure/simulator": {"internal/guestagent", "internal/guestprotocol"},
}

// matches reports whether pkg (a full import path) is one of patterns.
func matches(pkg string, patterns []string) bool {
	for _, p := range patterns {
		full := p
		if !strings.Contains(strings.SplitN(p, "/", 2)[0], ".") && p != "testing" {
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
		var allowed []string
		for from, ok := range ruleExceptions {
			if matches(pkg, []string{from}) {
				allowed = append(allowed, ok...)
			}
		}
		for _, r := range rules {
			if !matches(pkg, r.from) {
				continue
			}
			for _, d := range ds {
				if d != pkg && matches(d, r.never) && !matches(d, allowed) {
					out = append(out, pkg+" -> "+d+": "+r.why)
				}
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// goList runs go list in the repository with env added, and returns each
// package it lists with every package it depends on.
func goList(t *testing.T, env []string, patterns ...string) map[string][]string {
	t.Helper()
	return goListWith(t, "Deps", env, patterns...)
}

// goListField returns each package go list lists with its field (Imports,
// Deps).
func goListField(t *testing.T, field string, patterns ...string) map[string][]string {
	t.Helper()
	return goListWith(t, field, nil, patterns...)
}

func goListWith(t *testing.T, field string, env []string, patterns ...string) map[string][]string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command, to list the packages: %v", err)
	}
	cmd := exec.Command(gobin, append([]string{"list", "-f", "{{.ImportPath}} {{join ." + field + " \" \"}}"}, patterns...)...) //nolint:gosec // the toolchain running this test.
	cmd.Dir = cluster.RepoRoot()
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v (%v): %v\n%s", patterns, env, err, stderr.String())
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
		t.Fatalf("go list %v listed no package", patterns)
	}
	return deps
}

// TestImportDirection holds the module's packages (tests left out) to the
// direction of imports docs/architecture.md gives.
func TestImportDirection(t *testing.T) {
	deps := goList(t, nil, "./...")
	named := append(append(append(append(append(append([]string{}, kinds...), controllerBase...), hookImage...), guest...), guestEndpoint...), simulator...)
	for _, k := range named {
		if _, ok := deps[module+k]; !ok {
			t.Errorf("%s is not a package any more: keep the rules (and docs/architecture.md) true", k)
		}
	}
	for _, v := range violations(deps, importRules()) {
		t.Error(v)
	}
}

// linkedTestCode lists what a binary's dependencies hold of testOnly.
func linkedTestCode(binary string, deps []string) []string {
	var out []string
	for _, d := range deps {
		if matches(d, testOnly) {
			out = append(out, binary+" links "+d)
		}
	}
	return out
}

// TestShippedBinariesLinkNoTestCode: every command a release ships, built
// for each of its platforms, links no package of the test wing (simulator,
// fakes, harness) and no test support. The sandbox's command may.
func TestShippedBinariesLinkNoTestCode(t *testing.T) {
	if testing.Short() {
		t.Skip("lists the dependencies of six commands on their platforms: make test runs it")
	}
	for cmd, platforms := range shippedBinaries {
		for _, p := range platforms {
			goos, goarch, _ := strings.Cut(p, "/")
			deps := goList(t, []string{"GOOS=" + goos, "GOARCH=" + goarch, "CGO_ENABLED=0"}, "./"+cmd)
			ds, ok := deps[module+cmd]
			if !ok && cmd == "cmd" {
				ds, ok = deps[strings.TrimSuffix(module, "/")+"/cmd"]
			}
			if !ok {
				t.Fatalf("go list ./%s on %s listed %v", cmd, p, deps)
			}
			for _, v := range linkedTestCode(cmd+" ("+p+")", ds) {
				t.Error(v)
			}
		}
	}
}

// TestImportDirectionCatchesWhatItForbids: each rule fails what it forbids,
// directly or through a package between, and allows what it allows.
func TestImportDirectionCatchesWhatItForbids(t *testing.T) {
	for name, tc := range map[string]struct {
		deps map[string][]string
		want string
	}{
		"a kind imports another": {map[string][]string{
			module + "internal/controller/claim": {module + "internal/controller/machine", "fmt"}},
			"internal/controller/claim -> " + module + "internal/controller/machine"},
		"the host kind imports the machine kind": {map[string][]string{
			module + "internal/controller/host": {module + "internal/controller/machine"}},
			"internal/controller/host -> " + module + "internal/controller/machine"},
		"a kind depends on another through a package": {map[string][]string{
			module + "internal/controller/pool": {module + "internal/controller/base", module + "internal/controller/class"}},
			"internal/controller/pool -> " + module + "internal/controller/class"},
		"the shared base imports a kind": {map[string][]string{
			module + "internal/controller/drain": {module + "internal/controller/machine"}},
			"internal/controller/drain -> " + module + "internal/controller/machine"},
		"the hook image imports the API types": {map[string][]string{
			module + "internal/domainhook/hook": {module + "api/v1alpha1"}},
			"internal/domainhook/hook -> " + module + "api/v1alpha1"},
		"the guest agent imports the operator's endpoint": {map[string][]string{
			module + "internal/guestagent": {module + "internal/guestprotocol", module + "internal/guestendpoint"}},
			"internal/guestagent -> " + module + "internal/guestendpoint"},
		"the operator's endpoint imports the guest agent": {map[string][]string{
			module + "internal/guestendpoint": {module + "internal/guestagent"}},
			"internal/guestendpoint -> " + module + "internal/guestagent"},
		"the protocol imports the API types": {map[string][]string{
			module + "internal/guestprotocol": {module + "api/v1alpha1"}},
			"internal/guestprotocol -> " + module + "api/v1alpha1"},
		"a product package imports the simulator": {map[string][]string{
			module + "internal/tenancy": {module + "test/infrastructure/simulator"}},
			"internal/tenancy -> " + module + "test/infrastructure/simulator"},
		"a product package depends on a fake through another": {map[string][]string{
			module + "internal/operator": {module + "internal/github", module + "test/infrastructure/fakegithub"}},
			"internal/operator -> " + module + "test/infrastructure/fakegithub"},
		"a fake imports the product's client": {map[string][]string{
			module + "test/infrastructure/fakebuildkite": {module + "internal/buildkite"}},
			"test/infrastructure/fakebuildkite -> " + module + "internal/buildkite"},
		"the simulator imports render": {map[string][]string{
			module + "test/infrastructure/simulator": {module + "internal/guestagent", module + "internal/render"}},
			"test/infrastructure/simulator -> " + module + "internal/render"},
	} {
		got := violations(tc.deps, importRules())
		if len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), tc.want) {
			t.Errorf("%s: violations %q, want one naming %s", name, got, tc.want)
		}
	}
	for name, deps := range map[string]map[string][]string{
		"a kind imports the shared base":           {module + "internal/controller/claim": {module + "internal/controller/base"}},
		"the simulator's guests run the agent":     {module + "test/infrastructure/simulator": {module + "internal/guestagent", module + "internal/guestprotocol"}},
		"a suite imports the operator and a fake":  {module + "test/github": {module + "internal/operator", module + "test/infrastructure/fakegithub"}},
		"the sandbox's command imports the wing":   {module + "cmd/macvirt-sandbox": {module + "test/sandbox", module + "test/harness"}},
		"both sides of the guest share a protocol": {module + "internal/guestendpoint": {module + "internal/guestprotocol"}},
	} {
		if got := violations(deps, importRules()); len(got) != 0 {
			t.Errorf("%s is allowed, got %q", name, got)
		}
	}
	if got := linkedTestCode("cmd", []string{"fmt", module + "internal/operator", module + "test/infrastructure/simulator", "testing"}); len(got) != 2 {
		t.Errorf("a manager that links the simulator and package testing: %q, want both named", got)
	}
	if got := linkedTestCode("cmd", []string{"fmt", module + "internal/operator", "testing/fstest"}); len(got) != 0 {
		t.Errorf("a manager without test code: %q", got)
	}
}
