package repo

import (
	"go/ast"
	"go/types"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"

	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// A reconcile step's name says whether it writes to the API server: a step
// named for looking (find, observe, load, list, check, count, plan, ...)
// never creates, updates, patches or deletes an object, directly or through
// any function of the controllers it calls; a step named for acting
// (ensure, bind, create, release, stop, ...) may. A reader of Reconcile's
// list of steps then knows which ones change the cluster.

// readVerbs begin the names of steps that only read; actVerbs those of
// steps that may write.
var (
	readVerbs = []string{"find", "observe", "load", "list", "check", "count", "plan", "decide", "refresh", "read", "gather", "compute"}
	actVerbs  = []string{"ensure", "bind", "create", "release", "stop", "start", "restart", "publish", "hand", "delete", "adopt",
		"prune", "record", "complete", "claim", "connect", "remove", "mark", "advertise"}
)

// clientWrites are the methods of controller-runtime's client that write.
var clientWrites = map[string]bool{}

func init() {
	for _, iface := range []string{"Writer", "SubResourceWriter"} {
		for _, m := range []string{"Create", "Update", "Patch", "Delete", "DeleteAllOf", "Apply"} {
			clientWrites["(sigs.k8s.io/controller-runtime/pkg/client."+iface+")."+m] = true
		}
	}
}

// callGraph is, for each function of the controllers (by its full name),
// the functions it calls and whether it calls a client write itself.
type callGraph struct {
	calls  map[string][]string
	writes map[string]bool
	// steps are the methods passed to base.RunSteps, each with where.
	steps map[string]string
}

// writer reports whether f writes to the API server, directly or through
// what it calls.
func (g *callGraph) writer(f string) bool {
	seen := map[string]bool{}
	var visit func(string) bool
	visit = func(f string) bool {
		if seen[f] {
			return false
		}
		seen[f] = true
		if g.writes[f] {
			return true
		}
		for _, c := range g.calls[f] {
			if visit(c) {
				return true
			}
		}
		return false
	}
	return visit(f)
}

// calleeOf is the function a call calls, when the code names one.
func calleeOf(info *types.Info, call *ast.CallExpr) *types.Func {
	switch fn := ast.Unparen(call.Fun).(type) {
	case *ast.SelectorExpr:
		if sel := info.Selections[fn]; sel != nil {
			f, _ := sel.Obj().(*types.Func)
			return f
		}
		f, _ := info.Uses[fn.Sel].(*types.Func)
		return f
	case *ast.Ident:
		f, _ := info.Uses[fn].(*types.Func)
		return f
	case *ast.IndexExpr: // a generic function, instantiated
		if id, ok := fn.X.(*ast.SelectorExpr); ok {
			f, _ := info.Uses[id.Sel].(*types.Func)
			return f
		}
	}
	return nil
}

// controllerCalls reads every function of the operator (internal/), and
// the steps the controllers run.
func controllerCalls(t *testing.T) *callGraph {
	t.Helper()
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo,
		Dir: cluster.RepoRoot()}
	pkgs, err := packages.Load(cfg, "./internal/...")
	if err != nil {
		t.Fatal(err)
	}
	g := &callGraph{calls: map[string][]string{}, writes: map[string]bool{}, steps: map[string]string{}}
	impls := implementations(pkgs)
	for _, p := range pkgs {
		for _, e := range p.Errors {
			t.Errorf("%s: %v", p.PkgPath, e)
		}
		for _, file := range p.Syntax {
			for _, decl := range file.Decls {
				fd, ok := decl.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				self, ok := p.TypesInfo.Defs[fd.Name].(*types.Func)
				if !ok {
					continue
				}
				name := self.FullName()
				ast.Inspect(fd.Body, func(n ast.Node) bool {
					call, ok := n.(*ast.CallExpr)
					if !ok {
						return true
					}
					callee := calleeOf(p.TypesInfo, call)
					if callee == nil {
						return true
					}
					full := callee.Origin().FullName()
					if clientWrites[full] {
						g.writes[name] = true
					}
					g.calls[name] = append(g.calls[name], full)
					// A method of one of the operator's interfaces may be
					// any of its implementations.
					g.calls[name] = append(g.calls[name], impls(callee)...)
					if callee.Name() == "RunSteps" && strings.HasSuffix(callee.Pkg().Path(), "/internal/controller/base") {
						for _, arg := range call.Args[2:] {
							if sel, ok := arg.(*ast.SelectorExpr); ok {
								if s := p.TypesInfo.Selections[sel]; s != nil {
									pos := p.Fset.Position(arg.Pos())
									if rel, err := filepath.Rel(cluster.RepoRoot(), pos.Filename); err == nil {
										pos.Filename = rel
									}
									g.steps[s.Obj().(*types.Func).FullName()] = pos.String()
								}
							}
						}
					}
					return true
				})
			}
		}
	}
	return g
}

// implementations returns, for a method of an interface the operator
// declares, the full names of that method on every type of pkgs that
// implements the interface.
func implementations(pkgs []*packages.Package) func(*types.Func) []string {
	var named []*types.Named
	for _, p := range pkgs {
		for _, name := range p.Types.Scope().Names() {
			if tn, ok := p.Types.Scope().Lookup(name).(*types.TypeName); ok {
				if n, ok := tn.Type().(*types.Named); ok && !types.IsInterface(n) {
					named = append(named, n)
				}
			}
		}
	}
	return func(m *types.Func) []string {
		recv := m.Type().(*types.Signature).Recv()
		if recv == nil || !types.IsInterface(recv.Type()) || m.Pkg() == nil || !strings.HasPrefix(m.Pkg().Path(), module) {
			return nil
		}
		iface, ok := recv.Type().Underlying().(*types.Interface)
		if !ok {
			return nil
		}
		var out []string
		for _, n := range named {
			if !types.Implements(n, iface) && !types.Implements(types.NewPointer(n), iface) {
				continue
			}
			if obj, _, _ := types.LookupFieldOrMethod(types.NewPointer(n), true, m.Pkg(), m.Name()); obj != nil {
				if f, ok := obj.(*types.Func); ok {
					out = append(out, f.Origin().FullName())
				}
			}
		}
		return out
	}
}

// verbOf is the verb a step's method name begins with, and whether it
// names a step that only reads.
func verbOf(method string) (verb string, reads, known bool) {
	for _, v := range readVerbs {
		if strings.HasPrefix(method, v) && (len(method) == len(v) || strings.ToUpper(method[len(v):len(v)+1]) == method[len(v):len(v)+1]) {
			return v, true, true
		}
	}
	for _, v := range actVerbs {
		if strings.HasPrefix(method, v) && (len(method) == len(v) || strings.ToUpper(method[len(v):len(v)+1]) == method[len(v):len(v)+1]) {
			return v, false, true
		}
	}
	return "", false, false
}

// misnamedSteps lists the steps whose name does not say what they do.
func misnamedSteps(g *callGraph) []string {
	var out []string
	for step, where := range g.steps {
		method := step[strings.LastIndex(step, ".")+1:]
		composite := false
		for _, c := range g.calls[step] {
			composite = composite || strings.HasSuffix(c, "/internal/controller/base.RunSteps")
		}
		if composite {
			continue // its own steps are checked
		}
		verb, reads, known := verbOf(method)
		switch {
		case !known:
			out = append(out, where+": step "+method+" begins with no verb of readVerbs or actVerbs: name it for whether it writes")
		case reads && g.writer(step):
			out = append(out, where+": step "+method+" is named for reading ("+verb+") but writes to the API server")
		}
	}
	sort.Strings(out)
	return out
}

// TestStepNamesSayWhetherTheyWrite holds every kind's steps to names that
// say whether they write.
func TestStepNamesSayWhetherTheyWrite(t *testing.T) {
	g := controllerCalls(t)
	if len(g.steps) < 30 {
		t.Fatalf("found only %d steps passed to base.RunSteps", len(g.steps))
	}
	for _, m := range misnamedSteps(g) {
		t.Error(m)
	}
}

// TestMisnamedStepsAreFound: a step named for reading that writes, even
// through a function it calls, and a step whose name begins with no known
// verb are found; a step named for acting may write, and a composite step
// is left to its own steps.
func TestMisnamedStepsAreFound(t *testing.T) {
	const c = "(*example.com/claim.Reconciler)."
	g := &callGraph{
		calls: map[string][]string{
			c + "findBound":    {c + "completeBind"},
			c + "completeBind": {"(sigs.k8s.io/controller-runtime/pkg/client.Writer).Patch"},
			c + "checkLimits":  {c + "limitsOf"},
			c + "runtimeSteps": {"example.com/internal/controller/base.RunSteps"},
		},
		writes: map[string]bool{c + "completeBind": true, c + "bind": true, c + "frobnicate": true},
		steps: map[string]string{c + "findBound": "controller.go:1", c + "checkLimits": "controller.go:2", c + "bind": "controller.go:3",
			c + "frobnicate": "controller.go:4", c + "runtimeSteps": "controller.go:5"},
	}
	got := misnamedSteps(g)
	if len(got) != 2 || !strings.Contains(got[0], "step findBound is named for reading (find) but writes") ||
		!strings.Contains(got[1], "step frobnicate begins with no verb") {
		t.Errorf("misnamed steps %q; want findBound (reads, writes) and frobnicate (no verb) only", got)
	}
}
