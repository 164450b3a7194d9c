// Command domainxml writes, for each KubeVirt VirtualMachine given, the
// libvirt domain XML that KubeVirt's virt-launcher hands to a hook sidecar's
// OnDefineDomain when the VirtualMachine starts. The XML files are the input
// fixtures of the domain-hook tests (internal/domainhook/hook/testdata/kubevirt).
//
// Usage, from hack/kubevirt/domainxml (generate.sh runs it over internal/render/testdata):
//
//	go run . -out DIR [-base DIR] VM.yaml...
//
// Each input file holds one VirtualMachine and, optionally, the DataVolumes
// and PersistentVolumeClaims its volumes use (other documents are ignored).
// The output for dir/name.yaml is DIR/name.domain.xml; its first line names
// the input relative to -base (default: the input's Git work tree).
//
// The program follows KubeVirt's own path from a VirtualMachine to the
// domain, calling KubeVirt's code (the kubevirt.io/kubevirt version in
// go.mod) at each step:
//
//  1. virt-api's VirtualMachine defaults (architecture, machine type);
//  2. virt-controller's VirtualMachineInstance from the VM template
//     (SetupVMIFromVM), with a UID derived from the VM's namespace and name;
//  3. virt-api's VirtualMachineInstance mutations on create, which apply
//     SetDefaultVirtualMachineInstance;
//  4. virt-controller's volume status: every DataVolume or PVC volume is a
//     filesystem-mode claim (unless its document says volumeMode: Block)
//     whose size is the storage request of its document;
//  5. virt-handler's replacement of filesystem claims by host disks
//     (disk.img on the mounted claim), and its VM options (cluster SMBIOS
//     defaults, memory balloon period, display for EFI guests);
//  6. virt-launcher's converter context, on an amd64 node with /dev/kvm and
//     the OVMF files of the virt-launcher image, the conversion, the domain
//     defaults, and the pre-start changes: tap interface target, MAC and MTU
//     from the pod interface, and disk cache and I/O modes for a claim that
//     supports direct I/O and is not preallocated;
//  7. the XML marshalling of virt-launcher's hook manager.
//
// Not reproduced: anything that needs a running libvirt. On q35 machines
// virt-launcher first defines the domain with placeholder interfaces to
// reserve PCIe ports for hotplug (calling the hooks with that XML), then
// calls them again with the devices libvirt returned (with PCI addresses);
// the output here is the domain before both steps.
//
// The cluster is KubeVirt's default configuration (a KubeVirt CR with an empty
// spec). The pod interface has a MAC derived from the VM's namespace and name
// and an MTU of 1500. The output depends only on the input, so it can be
// regenerated and compared.
package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/google/uuid"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/cache"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/log"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/yaml"

	"kubevirt.io/kubevirt/pkg/defaults"
	cmdv1 "kubevirt.io/kubevirt/pkg/handler-launcher-com/cmd/v1"
	hostdisk "kubevirt.io/kubevirt/pkg/host-disk"
	netcache "kubevirt.io/kubevirt/pkg/network/cache"
	"kubevirt.io/kubevirt/pkg/network/domainspec"
	"kubevirt.io/kubevirt/pkg/network/link"
	netvmispec "kubevirt.io/kubevirt/pkg/network/vmispec"
	storagetypes "kubevirt.io/kubevirt/pkg/storage/types"
	kutil "kubevirt.io/kubevirt/pkg/util"
	"kubevirt.io/kubevirt/pkg/virt-api/webhooks/mutating-webhook/mutators"
	virtconfig "kubevirt.io/kubevirt/pkg/virt-config"
	vmcontroller "kubevirt.io/kubevirt/pkg/virt-controller/watch/vm"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/converter"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/converter/arch"
	convertertypes "kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/converter/types"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/efi"
)

const (
	kubevirtModule = "kubevirt.io/kubevirt"

	// The node the VirtualMachine runs on.
	nodeArch = "amd64"

	// The KubeVirt CR the cluster configuration is read from.
	kubevirtNamespace = "kubevirt"
	kubevirtName      = "kubevirt"

	// The pod interfaces' MTU.
	podMTU = 1500

	// CDI's default filesystem overhead, recorded in the volume status.
	filesystemOverhead = "0.055"
)

// ovmfFiles are the firmware files of the virt-launcher image, in the
// directory virt-launcher is given (virt-config's DefaultARCHOVMFPath).
var ovmfFiles = []string{
	efi.EFICode,
	efi.EFIVars,
	efi.EFICodeSecureBoot,
	efi.EFIVarsSecureBoot,
}

// uidNamespace is the name space of the version 5 UUIDs given to the
// VirtualMachineInstances.
var uidNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/macvirt/macvirt/hack/crdgen/domainxml"))

func main() {
	out := flag.String("out", "", "directory to write the domain XML files into (required)")
	base := flag.String("base", "", "directory the input paths named in the generated files are relative to (default: the Git work tree of each input)")
	launcherDir := flag.String("launcher", "", "directory to write, per input, what virt-api's admission and virt-controller's virt-launcher pod say (optional)")
	variants := flag.String("plugin-variants", "", "instead: apply the Plugin of each variant in this file (internal/domainhook/hook/testdata/plugin/variants.yaml) to the domain of its rendering, see plugins.go")
	renderDir := flag.String("renderings", "", "with -plugin-variants: the directory of the renderings the variants name")
	hookBinary := flag.String("hook-binary", "", "with -plugin-variants: macvirt's hook binary, run as the Plugin's sidecar")
	flag.Usage = func() {
		_, _ = fmt.Fprintln(flag.CommandLine.Output(), "usage: domainxml -out DIR [-base DIR] [-launcher DIR] VM.yaml...\n"+
			"       domainxml -plugin-variants FILE -renderings DIR -hook-binary FILE -out DIR")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *variants != "" {
		if *out == "" || *renderDir == "" || *hookBinary == "" || flag.NArg() > 0 {
			flag.Usage()
			os.Exit(2)
		}
		if err := runPlugins(*variants, *renderDir, *out, *hookBinary); err != nil {
			fmt.Fprintln(os.Stderr, "domainxml:", err)
			os.Exit(1)
		}
		return
	}
	if *out == "" || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*out, *base, *launcherDir, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "domainxml:", err)
		os.Exit(1)
	}
}

func run(out, base, launcherDir string, inputs []string) error {
	kubevirtVersion, err := moduleVersion(kubevirtModule)
	if err != nil {
		return err
	}
	if base != "" {
		if base, err = filepath.Abs(base); err != nil {
			return err
		}
	}
	ovmfDir, err := fakeOVMFDirectory()
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(ovmfDir) }()

	// KubeVirt reports the problems it tolerates through its logger: keep
	// them, drop the informational messages, and fail if there are any.
	var kvLog bytes.Buffer
	log.Log.SetIOWriter(&kvLog)
	if err := log.Log.SetLogLevel(log.WARNING); err != nil {
		return err
	}

	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	g := &generator{kubevirtVersion: kubevirtVersion, ovmfDir: ovmfDir}
	for _, input := range inputs {
		kvLog.Reset()
		data, err := g.generate(input, base)
		if err == nil && kvLog.Len() > 0 {
			err = fmt.Errorf("KubeVirt logged warnings or errors:\n%s", kvLog.String())
		}
		if err != nil {
			return fmt.Errorf("%s: %w", input, err)
		}
		name := strings.TrimSuffix(filepath.Base(input), filepath.Ext(input)) + ".domain.xml"
		if err := os.WriteFile(filepath.Join(out, name), data, 0o644); err != nil {
			return fmt.Errorf("%s: %w", input, err)
		}
		if launcherDir == "" {
			continue
		}
		in, err := readInput(input)
		if err == nil {
			name = strings.TrimSuffix(filepath.Base(input), filepath.Ext(input)) + ".launcher.yaml"
			err = g.launcher(in, input, base, filepath.Join(launcherDir, name))
		}
		if err == nil && kvLog.Len() > 0 {
			err = fmt.Errorf("KubeVirt logged warnings or errors:\n%s", kvLog.String())
		}
		if err != nil {
			return fmt.Errorf("%s: %w", input, err)
		}
	}
	return nil
}

// moduleVersion returns the version of a module the program is built with.
func moduleVersion(module string) (string, error) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "", errors.New("no build information in the binary")
	}
	for _, dep := range info.Deps {
		if dep.Path == module {
			if dep.Replace != nil {
				return dep.Replace.Version, nil
			}
			return dep.Version, nil
		}
	}
	return "", fmt.Errorf("module %s is not in the build information", module)
}

// shownPath returns the path of an input file as the generated file names
// it: relative to base if given, else to the Git work tree that holds the
// input, else its base name.
func shownPath(input, base string) (string, error) {
	abs, err := filepath.Abs(input)
	if err != nil {
		return "", err
	}
	if base == "" {
		base = workTree(filepath.Dir(abs))
	}
	if base != "" {
		if rel, err := filepath.Rel(base, abs); err == nil && filepath.IsLocal(rel) {
			return filepath.ToSlash(rel), nil
		}
	}
	return filepath.Base(abs), nil
}

// workTree returns the closest directory at or above dir that holds .git,
// or "".
func workTree(dir string) string {
	for {
		if _, err := os.Stat(filepath.Join(dir, ".git")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// fakeOVMFDirectory returns a new temporary directory holding empty files
// named as the firmware files of the virt-launcher image, so that KubeVirt's
// firmware detection can run; the paths it picks are moved to the image's
// directory afterwards.
func fakeOVMFDirectory() (string, error) {
	dir, err := os.MkdirTemp("", "domainxml-ovmf-")
	if err != nil {
		return "", err
	}
	for _, name := range ovmfFiles {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			_ = os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

type generator struct {
	kubevirtVersion string
	ovmfDir         string
}

// input is what one input file holds.
type input struct {
	vm *kubevirtv1.VirtualMachine
	// claims holds the DataVolumes and PersistentVolumeClaims by name.
	claims map[string]claim
}

// claim is what the volume status needs to know about a DataVolume or a
// PersistentVolumeClaim.
type claim struct {
	accessModes []corev1.PersistentVolumeAccessMode
	volumeMode  *corev1.PersistentVolumeMode
	size        resource.Quantity
}

func (g *generator) generate(inputPath, base string) ([]byte, error) {
	in, err := readInput(inputPath)
	if err != nil {
		return nil, err
	}
	clusterConfig, err := newClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("cluster configuration: %w", err)
	}
	vmi, err := newVMI(in, clusterConfig)
	if err != nil {
		return nil, err
	}
	spec, err := g.domainSpec(vmi, in, clusterConfig)
	if err != nil {
		return nil, err
	}

	// As the hook manager of virt-launcher marshals the domain for
	// OnDefineDomain.
	domainXML, err := xml.MarshalIndent(spec, "", "\t")
	if err != nil {
		return nil, fmt.Errorf("marshalling the domain: %w", err)
	}

	shown, err := shownPath(inputPath, base)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(inputPath)
	if err != nil {
		return nil, err
	}
	// The input's hash lets the domain hook's tests tell a fixture made from
	// an older rendering.
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "<!-- Code generated from %s (sha256 %x) by hack/kubevirt/domainxml with %s %s's converter. DO NOT EDIT. -->\n",
		shown, sha256.Sum256(raw), kubevirtModule, g.kubevirtVersion)
	buf.Write(domainXML)
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}

// readInput reads the VirtualMachine and the claims of a multi-document YAML
// file.
func readInput(inputPath string) (*input, error) {
	f, err := os.Open(inputPath)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()

	in := &input{claims: map[string]claim{}}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(f))
	for n := 1; ; n++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		switch meta.GroupVersionKind() {
		case kubevirtv1.VirtualMachineGroupVersionKind:
			if in.vm != nil {
				return nil, fmt.Errorf("document %d: a second VirtualMachine", n)
			}
			in.vm = &kubevirtv1.VirtualMachine{}
			if err := yaml.UnmarshalStrict(doc, in.vm); err != nil {
				return nil, fmt.Errorf("document %d: VirtualMachine: %w", n, err)
			}
		case cdiv1.SchemeGroupVersion.WithKind("DataVolume"):
			dv := &cdiv1.DataVolume{}
			if err := yaml.UnmarshalStrict(doc, dv); err != nil {
				return nil, fmt.Errorf("document %d: DataVolume: %w", n, err)
			}
			c, err := dataVolumeClaim(dv)
			if err != nil {
				return nil, fmt.Errorf("DataVolume %s: %w", dv.Name, err)
			}
			in.claims[dv.Name] = c
		case corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"):
			pvc := &corev1.PersistentVolumeClaim{}
			if err := yaml.UnmarshalStrict(doc, pvc); err != nil {
				return nil, fmt.Errorf("document %d: PersistentVolumeClaim: %w", n, err)
			}
			size, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
			if !ok {
				return nil, fmt.Errorf("PersistentVolumeClaim %s requests no storage", pvc.Name)
			}
			in.claims[pvc.Name] = claim{accessModes: pvc.Spec.AccessModes, volumeMode: pvc.Spec.VolumeMode, size: size}
		}
	}
	if in.vm == nil {
		return nil, errors.New("no VirtualMachine in the file")
	}
	if in.vm.Spec.Template == nil {
		return nil, fmt.Errorf("VirtualMachine %s has no template", in.vm.Name)
	}
	return in, nil
}

// dataVolumeClaim returns the claim CDI makes for a DataVolume. Without
// access modes the claim is ReadWriteOnce, as with most storage profiles.
func dataVolumeClaim(dv *cdiv1.DataVolume) (claim, error) {
	var c claim
	var requests corev1.ResourceList
	switch {
	case dv.Spec.Storage != nil:
		c.accessModes = dv.Spec.Storage.AccessModes
		c.volumeMode = dv.Spec.Storage.VolumeMode
		requests = dv.Spec.Storage.Resources.Requests
	case dv.Spec.PVC != nil:
		c.accessModes = dv.Spec.PVC.AccessModes
		c.volumeMode = dv.Spec.PVC.VolumeMode
		requests = dv.Spec.PVC.Resources.Requests
	default:
		return c, errors.New("neither spec.storage nor spec.pvc is set")
	}
	size, ok := requests[corev1.ResourceStorage]
	if !ok {
		return c, errors.New("no storage request")
	}
	c.size = size
	if len(c.accessModes) == 0 {
		c.accessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	return c, nil
}

// newClusterConfig returns the configuration of a cluster whose KubeVirt CR
// has an empty spec.
func newClusterConfig(featureGates ...string) (*virtconfig.ClusterConfig, error) {
	kv := &kubevirtv1.KubeVirt{
		ObjectMeta: metav1.ObjectMeta{
			Name:            kubevirtName,
			Namespace:       kubevirtNamespace,
			ResourceVersion: "1",
		},
		Status: kubevirtv1.KubeVirtStatus{
			Phase:               kubevirtv1.KubeVirtPhaseDeployed,
			DefaultArchitecture: nodeArch,
		},
	}
	if len(featureGates) > 0 {
		kv.Spec.Configuration.DeveloperConfiguration = &kubevirtv1.DeveloperConfiguration{FeatureGates: featureGates}
	}
	crdInformer := newStoreInformer(&extv1.CustomResourceDefinition{})
	kvInformer := newStoreInformer(&kubevirtv1.KubeVirt{})
	if err := kvInformer.GetStore().Add(kv); err != nil {
		return nil, err
	}
	return virtconfig.NewClusterConfigWithCPUArch(crdInformer, kvInformer, kubevirtNamespace, nodeArch)
}

// newStoreInformer returns an informer that is never started, used for its
// store only.
func newStoreInformer(obj runtime.Object) cache.SharedIndexInformer {
	return cache.NewSharedIndexInformer(&cache.ListWatch{}, obj, 0, cache.Indexers{})
}

// newVMI returns the VirtualMachineInstance of the VirtualMachine as
// virt-handler hands it to virt-launcher.
func newVMI(in *input, clusterConfig *virtconfig.ClusterConfig) (*kubevirtv1.VirtualMachineInstance, error) {
	vm := in.vm.DeepCopy()

	// virt-api, VirtualMachine creation. The architecture of a DataSource
	// behind a DataVolume template cannot be looked up here: take the
	// cluster's default.
	if vm.Spec.Template.Spec.Architecture == "" {
		vm.Spec.Template.Spec.Architecture = clusterConfig.GetDefaultArchitecture()
	}
	defaults.SetVirtualMachineDefaults(vm, clusterConfig, nil)

	// virt-controller, VirtualMachine start; then the API server gives the
	// object a UID.
	vmi := vmcontroller.SetupVMIFromVM(vm)
	vmi.UID = types.UID(uuid.NewSHA1(uidNamespace, []byte(vm.Namespace+"/"+vm.Name)).String())

	// virt-api, VirtualMachineInstance creation.
	if err := mutators.ApplyNewVMIMutations(vmi, clusterConfig); err != nil {
		return nil, fmt.Errorf("VirtualMachineInstance defaults: %w", err)
	}
	vmi.Finalizers = append(vmi.Finalizers, kubevirtv1.VirtualMachineInstanceFinalizer)

	// virt-controller: volume status, the launcher pod is scheduled.
	for _, volume := range vmi.Spec.Volumes {
		status := kubevirtv1.VolumeStatus{Name: volume.Name}
		if volume.PersistentVolumeClaim != nil || volume.DataVolume != nil {
			name := storagetypes.PVCNameFromVirtVolume(&volume)
			c, ok := in.claims[name]
			if !ok {
				return nil, fmt.Errorf("volume %s: claim %s is not in the file", volume.Name, name)
			}
			overhead := kubevirtv1.Percent(filesystemOverhead)
			status.PersistentVolumeClaimInfo = &kubevirtv1.PersistentVolumeClaimInfo{
				ClaimName:          name,
				AccessModes:        c.accessModes,
				VolumeMode:         c.volumeMode,
				Capacity:           corev1.ResourceList{corev1.ResourceStorage: c.size},
				Requests:           corev1.ResourceList{corev1.ResourceStorage: c.size},
				FilesystemOverhead: &overhead,
			}
		}
		vmi.Status.VolumeStatus = append(vmi.Status.VolumeStatus, status)
	}
	vmi.Status.Phase = kubevirtv1.Scheduled

	// virt-handler: filesystem claims become host disks.
	if err := hostdisk.ReplacePVCByHostDisk(vmi); err != nil {
		return nil, fmt.Errorf("host disks: %w", err)
	}
	return vmi, nil
}

// domainSpec converts the VirtualMachineInstance as virt-launcher does before
// it defines the domain.
func (g *generator) domainSpec(vmi *kubevirtv1.VirtualMachineInstance, in *input, clusterConfig *virtconfig.ClusterConfig) (*api.DomainSpec, error) {
	c, err := g.converterContext(vmi, in, clusterConfig)
	if err != nil {
		return nil, err
	}
	domain := &api.Domain{}
	if err := converter.Convert_v1_VirtualMachineInstance_To_api_Domain(vmi, domain, c); err != nil {
		return nil, fmt.Errorf("conversion: %w", err)
	}
	api.NewDefaulter(c.Architecture.GetArchitecture()).SetObjectDefaults_Domain(domain)

	// Pre-start: the tap interfaces get the pod interface's MAC and MTU.
	handler := newPodNetworkHandler(vmi)
	for _, network := range netvmispec.FilterNetworksByInterfaces(vmi.Spec.Networks, vmi.Spec.Domain.Devices.Interfaces) {
		iface := netvmispec.LookupInterfaceByName(vmi.Spec.Domain.Devices.Interfaces, network.Name)
		if iface == nil || iface.State == kubevirtv1.InterfaceStateAbsent || c.DomainAttachmentByInterfaceName[iface.Name] != string(kubevirtv1.Tap) {
			continue
		}
		podIface, err := link.DiscoverByNetwork(handler, vmi.Spec.Networks, network, vmi.Status.Interfaces)
		if err != nil || podIface == nil {
			return nil, fmt.Errorf("pod interface of network %s: %v", network.Name, err)
		}
		gen := domainspec.NewTapLibvirtSpecGenerator(iface, network, domain, podIface.Attrs().Name, handler)
		if err := gen.Generate(); err != nil {
			return nil, fmt.Errorf("interface %s: %w", iface.Name, err)
		}
	}

	// Pre-start: disk cache and I/O modes.
	for i := range domain.Spec.Devices.Disks {
		if err := converter.SetDriverCacheMode(&domain.Spec.Devices.Disks[i], directIOSupported{}); err != nil {
			return nil, fmt.Errorf("disk %s: %w", domain.Spec.Devices.Disks[i].Alias.GetName(), err)
		}
		converter.SetOptimalIOMode(&domain.Spec.Devices.Disks[i], func(string) bool { return false })
	}
	return &domain.Spec, nil
}

// converterContext returns the converter context of virt-launcher, with the
// VM options virt-handler sends for the default cluster configuration.
func (g *generator) converterContext(vmi *kubevirtv1.VirtualMachineInstance, in *input, clusterConfig *virtconfig.ClusterConfig) (*convertertypes.ConverterContext, error) {
	permanentVolumes := map[string]kubevirtv1.VolumeStatus{}
	for _, status := range vmi.Status.VolumeStatus {
		if status.HotplugVolume == nil {
			permanentVolumes[status.Name] = status
		}
	}

	// Claims left after the host disk replacement are block devices.
	isBlockPVC := map[string]bool{}
	isBlockDV := map[string]bool{}
	for _, volume := range vmi.Spec.Volumes {
		switch {
		case volume.PersistentVolumeClaim != nil:
			isBlockPVC[volume.Name] = storagetypes.IsPVCBlock(in.claims[volume.PersistentVolumeClaim.ClaimName].volumeMode)
		case volume.DataVolume != nil:
			isBlockDV[volume.Name] = storagetypes.IsPVCBlock(in.claims[volume.DataVolume.Name].volumeMode)
		case volume.Ephemeral != nil:
			return nil, fmt.Errorf("volume %s: ephemeral volumes are not supported", volume.Name)
		case volume.ContainerDisk != nil:
			return nil, fmt.Errorf("volume %s: container disks are not supported", volume.Name)
		}
	}

	efiConfiguration, err := g.efiConfiguration(vmi, clusterConfig)
	if err != nil {
		return nil, err
	}

	smbios := clusterConfig.GetSMBIOS()
	return &convertertypes.ConverterContext{
		Architecture:              arch.NewConverter(nodeArch),
		VirtualMachine:            vmi,
		AllowEmulation:            clusterConfig.AllowEmulation(),
		AllowCrossArchEmulation:   false,
		HostArchitecture:          nodeArch,
		HypervisorDeviceAvailable: true,
		IsBlockPVC:                isBlockPVC,
		IsBlockDV:                 isBlockDV,
		EFIConfiguration:          efiConfiguration,
		UseVirtioTransitional:     vmi.Spec.Domain.Devices.UseVirtioTransitional != nil && *vmi.Spec.Domain.Devices.UseVirtioTransitional,
		PermanentVolumes:          permanentVolumes,
		HotplugVolumes:            map[string]kubevirtv1.VolumeStatus{},
		UseLaunchSecuritySEV:      kutil.IsSEVVMI(vmi),
		UseLaunchSecurityTDX:      kutil.IsTDXVMI(vmi),
		UseLaunchSecurityPV:       kutil.IsSecureExecutionVMI(vmi),
		FreePageReporting:         freePageReporting(clusterConfig.IsFreePageReportingDisabled(), vmi),
		SerialConsoleLog:          serialConsoleLog(clusterConfig.IsSerialConsoleLogDisabled(), vmi),
		SMBios: &cmdv1.SMBios{
			Family:       smbios.Family,
			Product:      smbios.Product,
			Manufacturer: smbios.Manufacturer,
			Sku:          smbios.Sku,
			Version:      smbios.Version,
		},
		Topology:                        &cmdv1.Topology{},
		MemBalloonStatsPeriod:           uint(clusterConfig.GetMemBalloonStatsPeriod()),
		BochsForEFIGuests:               !clusterConfig.VGADisplayForEFIGuestsEnabled(),
		PCINUMAAwareTopologyEnabled:     clusterConfig.PCINUMAAwareTopologyEnabled(),
		GraceIOVirtualizationEnabled:    clusterConfig.GraceIOVirtualizationEnabled(),
		DomainAttachmentByInterfaceName: domainspec.DomainAttachmentByInterfaceName(vmi.Spec.Domain.Devices.Interfaces, clusterConfig.GetNetworkBindings()),
	}, nil
}

// efiConfiguration picks the firmware as virt-launcher does.
func (g *generator) efiConfiguration(vmi *kubevirtv1.VirtualMachineInstance, clusterConfig *virtconfig.ClusterConfig) (*convertertypes.EFIConfiguration, error) {
	if !vmi.IsBootloaderEFI() {
		return nil, nil
	}
	secureBoot := vmi.Spec.Domain.Firmware.Bootloader.EFI.SecureBoot == nil || *vmi.Spec.Domain.Firmware.Bootloader.EFI.SecureBoot
	if kutil.IsSEVVMI(vmi) || kutil.IsTDXVMI(vmi) {
		return nil, errors.New("confidential computing firmware is not supported")
	}
	if secureBoot && clusterConfig.FirmwareAutoSelectionEnabled() {
		return &convertertypes.EFIConfiguration{SecureLoader: true, UsesFirmwareAutoSelection: true}, nil
	}
	env := efi.DetectEFIEnvironment(nodeArch, g.ovmfDir)
	if !env.Bootable(secureBoot, efi.None) {
		return nil, fmt.Errorf("no EFI firmware for SecureBoot=%v", secureBoot)
	}
	ovmfPath := clusterConfig.GetOVMFPath(nodeArch)
	return &convertertypes.EFIConfiguration{
		EFICode:      path.Join(ovmfPath, filepath.Base(env.EFICode(secureBoot, efi.None))),
		EFIVars:      path.Join(ovmfPath, filepath.Base(env.EFIVars(secureBoot, efi.None))),
		SecureLoader: secureBoot,
	}, nil
}

// freePageReporting and serialConsoleLog decide as virt-launcher does.
func freePageReporting(clusterDisabled bool, vmi *kubevirtv1.VirtualMachineInstance) bool {
	autoattach := vmi.Spec.Domain.Devices.AutoattachMemBalloon
	return !clusterDisabled &&
		(autoattach == nil || *autoattach) &&
		!vmi.IsHighPerformanceVMI() &&
		vmi.GetAnnotations()[kubevirtv1.FreePageReportingDisabledAnnotation] != "true"
}

func serialConsoleLog(clusterDisabled bool, vmi *kubevirtv1.VirtualMachineInstance) bool {
	logSerial := vmi.Spec.Domain.Devices.LogSerialConsole
	return (logSerial != nil && *logSerial) || (logSerial == nil && !clusterDisabled)
}

// podNetworkHandler stands for the network of the virt-launcher pod after
// virt-handler has set it up: every interface virt-launcher looks for
// exists, with a MAC derived from the VirtualMachineInstance and the
// interface name.
type podNetworkHandler struct {
	vmi *kubevirtv1.VirtualMachineInstance
}

func newPodNetworkHandler(vmi *kubevirtv1.VirtualMachineInstance) *podNetworkHandler {
	return &podNetworkHandler{vmi: vmi}
}

func (h *podNetworkHandler) LinkByName(name string) (netlink.Link, error) {
	sum := sha256.Sum256([]byte(h.vmi.Namespace + "/" + h.vmi.Name + "/" + name))
	mac := net.HardwareAddr(sum[:6])
	mac[0] = mac[0]&^0x01 | 0x02 // unicast, locally administered
	return &netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: name, HardwareAddr: mac, MTU: podMTU}}, nil
}

func (h *podNetworkHandler) StartDHCP(*netcache.DHCPConfig, string, *kubevirtv1.DHCPOptions) error {
	return errors.New("not available")
}

func (h *podNetworkHandler) HasIPv4GlobalUnicastAddress(string) (bool, error) {
	return true, nil
}

func (h *podNetworkHandler) HasIPv6GlobalUnicastAddress(string) (bool, error) {
	return false, nil
}

// directIOSupported says that the claims support direct I/O.
type directIOSupported struct{}

func (directIOSupported) CheckBlockDevice(string) (bool, error) { return true, nil }
func (directIOSupported) CheckFile(string) (bool, error)        { return true, nil }
