// Package server is how the hook image serves internal/domainhook/hook's
// Apply: as the onDefineDomain command KubeVirt's sidecar-shim runs (Run),
// or as KubeVirt's plugin domain hook, the gRPC service kubevirt.hooks.plugins.v1alpha1.DomainHookService
// (pkg/hooks/plugins/v1alpha1/api.proto in kubevirt.io/kubevirt v1.9.0) on
// a unix socket, which virt-launcher calls with MutateDomain for every
// Plugin domain hook of the sidecar kind.
//
// The two messages are encoded by hand with protowire instead of generated
// code: they are four scalar fields, and the alternative is KubeVirt's
// module graph in macvirt's. The field numbers are the proto's; the tests
// speak the proto from an independent encoding, and hack/kubevirt/domainxml calls the
// server with KubeVirt's own generated client.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/macvirt/macvirt/internal/domainhook/hook"
)

// ServiceName and MethodName are the proto's names.
const (
	ServiceName = "kubevirt.hooks.plugins.v1alpha1.DomainHookService"
	MethodName  = "MutateDomain"
	// FullMethod is the gRPC path virt-launcher calls.
	FullMethod = "/" + ServiceName + "/" + MethodName
	// DomainTypeLibvirt is the only domain_type virt-launcher sends.
	DomainTypeLibvirt = "libvirt"
)

// MutateDomainRequest is the proto's MutateDomainRequest.
type MutateDomainRequest struct {
	DomainType        string // 1
	Domain            []byte // 2
	VMI               []byte // 3
	InvocationContext string // 4: SidecarContext.invocation_context (1)
}

// MutateDomainResponse is the proto's MutateDomainResponse.
type MutateDomainResponse struct {
	Domain []byte // 1
}

// Marshal encodes the request in the proto's wire format.
func (r *MutateDomainRequest) Marshal() []byte {
	var b []byte
	if r.DomainType != "" {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, r.DomainType)
	}
	if len(r.Domain) > 0 {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, r.Domain)
	}
	if len(r.VMI) > 0 {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendBytes(b, r.VMI)
	}
	if r.InvocationContext != "" {
		var ctx []byte
		ctx = protowire.AppendTag(ctx, 1, protowire.BytesType)
		ctx = protowire.AppendString(ctx, r.InvocationContext)
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendBytes(b, ctx)
	}
	return b
}

// Unmarshal decodes the request; unknown fields are skipped, as proto3 does.
func (r *MutateDomainRequest) Unmarshal(b []byte) error {
	*r = MutateDomainRequest{}
	return eachField(b, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			r.DomainType = string(v)
		case 2:
			r.Domain = append([]byte(nil), v...)
		case 3:
			r.VMI = append([]byte(nil), v...)
		case 4:
			return eachField(v, func(num protowire.Number, v []byte) error {
				if num == 1 {
					r.InvocationContext = string(v)
				}
				return nil
			})
		}
		return nil
	})
}

// Marshal encodes the response.
func (r *MutateDomainResponse) Marshal() []byte {
	if len(r.Domain) == 0 {
		return nil
	}
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	return protowire.AppendBytes(b, r.Domain)
}

// Unmarshal decodes the response.
func (r *MutateDomainResponse) Unmarshal(b []byte) error {
	*r = MutateDomainResponse{}
	return eachField(b, func(num protowire.Number, v []byte) error {
		if num == 1 {
			r.Domain = append([]byte(nil), v...)
		}
		return nil
	})
}

// eachField calls f with every length-delimited field of b and skips the
// others; a malformed message is an error.
func eachField(b []byte, f func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if err := f(num, v); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// message is what the codec encodes.
type message interface {
	Marshal() []byte
	Unmarshal([]byte) error
}

// Codec is gRPC's "proto" codec for the two messages.
type Codec struct{}

// Marshal implements encoding.Codec.
func (Codec) Marshal(v any) ([]byte, error) {
	m, ok := v.(message)
	if !ok {
		return nil, fmt.Errorf("domain hook server: cannot encode %T", v)
	}
	return m.Marshal(), nil
}

// Unmarshal implements encoding.Codec.
func (Codec) Unmarshal(data []byte, v any) error {
	m, ok := v.(message)
	if !ok {
		return fmt.Errorf("domain hook server: cannot decode into %T", v)
	}
	return m.Unmarshal(data)
}

// Name implements encoding.Codec: the content subtype virt-launcher's
// generated client sends.
func (Codec) Name() string { return "proto" }

var _ encoding.Codec = Codec{}

// Options are the operator's settings the sidecar is started with.
type Options struct {
	// EmulatorPath replaces the domain's <emulator> when set. A VMI's own
	// configuration never chooses the binary: its emulator is ignored.
	EmulatorPath string
}

// MutateDomain applies the VMI's macOS settings to the domain. An error
// is a gRPC status whose message names what is wrong; virt-launcher then
// fails the start (the Plugin's failure strategy is Fail).
func MutateDomain(req *MutateDomainRequest, opts Options) (*MutateDomainResponse, error) {
	if req.DomainType != "" && req.DomainType != DomainTypeLibvirt {
		return nil, status.Errorf(codes.InvalidArgument, "domain_type %q is not supported; macvirt's hook mutates libvirt domains", req.DomainType)
	}
	cfg, err := hook.ConfigFromVMI(req.VMI)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	cfg.Emulator = opts.EmulatorPath
	out, err := hook.Apply(string(req.Domain), cfg)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &MutateDomainResponse{Domain: []byte(out)}, nil
}

// mutateDomainHandler has grpc.MethodHandler's signature, whose context
// comes second.
func mutateDomainHandler(srv any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) { //nolint:revive // grpc.MethodHandler's signature.
	req := &MutateDomainRequest{}
	if err := dec(req); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "decoding MutateDomainRequest: %v", err)
	}
	opts, _ := srv.(Options)
	return MutateDomain(req, opts)
}

// serviceDesc registers the one method by hand.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: MethodName, Handler: mutateDomainHandler}},
	Metadata:    "pkg/hooks/plugins/v1alpha1/api.proto",
}

// NewServer is a gRPC server with the DomainHookService.
func NewServer(opts Options) *grpc.Server {
	// virt-launcher sends the whole VMI and domain, unbounded; gRPC's
	// default 4 MiB would refuse a large VMI.
	s := grpc.NewServer(grpc.ForceServerCodec(Codec{}), grpc.MaxRecvMsgSize(64<<20), grpc.MaxSendMsgSize(64<<20))
	s.RegisterService(&serviceDesc, opts)
	return s
}

// Listen opens the socket: a stale socket from an earlier run of the
// container is removed, and the socket is made connectable by the owner
// and group only.
func Listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("creating the socket directory: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing the stale socket %s: %w", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil { //nolint:gosec // a socket, owner and group only.
		_ = l.Close()
		return nil, fmt.Errorf("restricting %s: %w", path, err)
	}
	return l, nil
}
