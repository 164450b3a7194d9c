package kubectlmac

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

func TestGetPrintsJSONYAMLAndEveryNamespace(t *testing.T) {
	s, err := newScheme()
	if err != nil {
		t.Fatal(err)
	}
	mk := func(ns, name string) *macvirtv1alpha1.MacClaim {
		c := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: macvirtv1alpha1.MacClaimSpec{ClassName: "sonoma"}}
		c.Status.Connection = &macvirtv1alpha1.ClaimConnection{Address: "10.244.1.2"}
		return c
	}
	cl := fake.NewClientBuilder().WithScheme(s).WithObjects(mk("team", "build"), mk("team", "test"), mk("other", "ios")).Build()
	run := func(c getCmd, args ...string) string {
		t.Helper()
		var out bytes.Buffer
		env := &Env{Client: cl, Namespace: "team", Streams: Streams{Out: &out, Err: &out}, Now: time.Now}
		if code, err := c.run(context.Background(), env, args); code != 0 || err != nil {
			t.Fatalf("get %+v %q: %d %v", c, args, code, err)
		}
		return out.String()
	}

	var list struct {
		Kind  string `json:"kind"`
		Items []struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(run(getCmd{output: "json"})), &list); err != nil {
		t.Fatal(err)
	}
	if list.Kind != "MacClaimList" || len(list.Items) != 2 || list.Items[0].Metadata.Name != "build" || list.Items[0].Kind != "MacClaim" {
		t.Errorf("-o json: %+v; want the namespace's two claims, typed", list)
	}
	var one macvirtv1alpha1.MacClaim
	if err := yaml.Unmarshal([]byte(run(getCmd{output: "yaml"}, "build")), &one); err != nil || one.Name != "build" || one.Kind != "MacClaim" ||
		one.Status.Connection.Address != "10.244.1.2" {
		t.Errorf("-o yaml build: %+v, %v", one, err)
	}
	if got := run(getCmd{output: "jsonpath={.status.connection.address}"}, "build"); got != "10.244.1.2" {
		t.Errorf("-o jsonpath: %q", got)
	}
	all := run(getCmd{allNamespaces: true})
	lines := strings.Split(strings.TrimSpace(all), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "NAMESPACE ") || !strings.HasPrefix(lines[1], "other ") || !strings.Contains(all, "10.244.1.2") {
		t.Errorf("-A:\n%s", all)
	}
	var bad bytes.Buffer
	env := &Env{Client: cl, Namespace: "team", Streams: Streams{Out: &bad, Err: &bad}}
	if code, err := (getCmd{output: "xml"}).run(context.Background(), env, nil); code != 2 || err == nil || !strings.Contains(err.Error(), "-o xml") {
		t.Errorf("-o xml: %d %v", code, err)
	}
	if code, err := (getCmd{allNamespaces: true}).run(context.Background(), env, []string{"build"}); code != 2 || err == nil {
		t.Errorf("-A with a name: %d %v", code, err)
	}
}
