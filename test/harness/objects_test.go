package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

func TestReadObjectsTypesTheRepositorysFiles(t *testing.T) {
	scheme, err := macvirtscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		"samples/macvirt_v1alpha1_macclass.yaml": "*v1alpha1.MacClass",
		"rbac/role.yaml":                         "*v1.ClusterRole",
		tunnelTrustReader:                        "*v1.Role",
	} {
		objs, err := ReadObjects(filepath.Join(cluster.RepoRoot(), "config", file), scheme)
		if err != nil || len(objs) == 0 {
			t.Fatalf("config/%s: %d objects, %v", file, len(objs), err)
		}
		if got := typeName(objs[0]); got != want {
			t.Errorf("config/%s: the first object is a %s, want %s", file, got, want)
		}
	}
}

func TestReadObjectsRefusesAFieldTheTypeLacks(t *testing.T) {
	scheme, err := macvirtscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "pool.yaml")
	if err := os.WriteFile(path, []byte("apiVersion: macvirt.io/v1alpha1\nkind: MacPool\nmetadata:\n  name: p\nspec:\n  classNme: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadObjects(path, scheme); err == nil {
		t.Error("a pool with spec.classNme was read")
	}
}

func typeName(v any) string { return fmt.Sprintf("%T", v) }
