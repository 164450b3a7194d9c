package guestendpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestprotocol"
	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
)

// reviewedTokens are the tokens the fake API server's TokenReview knows,
// and whose they are.
var reviewedTokens = map[string]string{
	"mac-a-token":   "system:serviceaccount:macvirt-hosts:mac-a",
	"mac-b-token":   "system:serviceaccount:macvirt-hosts:mac-b",
	"mac-c-token":   "system:serviceaccount:macvirt-hosts:mac-c",
	"tenant-token":  "system:serviceaccount:team-a:default",
	"nested-token":  "system:serviceaccount:macvirt-hosts:mac-a:x",
	"default-token": "system:serviceaccount:macvirt-hosts:default",
}

func hostConfigSetup(t *testing.T) (*HostConfigHandler, client.Client, *macvirtv1alpha1.MacMachine) {
	t.Helper()
	scheme, err := macvirtscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "macvirt-pools", Name: "m1", UID: "uid-1",
		Annotations: map[string]string{macvirtv1alpha1.AnnotationAgentTokenHash: guestprotocol.HashToken("first")}},
		Spec: macvirtv1alpha1.MacMachineSpec{ClassName: "vz", HostName: "mac-a"}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(m).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if tr, ok := obj.(*authenticationv1.TokenReview); ok {
				if user, ok := reviewedTokens[tr.Spec.Token]; ok {
					tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: user}}
				}
				return nil
			}
			return c.Create(ctx, obj, opts...)
		}}).Build()
	h := &HostConfigHandler{Client: c, Address: Address{Endpoint: "https://agent.example:9444", CABundle: []byte("CA")}}
	return h, c, m
}

func askConfig(h http.Handler, token string, req guestprotocol.HostConfigRequest) *httptest.ResponseRecorder {
	return askConfigFrom(h, "192.0.2.1:1234", token, req)
}

func askConfigFrom(h http.Handler, addr, token string, req guestprotocol.HostConfigRequest) *httptest.ResponseRecorder {
	body, _ := json.Marshal(req)
	r := httptest.NewRequest(http.MethodPost, guestprotocol.HostConfigPath, bytes.NewReader(body))
	r.RemoteAddr = addr
	r.Header.Set("Content-Type", "application/json")
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestHostConfigGoesOnlyToTheMachinesHost(t *testing.T) {
	ref := guestprotocol.MachineRef{Namespace: "macvirt-pools", Name: "m1"}
	for name, tc := range map[string]struct {
		token string
		req   guestprotocol.HostConfigRequest
		code  int
	}{
		"no token":                          {"", guestprotocol.HostConfigRequest{Machine: ref, UID: "uid-1"}, http.StatusUnauthorized},
		"a token the cluster does not know": {"forged", guestprotocol.HostConfigRequest{Machine: ref, UID: "uid-1"}, http.StatusUnauthorized},
		"a tenant's ServiceAccount":         {"tenant-token", guestprotocol.HostConfigRequest{Machine: ref, UID: "uid-1"}, http.StatusUnauthorized},
		"a name with a colon in it":         {"nested-token", guestprotocol.HostConfigRequest{Machine: ref, UID: "uid-1"}, http.StatusUnauthorized},
		"the agent of another Mac":          {"mac-b-token", guestprotocol.HostConfigRequest{Machine: ref, UID: "uid-1"}, http.StatusForbidden},
		"a machine made again":              {"mac-a-token", guestprotocol.HostConfigRequest{Machine: ref, UID: "uid-0"}, http.StatusForbidden},
		"a machine that does not exist":     {"mac-a-token", guestprotocol.HostConfigRequest{Machine: guestprotocol.MachineRef{Namespace: "macvirt-pools", Name: "nope"}, UID: "uid-1"}, http.StatusForbidden},
		"no machine named":                  {"mac-a-token", guestprotocol.HostConfigRequest{UID: "uid-1"}, http.StatusBadRequest},
		"the machine's own host":            {"mac-a-token", guestprotocol.HostConfigRequest{Machine: ref, UID: "uid-1"}, http.StatusOK},
	} {
		t.Run(name, func(t *testing.T) {
			h, c, m := hostConfigSetup(t)
			issued := testutil.ToFloat64(hostConfigs.WithLabelValues("Issued"))
			w := askConfig(h, tc.token, tc.req)
			if w.Code != tc.code {
				t.Fatalf("answered %d, want %d: %s", w.Code, tc.code, w.Body)
			}
			if counted := testutil.ToFloat64(hostConfigs.WithLabelValues("Issued")) - issued; counted != map[bool]float64{true: 1, false: 0}[tc.code == http.StatusOK] {
				t.Errorf("macvirt_host_config_requests_total{result=Issued} rose by %v", counted)
			}
			got := &macvirtv1alpha1.MacMachine{}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(m), got); err != nil {
				t.Fatal(err)
			}
			secrets := &corev1.SecretList{}
			if err := c.List(context.Background(), secrets); err != nil {
				t.Fatal(err)
			}
			if tc.code != http.StatusOK {
				if got.Annotations[macvirtv1alpha1.AnnotationAgentTokenHash] != guestprotocol.HashToken("first") || len(secrets.Items) != 0 {
					t.Errorf("a refused request changed the machine's token or made a Secret")
				}
				return
			}
			var cfg guestprotocol.HostConfig
			if err := json.Unmarshal(w.Body.Bytes(), &cfg); err != nil {
				t.Fatal(err)
			}
			f := cfg.Files
			if f[guestprotocol.KeyEndpoint] != "https://agent.example:9444" || f[guestprotocol.KeyCABundle] != "CA" ||
				f[guestprotocol.KeyNamespace] != "macvirt-pools" || f[guestprotocol.KeyMachine] != "m1" || f[guestprotocol.KeyMachineUID] != "uid-1" {
				t.Errorf("configuration %v", f)
			}
			// The token is this start's: the machine now records its hash
			// (the first token no longer counts), and its Secret.
			if tok := f[guestprotocol.KeyToken]; tok == "" || tok == "first" ||
				got.Annotations[macvirtv1alpha1.AnnotationAgentTokenHash] != guestprotocol.HashToken(tok) {
				t.Errorf("the token handed out is not the one the machine records")
			}
			if len(secrets.Items) != 1 || secrets.Items[0].Name != got.Annotations[macvirtv1alpha1.AnnotationAgentSecret] {
				t.Errorf("the reissued token's Secret is not the one the machine records: %d Secrets", len(secrets.Items))
			}
			if w.Header().Get("Cache-Control") != "no-store" {
				t.Errorf("a configuration with a token is cacheable")
			}
		})
	}
}

func TestHostConfigRefusesADeletingMachine(t *testing.T) {
	h, c, m := hostConfigSetup(t)
	m.Finalizers = []string{"macvirt.io/test"}
	if err := c.Update(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	w := askConfig(h, "mac-a-token", guestprotocol.HostConfigRequest{Machine: guestprotocol.MachineRef{Namespace: m.Namespace, Name: m.Name}, UID: "uid-1"})
	if w.Code != http.StatusConflict {
		t.Fatalf("answered %d, want 409: %s", w.Code, w.Body)
	}
}

func TestTheHandlerRoutesHostsToTheirHandler(t *testing.T) {
	h, _, _ := hostConfigSetup(t)
	outer := &Handler{Client: h.Client, Hosts: h}
	w := askConfig(outer, "mac-a-token", guestprotocol.HostConfigRequest{Machine: guestprotocol.MachineRef{Namespace: "macvirt-pools", Name: "m1"}, UID: "uid-1"})
	if w.Code != http.StatusOK {
		t.Fatalf("answered %d: %s", w.Code, w.Body)
	}
	outer.Hosts = nil
	if w := askConfig(outer, "mac-a-token", guestprotocol.HostConfigRequest{}); w.Code != http.StatusNotFound {
		t.Fatalf("without a host handler: %d, want 404", w.Code)
	}
}

// Junk tokens cost a TokenReview each: one address sending them is limited,
// and a host whose token was reviewed, or which sends from elsewhere, is
// still answered.
func TestHostConfigJunkTokensStarveOnlyTheirSender(t *testing.T) {
	h, c, m := hostConfigSetup(t)
	reviews := 0
	counting := interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*authenticationv1.TokenReview); ok {
				reviews++
			}
			return cl.Create(ctx, obj, opts...)
		}})
	h.Client = counting
	ref := guestprotocol.MachineRef{Namespace: m.Namespace, Name: m.Name}
	if w := askConfigFrom(h, "192.0.2.10:1", "mac-a-token", guestprotocol.HostConfigRequest{Machine: ref, UID: "uid-1"}); w.Code != http.StatusOK {
		t.Fatalf("the host's first request: %d %s", w.Code, w.Body)
	}
	limited := 0
	for range 100 {
		if w := askConfigFrom(h, "192.0.2.66:1", "junk", guestprotocol.HostConfigRequest{Machine: ref, UID: "uid-1"}); w.Code == http.StatusTooManyRequests {
			limited++
		}
	}
	if limited < 80 || reviews > 1+reviewBurst+5 {
		t.Errorf("100 junk requests from one address: %d limited, %d TokenReviews in all", limited, reviews)
	}
	before := reviews
	if w := askConfigFrom(h, "192.0.2.66:2", "mac-a-token", guestprotocol.HostConfigRequest{Machine: ref, UID: "uid-1"}); w.Code != http.StatusOK {
		t.Errorf("the host's reviewed token, from the limited address: %d %s", w.Code, w.Body)
	}
	if w := askConfigFrom(h, "192.0.2.11:1", "mac-b-token", guestprotocol.HostConfigRequest{Machine: ref, UID: "uid-1"}); w.Code != http.StatusForbidden {
		t.Errorf("another host from another address is reviewed and answered: %d %s", w.Code, w.Body)
	}
	if reviews != before+1 {
		t.Errorf("%d TokenReviews for a reviewed token and a new one, want 1", reviews-before)
	}
}

// The machine's controllers write it too: a start whose token record
// loses that race is retried with the machine read again, a little later
// each time, up to issueAttempts, and only then refused (the host retries
// later).
func TestHostConfigRetriesAConflictingRecord(t *testing.T) {
	for name, tc := range map[string]struct {
		conflicts, patches, code int
	}{
		"one conflict":       {conflicts: 1, patches: 2, code: http.StatusOK},
		"a burst of them":    {conflicts: 4, patches: 5, code: http.StatusOK},
		"conflicts go on":    {conflicts: 9, patches: issueAttempts, code: http.StatusServiceUnavailable},
		"no conflict at all": {conflicts: 0, patches: 1, code: http.StatusOK},
	} {
		t.Run(name, func(t *testing.T) {
			h, c, m := hostConfigSetup(t)
			patches := 0
			h.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
				Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
					if _, ok := obj.(*macvirtv1alpha1.MacMachine); ok {
						patches++
						if patches <= tc.conflicts {
							return apierrors.NewConflict(macvirtv1alpha1.GroupVersion.WithResource("macmachines").GroupResource(), obj.GetName(), errors.New("the object has been modified"))
						}
					}
					return cl.Patch(ctx, obj, p, opts...)
				}})
			w := askConfig(h, "mac-a-token", guestprotocol.HostConfigRequest{Machine: guestprotocol.MachineRef{Namespace: m.Namespace, Name: m.Name}, UID: "uid-1"})
			if w.Code != tc.code || patches != tc.patches {
				t.Fatalf("answered %d after %d patches; want %d after %d: %s", w.Code, patches, tc.code, tc.patches, w.Body)
			}
		})
	}
}
