package simulator

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// Every pod gets an address of its own: a VirtualMachine's next launcher
// pod (another random suffix) gets another one, and the instance's
// interface carries the pod's.
func TestEveryLauncherPodHasAnAddressOfItsOwn(t *testing.T) {
	g := NewWithT(t)
	ip := PodIPFor("lab", "virt-launcher-sequoia-x7k2p")
	g.Expect(ip).To(MatchRegexp(`^10\.244\.\d{1,3}\.\d{1,3}$`))
	g.Expect(PodIPFor("lab", "virt-launcher-sequoia-x7k2p")).To(Equal(ip))
	g.Expect(PodIPFor("lab", "virt-launcher-sequoia-q9m4d")).NotTo(Equal(ip))
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "sequoia"}}
	g.Expect(podInterface(vmi, ip)).To(And(HaveField("Name", "default"), HaveField("IP", ip), HaveField("IPs", []string{ip})))
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
		v.Status.Interfaces = []kubevirtv1.VirtualMachineInstanceNetworkInterface{podInterface(v, "10.244.3.7")}
		return v
	}
	masquerade := kubevirtv1.InterfaceBindingMethod{Masquerade: &kubevirtv1.InterfaceMasquerade{}}
	v := vmi(masquerade, "")
	g.Expect(GuestAddress(v)).To(Equal("10.0.2.2"))
	g.Expect(v.Status.Interfaces[0].IP).To(Equal("10.244.3.7"))
	g.Expect(v.Status.Interfaces[0].InfoSource).To(Equal("domain"))
	g.Expect(v.Status.Interfaces[0].InterfaceName).To(BeEmpty(), "only a QEMU guest agent reports the guest's interface name")
	g.Expect(GuestAddress(vmi(masquerade, "192.168.77.0/24"))).To(Equal("192.168.77.2"))
	g.Expect(GuestAddress(vmi(kubevirtv1.InterfaceBindingMethod{Bridge: &kubevirtv1.InterfaceBridge{}}, ""))).
		To(Equal("10.244.3.7"), "with bridge binding the guest gets the pod's IP")
}
