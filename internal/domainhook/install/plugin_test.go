package install

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/domainhook/contract"
)

// The NIC hook rebuilds each interface field by field; a field it does not
// name would be dropped from every Mac's interface.
func TestTheNICHookKeepsEveryInterfaceField(t *testing.T) {
	typ := reflect.TypeFor[libvirtxml.DomainInterface]()
	var want []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		switch f.Name {
		case "XMLName", "Model", "Driver": // the element's name; what the hook sets; virtio's options, dropped with the model.
			continue
		}
		want = append(want, f.Name)
		if direct := f.Type.Kind() != reflect.Pointer; direct != directFields[f.Name] {
			t.Errorf("field %s: pointer=%v, but directFields says %v", f.Name, !direct, directFields[f.Name])
		}
	}
	got := slices.Clone(interfaceFields)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("interfaceFields = %v, want %v", got, want)
	}
}

func TestTransports(t *testing.T) {
	for _, tc := range []struct {
		flag   string
		served bool
		want   contract.Transport
	}{
		{"auto", true, contract.TransportPluginCEL},
		{"auto", false, contract.TransportSidecar},
		{"plugin-cel", false, contract.TransportPluginCEL},
		{"plugin-sidecar", true, contract.TransportPluginSidecar},
		{"sidecar", true, contract.TransportSidecar},
	} {
		tr, err := contract.ParseTransport(tc.flag)
		if err != nil {
			t.Fatal(err)
		}
		if got := tr.Resolve(tc.served); got != tc.want {
			t.Errorf("%s with the Plugin kind served=%v resolves to %s, want %s", tc.flag, tc.served, got, tc.want)
		}
	}
	if _, err := contract.ParseTransport("cel"); err == nil || !strings.Contains(err.Error(), "auto, plugin-cel, plugin-sidecar, sidecar") {
		t.Errorf("an unknown transport: %v, want an error listing the transports", err)
	}
}

func TestCELPluginSelectsMacvirtVMIsAndOwnsTheEmulatorPath(t *testing.T) {
	p := CELPlugin(Options{})
	if !strings.Contains(p.Spec.Condition, `"`+contract.Annotation+`" in`) || p.Spec.FailureStrategy != "Fail" {
		t.Errorf("condition %q, failure strategy %q", p.Spec.Condition, p.Spec.FailureStrategy)
	}
	for _, h := range p.Spec.DomainHooks {
		if h.CEL == nil || h.Sidecar != nil || strings.Contains(h.CEL.Expression, "<emulator>") {
			t.Errorf("hook %+v", h)
		}
	}
	with := CELPlugin(Options{EmulatorPath: "/opt/qemu/bin/qemu-system-x86_64"})
	if len(with.Spec.DomainHooks) != len(p.Spec.DomainHooks)+1 ||
		!strings.Contains(with.Spec.DomainHooks[len(with.Spec.DomainHooks)-1].CEL.Expression, `Emulator: "/opt/qemu/bin/qemu-system-x86_64"`) {
		t.Errorf("the emulator override is not the Plugin's last hook: %+v", with.Spec.DomainHooks)
	}
	// A VMI cannot choose the emulator: no hook reads one from it.
	for _, h := range with.Spec.DomainHooks {
		if strings.Contains(h.CEL.Expression, "Emulator: vmi") {
			t.Errorf("a hook takes the emulator from the VMI: %s", h.CEL.Expression)
		}
	}
}

func TestSidecarPluginAndItsInjectionPolicy(t *testing.T) {
	p := SidecarPlugin()
	if len(p.Spec.DomainHooks) != 1 || p.Spec.DomainHooks[0].Sidecar == nil ||
		p.Spec.DomainHooks[0].Sidecar.SocketPath != "/var/run/kubevirt-plugin/macvirt-macos/hook.sock" ||
		p.Spec.DomainHooks[0].Timeout.Duration != SidecarTimeout || p.Spec.MutatingAdmissionPolicies[0].Name != InjectionPolicyName {
		t.Errorf("sidecar Plugin %+v", p.Spec)
	}
	// KubeVirt's kubevirt-plugin-socket-path policy: under the plugin's
	// directory, ending in .sock, at most 108 characters.
	if s := SocketPath; !strings.HasPrefix(s, "/var/run/kubevirt-plugin/"+p.Name+"/") || !strings.HasSuffix(s, ".sock") || len(s) > 108 {
		t.Errorf("socket path %s", s)
	}
	if _, err := InjectionPolicy(Options{}); err == nil || !strings.Contains(err.Error(), "--hook-image") {
		t.Errorf("no image: %v", err)
	}
	pol, err := InjectionPolicy(Options{HookImage: "registry.example/macvirt-domain-hook@sha256:0123"})
	if err != nil {
		t.Fatal(err)
	}
	patch := pol.Spec.Mutations[0].JSONPatch.Expression
	for _, want := range []string{`"registry.example/macvirt-domain-hook@sha256:0123"`, `subPath: "macvirt-macos"`,
		`mountPath: "/var/run/kubevirt-plugin/macvirt-macos/"`, `"--plugin-socket", "/var/run/kubevirt-plugin/macvirt-macos/hook.sock"`,
		`runAsUser: 107`} {
		if !strings.Contains(patch, want) {
			t.Errorf("the injected container lacks %s:\n%s", want, patch)
		}
	}
	var conds []string
	for _, c := range pol.Spec.MatchConditions {
		conds = append(conds, c.Expression)
	}
	if all := strings.Join(conds, " "); !strings.Contains(all, `"virt-launcher"`) || !strings.Contains(all, macvirtv1alpha1.LabelMachine) {
		t.Errorf("match conditions %v do not select macvirt's virt-launcher pods", conds)
	}
	if b := InjectionPolicyBinding(); b.Spec.PolicyName != pol.Name {
		t.Errorf("binding names %s", b.Spec.PolicyName)
	}
}
