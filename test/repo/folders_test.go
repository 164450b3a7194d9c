package repo

import (
	"path"
	"sort"
	"strings"
	"testing"
)

// Between folders, as between the files of a package, imports run one way:
// in every folder, its subfolders (and the package of the folder's own
// files, ".") never import each other in a loop, directly or through
// others. A loop between folders is an arrow that runs back up in a drawing
// of the house, where each folder is one room: bootstrap importing the
// guest agent's protocol while the guest agent's folder imported bootstrap
// was one.

// folderGraphs sorts the imports between the module's packages by the
// folder where their paths part: for each folder, the graph of its
// children, each edge carrying the imports that draw it. imports maps a
// package, relative to the module, to the module's packages it imports.
func folderGraphs(imports map[string][]string) map[string]fileGraph {
	graphs := map[string]fileGraph{}
	for from, tos := range imports {
		for _, to := range tos {
			folder, a, b := parting(from, to)
			if a == b {
				continue
			}
			if graphs[folder] == nil {
				graphs[folder] = fileGraph{}
			}
			if graphs[folder][a] == nil {
				graphs[folder][a] = map[string][]string{}
			}
			graphs[folder][a][b] = append(graphs[folder][a][b], from+" imports "+to)
		}
	}
	return graphs
}

// parting is the folder where the paths of packages a and b part, and the
// child of that folder each lies in ("." for the folder's own package).
func parting(a, b string) (folder, childA, childB string) {
	as, bs := strings.Split(a, "/"), strings.Split(b, "/")
	i := 0
	for i < len(as) && i < len(bs) && as[i] == bs[i] {
		i++
	}
	child := func(parts []string) string {
		if i >= len(parts) {
			return "."
		}
		return parts[i]
	}
	folder = path.Join(as[:i]...)
	if folder == "" {
		folder = "."
	}
	return folder, child(as), child(bs)
}

// moduleImports is each package of the module (tests left out), relative
// to the module, with the module's packages it imports.
func moduleImports(t *testing.T) map[string][]string {
	t.Helper()
	listed := goListField(t, "Imports", "./...")
	out := map[string][]string{}
	for pkg, imports := range listed {
		rel, ok := relative(pkg)
		if !ok {
			continue
		}
		out[rel] = nil
		for _, imp := range imports {
			if r, ok := relative(imp); ok {
				out[rel] = append(out[rel], r)
			}
		}
	}
	return out
}

// relative is pkg's path within the module.
func relative(pkg string) (string, bool) {
	if pkg == strings.TrimSuffix(module, "/") {
		return ".", true
	}
	return strings.CutPrefix(pkg, module)
}

// folderLoops reports every loop between the children of a folder.
func folderLoops(imports map[string][]string) []string {
	var out []string
	for folder, g := range folderGraphs(imports) {
		for _, c := range fileCycles(g) {
			var why []string
			for _, a := range c {
				for _, b := range c {
					why = append(why, g[a][b]...)
				}
			}
			sort.Strings(why)
			out = append(out, "in "+folder+"/, "+strings.Join(c, ", ")+" import each other in a loop: "+strings.Join(why, "; "))
		}
	}
	sort.Strings(out)
	return out
}

// TestNoFolderImportsInALoop holds every folder of the module to subfolders
// whose imports run one way.
func TestNoFolderImportsInALoop(t *testing.T) {
	imports := moduleImports(t)
	if len(imports) < 50 {
		t.Fatalf("go list listed only %d packages of the module", len(imports))
	}
	for _, l := range folderLoops(imports) {
		t.Error(l)
	}
}

// TestFolderLoopsAreFound: the check finds a loop between sibling folders,
// one that runs through a third, and one between a folder's own package and
// a subfolder; a one-way house has none.
func TestFolderLoopsAreFound(t *testing.T) {
	oneWay := map[string][]string{
		"internal/guestendpoint":     {"internal/bootstrap", "internal/guestprotocol"},
		"internal/bootstrap":         {"internal/guestprotocol", "api/v1alpha1"},
		"internal/hostagent":         {"internal/hostagent/vz"},
		"internal/hostagent/vz/tart": {"internal/hostagent/vz"},
		"cmd/macvirt-sandbox":        {"test/sandbox"},
		"test/sandbox":               {"test/harness", "internal/operator"},
	}
	if l := folderLoops(oneWay); len(l) != 0 {
		t.Errorf("loops in a one-way house: %q", l)
	}
	for name, tc := range map[string]struct {
		imports map[string][]string
		want    string
	}{
		"the guest agent's folder and bootstrap": {map[string][]string{
			"internal/bootstrap":           {"internal/guestagent/protocol"},
			"internal/guestagent/endpoint": {"internal/bootstrap"},
			"internal/guestagent/protocol": nil,
		}, "in internal/, bootstrap, guestagent"},
		"through a third folder": {map[string][]string{
			"internal/a": {"internal/b/x"}, "internal/b/y": {"internal/c"}, "internal/c": {"internal/a"},
		}, "in internal/, a, b, c"},
		"a folder's package and its subfolder": {map[string][]string{
			"internal/hostagent": {"internal/hostagent/vz"}, "internal/hostagent/vz": {"internal/hostagent"},
		}, "in internal/hostagent/, ., vz"},
		"the product and the test wing": {map[string][]string{
			"internal/operator": {"test/harness"}, "test/harness": {"internal/operator"},
		}, "in ./, internal, test"},
	} {
		got := folderLoops(tc.imports)
		if len(got) != 1 || !strings.HasPrefix(got[0], tc.want) {
			t.Errorf("%s: %q, want one loop %q", name, got, tc.want)
		}
	}
}
