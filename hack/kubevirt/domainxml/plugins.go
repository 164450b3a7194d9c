package main

// The -plugin-variants mode proves the KubeVirt Plugin transports of the
// macOS domain settings with KubeVirt's own code. For each variant of
// internal/domainhook/hook/testdata/plugin/variants.yaml it makes the VMI and the
// domain of the variant's rendering as the fixtures are made, gives the VMI
// the variant's annotations, and writes two domains:
//
//   - cel/<variant>.xml: virt-launcher's plugins.ApplyDomainHooks
//     (pkg/virt-launcher/virtwrap/plugins/pipeline.go) with the variant's
//     CEL Plugin, after virt-api's Plugin admission
//     (pkg/virt-api/webhooks/validating-webhook/admitters/plugin-admitter.go)
//     accepted that Plugin; the XML is the string virt-launcher defines.
//   - sidecar/<variant>.xml: the response of macvirt's hook binary, started
//     with --plugin-socket, to KubeVirt's generated DomainHookService
//     client sending what callSidecarHook
//     (pkg/virt-launcher/virtwrap/plugins/sidecar.go) sends, read back the
//     way sidecarHookApplier does.
//
// internal/domainhook/hook's tests compare both with the golden domains.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubevirtv1 "kubevirt.io/api/core/v1"
	pluginv1alpha1 "kubevirt.io/api/plugin/v1alpha1"
	"libvirt.org/go/libvirtxml"
	"sigs.k8s.io/yaml"

	pluginsv1alpha1 "kubevirt.io/kubevirt/pkg/hooks/plugins/v1alpha1"
	grpcutil "kubevirt.io/kubevirt/pkg/util/net/grpc"
	"kubevirt.io/kubevirt/pkg/virt-api/webhooks/validating-webhook/admitters"
	"kubevirt.io/kubevirt/pkg/virt-config/featuregate"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/converter/translate"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/plugins"
)

type pluginVariants struct {
	Plugins  map[string]*pluginv1alpha1.Plugin `json:"plugins"`
	Variants []struct {
		Name        string            `json:"name"`
		Fixture     string            `json:"fixture"`
		Annotations map[string]string `json:"annotations"`
		Plugin      string            `json:"plugin"`
		SidecarArgs []string          `json:"sidecarArgs"`
	} `json:"variants"`
	Refusals []struct {
		Name        string            `json:"name"`
		Fixture     string            `json:"fixture"`
		Annotations map[string]string `json:"annotations"`
		Want        string            `json:"want"`
	} `json:"refusals"`
}

// refusal is what KubeVirt's pipeline answered a refusal case.
type refusal struct {
	Name  string `json:"name"`
	Error string `json:"error"`
}

// macvirtAnnotation says whether the renderer wrote an annotation for the
// domain settings; the variant's replace them.
func macvirtAnnotation(key string) bool {
	return strings.HasPrefix(key, "domain.macvirt.io/") || key == "macvirt.io/domain-hook"
}

func runPlugins(variantsPath, renderDir, out, hookBinary string) error {
	raw, err := os.ReadFile(variantsPath)
	if err != nil {
		return err
	}
	var file pluginVariants
	if err := yaml.UnmarshalStrict(raw, &file); err != nil {
		return fmt.Errorf("%s: %w", variantsPath, err)
	}
	kubevirtVersion, err := moduleVersion(kubevirtModule)
	if err != nil {
		return err
	}
	if err := admitPlugins(file.Plugins); err != nil {
		return err
	}
	ovmfDir, err := fakeOVMFDirectory()
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(ovmfDir) }()
	// One sidecar per set of arguments (the operator's emulator path).
	sidecars := map[string]*hookSidecar{}
	defer func() {
		for _, s := range sidecars {
			s.stop()
		}
	}()

	stamp := fmt.Sprintf("(variants sha256 %x)", sha256.Sum256(raw))
	g := &generator{kubevirtVersion: kubevirtVersion, ovmfDir: ovmfDir}
	for _, dir := range []string{"cel", "sidecar"} {
		if err := os.MkdirAll(filepath.Join(out, dir), 0o755); err != nil {
			return err
		}
	}
	for _, v := range file.Variants {
		plugin, ok := file.Plugins[v.Plugin]
		if !ok {
			return fmt.Errorf("variant %s names Plugin %q, which %s lacks", v.Name, v.Plugin, variantsPath)
		}
		vmi, spec, err := g.variantDomain(renderDir, v.Fixture, v.Annotations)
		if err != nil {
			return fmt.Errorf("variant %s: %w", v.Name, err)
		}

		// CEL: virt-launcher's pipeline, as SetDomainSpecStrWithHooks calls it.
		_, celXML, err := plugins.ApplyDomainHooks([]pluginv1alpha1.Plugin{*plugin}, vmi, spec.DeepCopy(), pluginv1alpha1.InvocationContextBoot)
		if err != nil {
			return fmt.Errorf("variant %s: KubeVirt's ApplyDomainHooks: %w", v.Name, err)
		}
		header := fmt.Sprintf("<!-- Code generated %s by hack/kubevirt/domainxml: %s %s's plugins.ApplyDomainHooks with Plugin %q of %s, on the domain of %s. DO NOT EDIT. -->\n",
			stamp, kubevirtModule, kubevirtVersion, v.Plugin, filepath.Base(variantsPath), v.Fixture)
		if err := os.WriteFile(filepath.Join(out, "cel", v.Name+".xml"), []byte(header+celXML+"\n"), 0o644); err != nil {
			return err
		}

		// Sidecar: KubeVirt's client against the hook binary.
		if len(v.SidecarArgs) == 0 {
			return fmt.Errorf("variant %s has no sidecarArgs: %s is from an older macvirt; run make golden", v.Name, variantsPath)
		}
		key := strings.Join(v.SidecarArgs, " ")
		sidecar, ok := sidecars[key]
		if !ok {
			if sidecar, err = startSidecar(hookBinary, v.SidecarArgs); err != nil {
				return err
			}
			sidecars[key] = sidecar
		}
		sidecarXML, err := sidecar.mutate(vmi, spec.DeepCopy())
		if err != nil {
			return fmt.Errorf("variant %s: MutateDomain: %w", v.Name, err)
		}
		// (Its arguments are not named here: an XML comment may not hold "--".)
		header = fmt.Sprintf("<!-- Code generated %s by hack/kubevirt/domainxml: macvirt's hook binary, started with the variant's sidecarArgs, answering %s %s's DomainHookService client, on the domain of %s. DO NOT EDIT. -->\n",
			stamp, kubevirtModule, kubevirtVersion, v.Fixture)
		if err := os.WriteFile(filepath.Join(out, "sidecar", v.Name+".xml"), []byte(header+sidecarXML+"\n"), 0o644); err != nil {
			return err
		}
	}
	// The refusals: KubeVirt's pipeline with the default CEL Plugin on a VMI
	// with one wrong value; its error, or "accepted", for each.
	var refused []refusal
	for _, r := range file.Refusals {
		vmi, spec, err := g.variantDomain(renderDir, r.Fixture, r.Annotations)
		if err != nil {
			return fmt.Errorf("refusal %s: %w", r.Name, err)
		}
		result := "accepted"
		if _, _, err := plugins.ApplyDomainHooks([]pluginv1alpha1.Plugin{*file.Plugins["default"]}, vmi, spec, pluginv1alpha1.InvocationContextBoot); err != nil {
			result = err.Error()
		}
		refused = append(refused, refusal{Name: r.Name, Error: result})
	}
	data, err := yaml.Marshal(refused)
	if err != nil {
		return err
	}
	header := fmt.Sprintf("# Code generated %s by hack/kubevirt/domainxml: what %s %s's plugins.ApplyDomainHooks answered each refusal of %s. DO NOT EDIT.\n",
		stamp, kubevirtModule, kubevirtVersion, filepath.Base(variantsPath))
	return os.WriteFile(filepath.Join(out, "refusals.yaml"), append([]byte(header), data...), 0o644)
}

// variantDomain makes the VMI and the domain of a rendering as the fixtures
// are made, and gives the VMI the variant's annotations in place of the
// renderer's.
func (g *generator) variantDomain(renderDir, fixture string, annotations map[string]string) (*kubevirtv1.VirtualMachineInstance, *api.DomainSpec, error) {
	in, err := readInput(filepath.Join(renderDir, fixture+".yaml"))
	if err != nil {
		return nil, nil, err
	}
	clusterConfig, err := newClusterConfig()
	if err != nil {
		return nil, nil, err
	}
	vmi, err := newVMI(in, clusterConfig)
	if err != nil {
		return nil, nil, err
	}
	spec, err := g.domainSpec(vmi, in, clusterConfig)
	if err != nil {
		return nil, nil, err
	}
	for k := range vmi.Annotations {
		if macvirtAnnotation(k) {
			delete(vmi.Annotations, k)
		}
	}
	for k, val := range annotations {
		vmi.Annotations[k] = val
	}
	return vmi, spec, nil
}

// admitPlugins runs virt-api's Plugin admission, with the Plugins gate on,
// on every Plugin: it compiles each CEL condition and mutation with
// virt-launcher's evaluator and checks a mutation returns a Domain.
func admitPlugins(ps map[string]*pluginv1alpha1.Plugin) error {
	clusterConfig, err := newClusterConfig(featuregate.PluginsGate)
	if err != nil {
		return err
	}
	admitter := admitters.NewPluginAdmitter(clusterConfig)
	for name, p := range ps {
		obj, err := json.Marshal(p)
		if err != nil {
			return err
		}
		resp := admitter.Admit(context.Background(), &admissionv1.AdmissionReview{Request: &admissionv1.AdmissionRequest{
			Operation: admissionv1.Create,
			Resource:  metav1.GroupVersionResource{Group: "plugin.kubevirt.io", Version: "v1alpha1", Resource: "plugins"},
			Object:    runtime.RawExtension{Raw: obj},
		}})
		if !resp.Allowed {
			return fmt.Errorf("virt-api refuses Plugin %q: %s", name, resp.Result.Message)
		}
	}
	return nil
}

type hookSidecar struct {
	dir    string
	socket string
	cmd    *exec.Cmd
	stderr *bytes.Buffer
}

// startSidecar runs the hook binary as the Plugin sidecar does and waits
// for its socket, as waitForSidecarSocket does.
func startSidecar(binary string, args []string) (*hookSidecar, error) {
	dir, err := os.MkdirTemp("", "domainxml-plugin")
	if err != nil {
		return nil, err
	}
	s := &hookSidecar{dir: dir, socket: filepath.Join(dir, "macvirt-macos", "hook.sock"), stderr: &bytes.Buffer{}}
	// The arguments the Plugin's sidecar gets, with a socket of its own.
	args = append([]string(nil), args...)
	for i := range args {
		if i > 0 && args[i-1] == "--plugin-socket" {
			args[i] = s.socket
		}
	}
	s.cmd = exec.Command(binary, args...) //nolint:gosec // the binary make golden built.
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("starting %s: %w", binary, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(s.socket); err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("the hook binary made no socket in 30 s: %s", s.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *hookSidecar) stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
	_ = os.RemoveAll(s.dir)
}

// mutate sends what virt-launcher's sidecarHookApplier and callSidecarHook
// send, with their 5 s dial and the Plugin's 10 s call timeout, and reads
// the answer back as they do.
func (s *hookSidecar) mutate(vmi *kubevirtv1.VirtualMachineInstance, spec *api.DomainSpec) (string, error) {
	domain, err := translate.ToLibvirtDomain(spec)
	if err != nil {
		return "", err
	}
	domainXML, err := domain.Marshal()
	if err != nil {
		return "", err
	}
	vmiJSON, err := json.Marshal(vmi)
	if err != nil {
		return "", err
	}
	conn, err := grpcutil.DialSocketWithTimeout(s.socket, 5)
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := pluginsv1alpha1.NewDomainHookServiceClient(conn).MutateDomain(ctx, &pluginsv1alpha1.MutateDomainRequest{
		DomainType:     "libvirt",
		Domain:         []byte(domainXML),
		Vmi:            vmiJSON,
		SidecarContext: &pluginsv1alpha1.SidecarContext{InvocationContext: string(pluginv1alpha1.InvocationContextBoot)},
	})
	if err != nil {
		return "", fmt.Errorf("%w (hook stderr: %s)", err, s.stderr.String())
	}
	mutated := &libvirtxml.Domain{}
	if err := mutated.Unmarshal(string(resp.Domain)); err != nil {
		return "", fmt.Errorf("unmarshal sidecar response: %w", err)
	}
	return mutated.Marshal()
}
