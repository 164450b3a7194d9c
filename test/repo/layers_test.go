package repo

import (
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"

	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// Inside each package of internal/controller no file uses a definition of
// a file above it: a file's package-level names, methods and fields are
// used only by files higher up (docs/architecture.md gives the order of a
// kind package). A cycle of files is an arrow that runs back up.

// fileGraph is, per file of a package, the files whose definitions it
// uses, with the names used.
type fileGraph map[string]map[string][]string

// fileCycles returns the cycles of g, each as its files, sorted.
func fileCycles(g fileGraph) [][]string {
	index, low := map[string]int{}, map[string]int{}
	onStack := map[string]bool{}
	var stack []string
	var cycles [][]string
	n := 0
	var visit func(string)
	visit = func(v string) {
		index[v], low[v] = n, n
		n++
		stack = append(stack, v)
		onStack[v] = true
		for w := range g[v] {
			if _, seen := index[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] != index[v] {
			return
		}
		var c []string
		for {
			w := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			onStack[w] = false
			c = append(c, w)
			if w == v {
				break
			}
		}
		if len(c) > 1 {
			sort.Strings(c)
			cycles = append(cycles, c)
		}
	}
	var files []string
	for f := range g {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		if _, seen := index[f]; !seen {
			visit(f)
		}
	}
	return cycles
}

// TestControllerFilesAreLayered holds every package under
// internal/controller to files without cycles.
func TestControllerFilesAreLayered(t *testing.T) {
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo,
		Dir: cluster.RepoRoot()}
	pkgs, err := packages.Load(cfg, "./internal/controller/...")
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < len(kinds) {
		t.Fatalf("loaded %d packages under internal/controller", len(pkgs))
	}
	for _, p := range pkgs {
		for _, e := range p.Errors {
			t.Errorf("%s: %v", p.PkgPath, e)
		}
		definedIn := map[any]string{}
		for _, obj := range p.TypesInfo.Defs {
			if obj != nil && obj.Pkg() == p.Types {
				definedIn[obj] = filepath.Base(p.Fset.Position(obj.Pos()).Filename)
			}
		}
		g := fileGraph{}
		for id, obj := range p.TypesInfo.Uses {
			to, ok := definedIn[obj]
			// Package-level names, and methods and fields (no parent scope).
			if !ok || (obj.Parent() != nil && obj.Parent() != p.Types.Scope()) {
				continue
			}
			from := filepath.Base(p.Fset.Position(id.Pos()).Filename)
			if from == to {
				continue
			}
			if g[from] == nil {
				g[from] = map[string][]string{}
			}
			g[from][to] = append(g[from][to], obj.Name())
		}
		for _, c := range fileCycles(g) {
			var arrows []string
			for _, a := range c {
				for _, b := range c {
					if names := g[a][b]; len(names) > 0 {
						sort.Strings(names)
						arrows = append(arrows, a+" uses "+b+" ("+strings.Join(compact(names), ", ")+")")
					}
				}
			}
			t.Errorf("%s: files %s use each other in a cycle: %s; move what the lower file needs down, or the use up",
				p.PkgPath, strings.Join(c, ", "), strings.Join(arrows, "; "))
		}
	}
}

func compact(s []string) []string {
	var out []string
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// TestFileCyclesAreFound: the check finds a file that uses one above it.
func TestFileCyclesAreFound(t *testing.T) {
	layered := fileGraph{"controller.go": {"steps.go": {"ensure"}, "scope.go": {"scope"}}, "steps.go": {"scope.go": {"scope"}}}
	if c := fileCycles(layered); len(c) != 0 {
		t.Errorf("cycles in a layered package: %v", c)
	}
	layered["scope.go"] = map[string][]string{"controller.go": {"Reconciler"}}
	if c := fileCycles(layered); len(c) != 1 || len(c[0]) != 3 {
		t.Errorf("cycles %v; want controller.go, scope.go and steps.go in one", c)
	}
}
