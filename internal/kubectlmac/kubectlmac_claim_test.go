package kubectlmac

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// claimEnv is a waitEnv whose home holds an SSH public key.
func claimEnv(t *testing.T, c client.WithWatch) (*Env, *bytes.Buffer) {
	t.Helper()
	env, out := waitEnv(c)
	env.Home = t.TempDir()
	if err := os.MkdirAll(filepath.Join(env.Home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(env.Home, ".ssh", "id_ed25519.pub"), []byte(authorizedLine(newKey(t).PublicKey())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return env, out
}

func claimNames(t *testing.T, c client.Client) []string {
	t.Helper()
	list := &macvirtv1alpha1.MacClaimList{}
	if err := c.List(context.Background(), list); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, cl := range list.Items {
		names = append(names, cl.Name)
	}
	return names
}

func class(name string) *macvirtv1alpha1.MacClass {
	return &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func pool(name, className string) *macvirtv1alpha1.MacPool {
	return &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: macvirtv1alpha1.MacPoolSpec{ClassName: className}}
}

func TestAClaimThatCannotBeServedIsNotCreated(t *testing.T) {
	for name, tc := range map[string]struct {
		cmd  claimCmd
		code int
		want []string
	}{
		"a class that does not exist": {claimCmd{class: "nosuch"}, 1,
			[]string{`--class nosuch: MacClass "nosuch" does not exist`, "kubectl get macclasses", "no claim was created"}},
		"a pool that does not exist": {claimCmd{class: "sonoma", pool: "nosuch"}, 1,
			[]string{`--pool nosuch: MacPool "nosuch" does not exist`, "kubectl get macpools", "no claim was created"}},
		"a pool of another class": {claimCmd{class: "sonoma", pool: "sequoia-ci"}, 1,
			[]string{`--pool sequoia-ci holds machines of MacClass "sequoia", not "sonoma"`, "give --class sequoia", "no claim was created"}},
		"an access type that does not exist": {claimCmd{class: "sonoma", access: "Nodeport"}, 2,
			[]string{`--access "Nodeport"`, "ClusterIP, NodePort or LoadBalancer"}},
	} {
		t.Run(name, func(t *testing.T) {
			c := waitFake(t, class("sonoma"), class("sequoia"), pool("sequoia-ci", "sequoia"))
			env, _ := claimEnv(t, c)
			code, err := tc.cmd.run(context.Background(), env, []string{"build"})
			if code != tc.code || err == nil {
				t.Fatalf("claim: exit %d, %v; want exit %d and an error", code, err, tc.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if names := claimNames(t, c); len(names) != 0 {
				t.Errorf("claims left behind: %v", names)
			}
		})
	}
}

func TestATenantWhoCannotReadTheCatalogStillClaims(t *testing.T) {
	c := interceptor.NewClient(waitFake(t), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			switch obj.(type) {
			case *macvirtv1alpha1.MacClass, *macvirtv1alpha1.MacPool:
				return apierrors.NewForbidden(schema.GroupResource{Group: "macvirt.io", Resource: "macclasses"}, key.Name, errors.New("no catalog rights"))
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	env, out := claimEnv(t, c)
	if code, err := (&claimCmd{class: "sonoma", pool: "sonoma-ci"}).run(context.Background(), env, []string{"build"}); code != 0 || err != nil {
		t.Fatalf("claim: exit %d, %v; want the claim created, its status to tell the rest", code, err)
	}
	if !strings.Contains(out.String(), "macclaim team/build created") {
		t.Errorf("output: %q", out.String())
	}
}

// stall marks claim team/build as needing a human, bound to a machine or
// not.
func stall(t *testing.T, c client.Client, bound bool) {
	t.Helper()
	claim := &macvirtv1alpha1.MacClaim{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "team", Name: "build"}, claim); err != nil {
		t.Error(err)
		return
	}
	if bound {
		claim.Status.MachineRef = &macvirtv1alpha1.ObjectRef{Namespace: "macvirt-pools", Name: "sonoma-ci-x1", UID: "m"}
	}
	meta.SetStatusCondition(&claim.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionStalled,
		Status: metav1.ConditionTrue, Reason: "NamespaceNotAllowed", Message: `MacClass "sonoma" does not serve namespace team`})
	if err := c.Update(context.Background(), claim); err != nil {
		t.Error(err)
	}
}

func TestClaimWaitDeletesTheClaimItMadeWhenNoMachineCanBeMade(t *testing.T) {
	for name, bound := range map[string]bool{"unbound": false, "bound": true} {
		t.Run(name, func(t *testing.T) {
			base := waitFake(t, class("sonoma"))
			// The claim is read once more after waiting (a Get, which
			// watched would flag), so only the watch is followed here.
			watching := make(chan struct{}, 10)
			c := interceptor.NewClient(base, interceptor.Funcs{
				Watch: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
					w, err := c.Watch(ctx, list, opts...)
					watching <- struct{}{}
					return w, err
				},
			})
			env, _ := claimEnv(t, c)
			done := make(chan waitResult, 1)
			go func() {
				code, err := (&claimCmd{class: "sonoma", wait: true, timeout: time.Minute}).run(context.Background(), env, []string{"build"})
				done <- waitResult{code, err}
			}()
			awaitWatch(t, watching)
			stall(t, base, bound)
			r := awaitResult(t, done)
			if r.code != 1 || r.err == nil || !strings.Contains(r.err.Error(), "needs a human (NamespaceNotAllowed)") {
				t.Fatalf("claim --wait: exit %d, %v; want exit 1 with the reason", r.code, r.err)
			}
			names := claimNames(t, base)
			deleted := strings.Contains(r.err.Error(), "the claim was deleted, as no machine was made for it")
			switch {
			case !bound && (len(names) != 0 || !deleted):
				t.Errorf("claims %v, error %q; want the unserved claim deleted, and said", names, r.err)
			case bound && (len(names) != 1 || deleted):
				t.Errorf("claims %v, error %q; want a bound claim kept (its machine tells what happened)", names, r.err)
			}
		})
	}
}

func TestReleaseSaysWhatBecomesOfTheMachine(t *testing.T) {
	bound := func(policy macvirtv1alpha1.ReclaimPolicy) *macvirtv1alpha1.MacClaim {
		c := pendingClaim()
		c.Spec.ReclaimPolicy = policy
		c.Status.MachineRef = &macvirtv1alpha1.ObjectRef{Namespace: "macvirt-pools", Name: "sonoma-ci-x1", UID: "m"}
		return c
	}
	for name, tc := range map[string]struct {
		claim *macvirtv1alpha1.MacClaim
		want  string
	}{
		"never bound":      {pendingClaim(), "macclaim team/build released: no machine was bound to it\n"},
		"bound, Delete":    {bound(macvirtv1alpha1.ReclaimDelete), "macclaim team/build released: its machine macvirt-pools/sonoma-ci-x1 is stopped gracefully, then deleted\n"},
		"bound, Retain":    {bound(macvirtv1alpha1.ReclaimRetain), "macclaim team/build released: its machine macvirt-pools/sonoma-ci-x1 is stopped gracefully and kept with its disks (reclaimPolicy Retain)\n"},
		"bound, no policy": {bound(""), "macclaim team/build released: its machine macvirt-pools/sonoma-ci-x1 is stopped gracefully, then deleted\n"},
	} {
		t.Run(name, func(t *testing.T) {
			c := waitFake(t, tc.claim)
			env, out := claimEnv(t, c)
			if code, err := (&releaseCmd{}).run(context.Background(), env, []string{"build"}); code != 0 || err != nil {
				t.Fatalf("release: exit %d, %v", code, err)
			}
			if out.String() != tc.want {
				t.Errorf("release said %q, want %q", out.String(), tc.want)
			}
		})
	}
}

func TestAnInvalidObjectIsExplainedFieldByField(t *testing.T) {
	refusal := apierrors.NewInvalid(schema.GroupKind{Group: "macvirt.io", Kind: "MacClaim"}, "build", field.ErrorList{
		field.NotSupported(field.NewPath("spec", "access", "type"), "Nodeport", []string{"ClusterIP", "NodePort", "LoadBalancer"}),
		field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"),
	})
	if !strings.Contains(refusal.Error(), "<nil>") {
		t.Fatalf("the API server's text %q no longer holds <nil>; this test no longer shows anything", refusal)
	}
	got := readable(refusal).Error()
	want := "macclaim \"build\" is invalid:\n  spec.access.type: Unsupported value: \"Nodeport\": supported values: \"ClusterIP\", \"NodePort\", \"LoadBalancer\""
	if got != want {
		t.Errorf("readable:\n%s\nwant:\n%s", got, want)
	}
	for _, err := range []error{nil, errors.New("plain"), apierrors.NewNotFound(schema.GroupResource{Resource: "macclaims"}, "x")} {
		if got := readable(err); got != err {
			t.Errorf("readable(%v) = %v; want it unchanged", err, got)
		}
	}
}
