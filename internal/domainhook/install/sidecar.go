package install

import (
	"fmt"
	"strconv"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// HookBinary is where the hook image installs macvirt's hook
// (Dockerfile.hook: KubeVirt's sidecar-shim calls it as onDefineDomain).
const HookBinary = "/usr/bin/onDefineDomain"

// NonRootUID is the user virt-launcher's compute container runs as
// (KubeVirt's util.NonRootUID, the qemu user); the sidecar runs as the same
// user, so the compute container may connect to the socket it creates.
const NonRootUID = 107

// SidecarArgs are the hook binary's arguments in the plugin-sidecar
// transport: the emulator is the operator's, never a VMI's.
func SidecarArgs(opts Options) []string {
	args := []string{"--plugin-socket", SocketPath}
	if opts.EmulatorPath != "" {
		args = append(args, "--emulator-path", opts.EmulatorPath)
	}
	return args
}

// InjectionPolicy is the MutatingAdmissionPolicy (admissionregistration.k8s.io/v1,
// Kubernetes 1.36 and later) that adds the hook sidecar to the virt-launcher
// pod of every macvirt VM, the way KubeVirt's own e2e test of sidecar domain
// hooks does (tests/plugin_test.go in kubevirt v1.9.0): it matches pods
// labelled kubevirt.io=virt-launcher that carry the plugin socket volume
// and a macvirt machine label, and appends a container that mounts its own
// subdirectory of that volume (KubeVirt's kubevirt-plugin-sidecar-subpath
// policy refuses a mount without subPath). Pods of other VMs are untouched.
// The failure policy is Fail: a Mac whose pod lacks the hook would fail to
// start anyway, with a less clear message.
func InjectionPolicy(opts Options) (*admissionregistrationv1.MutatingAdmissionPolicy, error) {
	if opts.HookImage == "" {
		return nil, fmt.Errorf("no domain-hook image configured: set the operator's --hook-image flag")
	}
	args := ""
	for i, a := range append([]string{HookBinary}, SidecarArgs(opts)...) {
		if i > 0 {
			args += ", "
		}
		args += strconv.Quote(a)
	}
	// Requests equal limits, so the sidecar keeps the pod's QoS class.
	patch := `[JSONPatch{op: "add", path: "/spec/containers/-", value: Object.spec.containers{
  name: ` + strconv.Quote(SidecarContainer) + `,
  image: ` + strconv.Quote(opts.HookImage) + `,
  command: [` + args + `],
  resources: Object.spec.containers.resources{
    requests: {"cpu": "50m", "memory": "32Mi"},
    limits: {"cpu": "50m", "memory": "32Mi"}
  },
  securityContext: Object.spec.containers.securityContext{
    allowPrivilegeEscalation: false,
    runAsNonRoot: true,
    runAsUser: ` + strconv.Itoa(NonRootUID) + `,
    readOnlyRootFilesystem: true,
    seccompProfile: Object.spec.containers.securityContext.seccompProfile{type: "RuntimeDefault"},
    capabilities: Object.spec.containers.securityContext.capabilities{drop: ["ALL"]}
  },
  volumeMounts: [Object.spec.containers.volumeMounts{
    name: ` + strconv.Quote(SocketVolume) + `,
    mountPath: ` + strconv.Quote(SocketDir) + `,
    subPath: ` + strconv.Quote(Name) + `
  }]
}}]`
	return &admissionregistrationv1.MutatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "MutatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: InjectionPolicyName, Labels: newPlugin().Labels},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			FailurePolicy:      ptr.To(admissionregistrationv1.Fail),
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
			// The API server's defaults, written out so the operator's
			// object equals the stored one and is not rewritten.
			MatchConstraints: &admissionregistrationv1.MatchResources{
				MatchPolicy:       ptr.To(admissionregistrationv1.Equivalent),
				NamespaceSelector: &metav1.LabelSelector{},
				ObjectSelector:    &metav1.LabelSelector{},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
							Scope: ptr.To(admissionregistrationv1.NamespacedScope),
						},
					},
				}},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{
				{Name: "is-virt-launcher-pod", Expression: `has(object.metadata.labels) && "kubevirt.io" in object.metadata.labels && object.metadata.labels["kubevirt.io"] == "virt-launcher"`},
				{Name: "is-macvirt-machine", Expression: "has(object.metadata.labels) && " + strconv.Quote(macvirtv1alpha1.LabelMachine) + " in object.metadata.labels"},
				{Name: "has-plugin-socket-volume", Expression: `has(object.spec.volumes) && object.spec.volumes.exists(v, v.name == ` + strconv.Quote(SocketVolume) + `)`},
				{Name: "has-no-hook-yet", Expression: `!object.spec.containers.exists(c, c.name == ` + strconv.Quote(SidecarContainer) + `)`},
			},
			Mutations: []admissionregistrationv1.Mutation{{
				PatchType: admissionregistrationv1.PatchTypeJSONPatch,
				JSONPatch: &admissionregistrationv1.JSONPatch{Expression: patch},
			}},
		},
	}, nil
}

// InjectionPolicyBinding binds InjectionPolicy cluster-wide; its match
// conditions do the selecting.
func InjectionPolicyBinding() *admissionregistrationv1.MutatingAdmissionPolicyBinding {
	return &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "MutatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: InjectionPolicyName, Labels: newPlugin().Labels},
		Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: InjectionPolicyName},
	}
}
