package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/macvirt/macvirt/internal/domainhook/contract/contracttest"
	"github.com/macvirt/macvirt/internal/domainhook/hook"
)

// rawCodec hands gRPC the bytes the test encoded itself, so the client
// below shares no code with the server's encoding.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// field encodes one length-delimited proto field: the key is
// (number << 3) | 2, then the length as a varint, then the bytes.
func field(num byte, v []byte) []byte {
	out := []byte{num<<3 | 2}
	out = binary.AppendUvarint(out, uint64(len(v)))
	return append(out, v...)
}

// mutateDomainRequest encodes api.proto's MutateDomainRequest:
// domain_type = 1, domain = 2, vmi = 3, sidecar_context = 4 (whose
// invocation_context = 1).
func mutateDomainRequest(domain, vmi []byte) []byte {
	var b []byte
	b = append(b, field(1, []byte("libvirt"))...)
	b = append(b, field(2, domain)...)
	b = append(b, field(3, vmi)...)
	return append(b, field(4, field(1, []byte("Boot")))...)
}

// responseDomain decodes MutateDomainResponse's domain (field 1).
func responseDomain(t *testing.T, b []byte) string {
	t.Helper()
	if len(b) == 0 || b[0] != 1<<3|2 {
		t.Fatalf("response does not start with field 1: % x", b[:min(len(b), 8)])
	}
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || n != uint64(len(b)-1-k) { //nolint:gosec // a length, never negative.
		t.Fatalf("response length %d does not match the %d bytes received", n, len(b)-1-k)
	}
	return string(b[1+k:])
}

// TestPluginSocketServesMutateDomain starts the hook as a Plugin sidecar
// and calls it over a unix socket the way virt-launcher does: the service
// and method of KubeVirt's api.proto, a request in the proto's encoding.
func TestPluginSocketServesMutateDomain(t *testing.T) {
	dir, err := os.MkdirTemp("", "hook")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	socket := filepath.Join(dir, "macvirt-macos", "hook.sock")
	ctx, cancel := context.WithCancel(context.Background())
	var stderr bytes.Buffer
	done := make(chan int, 1)
	const emulator = "/opt/qemu/bin/qemu-system-x86_64"
	go func() {
		done <- Run(ctx, []string{"--plugin-socket", socket, "--emulator-path", emulator}, &bytes.Buffer{}, &stderr)
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("the hook exited %d after SIGTERM: %s", code, stderr.String())
		}
	}()
	// The socket appears when it is bound and is restricted a moment
	// later (its directory, 0750, keeps others out meanwhile): wait for
	// both, so a busy machine does not catch the moment between; a socket
	// never restricted fails after 30 s.
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := os.Stat(socket)
		if err == nil && info.Mode().Perm() == 0o660 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no socket of mode 0660 after 30 s (%v, %v): %s", info, err, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	call := func(req []byte) ([]byte, error) {
		callCtx, stop := context.WithTimeout(context.Background(), 30*time.Second)
		defer stop()
		var resp []byte
		err := conn.Invoke(callCtx, "/kubevirt.hooks.plugins.v1alpha1.DomainHookService/MutateDomain", &req, &resp)
		return resp, err
	}

	domain, err := os.ReadFile(filepath.Join("..", "hook", "testdata", "kubevirt", "default.domain.xml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := contracttest.Config()
	// A VMI's own emulator is ignored: the sidecar's flag wins.
	cfg.Emulator = "/usr/local/bin/my-own-qemu"
	vmi := vmiJSON(t, cfg)
	resp, err := call(mutateDomainRequest(domain, vmi))
	if err != nil {
		t.Fatalf("MutateDomain: %v", err)
	}
	cfg.Emulator = emulator
	want, err := hook.Apply(string(domain), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := responseDomain(t, resp); got != want || !strings.Contains(got, "<emulator>"+emulator+"</emulator>") {
		t.Errorf("MutateDomain returned a domain other than Apply's with the sidecar's emulator:\n%s", got)
	}

	// A VMI macvirt did not render is refused with the reason, and
	// virt-launcher fails the start with it.
	_, err = call(mutateDomainRequest(domain, []byte(`{"metadata":{"name":"m","namespace":"ns"}}`)))
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "has no macvirt.io/domain-hook annotation") {
		t.Errorf("a VMI without the annotation: %v, want InvalidArgument naming the annotation", err)
	}
	// So is a domain type other than libvirt.
	bad := append(field(1, []byte("cloud-hypervisor")), field(2, domain)...)
	_, err = call(append(bad, field(3, vmi)...))
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), `domain_type "cloud-hypervisor"`) {
		t.Errorf("another domain type: %v, want InvalidArgument naming it", err)
	}
}

func TestPluginSocketTakesNoOtherArguments(t *testing.T) {
	for args, want := range map[string]string{
		"--plugin-socket /nonexistent/x.sock --vmi {}":   "takes no other arguments",
		"--emulator-path /x --vmi {} --domain <domain/>": "--emulator-path goes with --plugin-socket",
	} {
		var stderr bytes.Buffer
		if code := Run(context.Background(), strings.Fields(args), &bytes.Buffer{}, &stderr); code != 2 || !strings.Contains(stderr.String(), want) {
			t.Errorf("%s: exit %d, stderr %q", args, code, stderr.String())
		}
	}
}
