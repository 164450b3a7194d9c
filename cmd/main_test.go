package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/devserve"
	"github.com/macvirt/macvirt/internal/localnet"
	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// TestLocalWebhooks runs the manager binary the way `make run` does, out of
// the cluster against a real API server, and checks that objects get the
// webhooks' defaults and refusals, and that the webhook configurations are
// gone once it stops.
func TestLocalWebhooks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an API server and the manager binary")
	}
	scheme, err := macvirtscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	env, cfg, err := cluster.Start(scheme)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	admin, err := env.AddUser(envtest.User{Name: "developer", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfigPath := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	bin := cluster.Build(t)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	agentPort, err := localnet.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	manager := cluster.StartProcess(t, cluster.RepoRoot(), nil, bin,
		"--kubeconfig="+kubeconfigPath, "--local-webhooks", "--webhook-port=0", fmt.Sprintf("--agent-bind-address=:%d", agentPort),
		"--health-probe-bind-address=0", "--metrics-bind-address=0")

	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	badPool := &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: "bad"},
		Spec: macvirtv1alpha1.MacPoolSpec{ClassName: "sonoma", Namespace: "Not_A_Namespace"}}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := c.Create(ctx, badPool.DeepCopy(), client.DryRunAll)
		if err != nil && strings.Contains(err.Error(), `admission webhook "vmacpool-v1alpha1.macvirt.io" denied the request`) {
			break
		}
		select {
		case werr := <-manager.Exited():
			t.Fatalf("the manager exited (%v) before serving webhooks:\n%s", werr, manager.Output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the local webhooks never refused the pool (last answer: %v); manager logs:\n%s", err, manager.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}

	// A machine's SMBIOS identity is a default only the mutating webhook
	// draws (the schema cannot).
	machine := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "ci-0"},
		Spec: macvirtv1alpha1.MacMachineSpec{ClassName: "sonoma"}}
	if err := c.Create(ctx, machine, client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	if machine.Spec.SMBIOS == nil || machine.Spec.SMBIOS.SerialNumber == "" {
		t.Errorf("spec.smbios = %+v, want an identity drawn by the defaulting webhook", machine.Spec.SMBIOS)
	}

	// The guest-agent endpoint listens too, and refuses a heartbeat for an
	// unknown machine. (The test does not know the generated CA; it only
	// checks who answers.)
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // see above.
	resp, err := insecure.Post(fmt.Sprintf("https://127.0.0.1:%d/v1/heartbeat", agentPort), "application/json",
		strings.NewReader(`{"machine":{"namespace":"x","name":"y"},"agentVersion":"1"}`))
	if err != nil {
		t.Fatalf("the agent endpoint does not answer: %v\n%s", err, manager.Output())
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("an unauthenticated heartbeat got %d, want 401", resp.StatusCode)
	}

	manager.Stop(t, syscall.SIGTERM)
	// Without --zap-devel the manager logs JSON, for a cluster's log
	// pipeline: no line in zap's console form, and its lines parse.
	var jsonLines int
	for _, line := range strings.Split(manager.Output(), "\n") {
		var entry struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		switch {
		case strings.Contains(line, "\tINFO\t") || strings.Contains(line, "\tERROR\t"):
			t.Errorf("a console log line without --zap-devel: %q", line)
		case strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &entry) == nil && entry.Level != "" && entry.Msg != "":
			jsonLines++
		}
	}
	if jsonLines == 0 {
		t.Errorf("no JSON log line from the manager:\n%s", manager.Output())
	}
	var mutating admissionregistrationv1.MutatingWebhookConfigurationList
	var validating admissionregistrationv1.ValidatingWebhookConfigurationList
	if err := c.List(ctx, &mutating); err != nil {
		t.Fatal(err)
	}
	if err := c.List(ctx, &validating); err != nil {
		t.Fatal(err)
	}
	for _, m := range mutating.Items {
		if strings.HasPrefix(m.Name, devserve.NamePrefix) {
			t.Errorf("%s left behind", m.Name)
		}
	}
	for _, v := range validating.Items {
		if strings.HasPrefix(v.Name, devserve.NamePrefix) {
			t.Errorf("%s left behind", v.Name)
		}
	}
}

// TestHookImageIsSetAtBuildTime: the Makefile and the Dockerfile build
// HOOK_IMG in as the hook image of --hook-image's default choice.
func TestHookImageIsSetAtBuildTime(t *testing.T) {
	bin := cluster.Build(t, "-ldflags", "-X github.com/macvirt/macvirt/internal/domainhook/install.DefaultImage=registry.example/hook:v9")
	out, _ := exec.Command(bin, "--help").CombinedOutput() //nolint:gosec // the binary just built.
	if !strings.Contains(string(out), `else registry.example/hook:v9 (KubeVirt `) {
		t.Errorf("--help does not show the hook image built in:\n%s", out)
	}
}
