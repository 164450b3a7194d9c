package simulator

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

func TestIPAddressForIsStablePerVirtualMachine(t *testing.T) {
	g := NewWithT(t)
	ip := IPAddressFor("lab", "sequoia")
	g.Expect(ip).To(MatchRegexp(`^10\.244\.\d{1,3}\.\d{1,3}$`))
	g.Expect(IPAddressFor("lab", "sequoia")).To(Equal(ip))
	g.Expect(IPAddressFor("lab", "sonoma")).NotTo(Equal(ip))
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "sequoia"}}
	g.Expect(podInterface(vmi)).To(And(HaveField("Name", "default"), HaveField("IP", ip)))
	g.Expect(vmiConditionStatus(vmi, kubevirtv1.VirtualMachineInstanceReady)).To(Equal(corev1.ConditionUnknown))
}

// A macOS guest behind masquerade sees only its side of KubeVirt's NAT: the
// second address of the network's vmNetworkCIDR. KubeVirt itself reports
// the virt-launcher pod's IP for the interface, from the domain and the pod
// cache alone (no QEMU guest agent in macOS).
func TestTheGuestSeesWhatKubeVirtsBindingGivesIt(t *testing.T) {
	g := NewWithT(t)
	vmi := func(binding kubevirtv1.InterfaceBindingMethod, cidr string) *kubevirtv1.VirtualMachineInstance {
		v := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "sequoia"}}
		v.Spec.Networks = []kubevirtv1.Network{{Name: "default", NetworkSource: kubevirtv1.NetworkSource{Pod: &kubevirtv1.PodNetwork{VMNetworkCIDR: cidr}}}}
		v.Spec.Domain.Devices.Interfaces = []kubevirtv1.Interface{{Name: "default", InterfaceBindingMethod: binding}}
		v.Status.Interfaces = []kubevirtv1.VirtualMachineInstanceNetworkInterface{podInterface(v)}
		return v
	}
	masquerade := kubevirtv1.InterfaceBindingMethod{Masquerade: &kubevirtv1.InterfaceMasquerade{}}
	v := vmi(masquerade, "")
	g.Expect(GuestAddress(v)).To(Equal("10.0.2.2"))
	g.Expect(v.Status.Interfaces[0].IP).To(Equal(IPAddressFor("lab", "sequoia")))
	g.Expect(v.Status.Interfaces[0].InfoSource).To(Equal("domain"))
	g.Expect(v.Status.Interfaces[0].InterfaceName).To(BeEmpty(), "only a QEMU guest agent reports the guest's interface name")
	g.Expect(GuestAddress(vmi(masquerade, "192.168.77.0/24"))).To(Equal("192.168.77.2"))
	g.Expect(GuestAddress(vmi(kubevirtv1.InterfaceBindingMethod{Bridge: &kubevirtv1.InterfaceBridge{}}, ""))).
		To(Equal(IPAddressFor("lab", "sequoia")), "with bridge binding the guest gets the pod's IP")
}
