package simulator_test

import (
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// endpoint records the heartbeats it receives and answers like the
// operator would.
type endpoint struct {
	mu    sync.Mutex
	seen  []guestprotocol.Heartbeat
	auths []string
}

func (e *endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != guestprotocol.HeartbeatPath {
		// As an operator from before protocol v2 answers: the guest then
		// speaks v1.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(guestprotocol.Error{Reason: guestprotocol.ReasonUnsupported, Message: "no such endpoint; this server speaks " + guestprotocol.HeartbeatPath})
		return
	}
	hb, err := guestprotocol.DecodeHeartbeat(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	e.mu.Lock()
	e.seen = append(e.seen, *hb)
	e.auths = append(e.auths, r.Header.Get("Authorization"))
	e.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(guestprotocol.DesiredState{Hostname: hb.Machine.Name, SSHUser: "admin", HeartbeatIntervalSeconds: 1})
}

func (e *endpoint) heartbeats() []guestprotocol.Heartbeat {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]guestprotocol.Heartbeat(nil), e.seen...)
}

var _ = Describe("A simulated guest", func() {
	It("heartbeats with the agent's protocol, the token and machine of its config disk, while its VM runs", func() {
		ns := newNamespace()
		ep := &endpoint{}
		srv := httptest.NewTLSServer(ep)
		DeferCleanup(srv.Close)
		ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
		create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mac-agent"}, StringData: map[string]string{
			guestprotocol.KeyEndpoint: srv.URL, guestprotocol.KeyCABundle: string(ca), guestprotocol.KeyToken: "the-token",
			guestprotocol.KeyNamespace: ns, guestprotocol.KeyMachine: "mac"}})
		vm := newVM(ns, "mac")
		spec := &vm.Spec.Template.Spec
		spec.Domain.Devices.Disks = append(spec.Domain.Devices.Disks, kubevirtv1.Disk{Name: "agent-config",
			DiskDevice: kubevirtv1.DiskDevice{CDRom: &kubevirtv1.CDRomTarget{Bus: kubevirtv1.DiskBusSATA}}})
		spec.Volumes = append(spec.Volumes, kubevirtv1.Volume{Name: "agent-config", VolumeSource: kubevirtv1.VolumeSource{
			Secret: &kubevirtv1.SecretVolumeSource{SecretName: "mac-agent", VolumeLabel: guestprotocol.ConfigVolumeLabel}}})
		create(vm)

		Eventually(ep.heartbeats).WithTimeout(30 * time.Second).Should(ContainElement(And(
			HaveField("Machine", guestprotocol.MachineRef{Namespace: ns, Name: "mac"}),
			HaveField("OSBuild", "23F79"),
			HaveField("SSHHostKeys", HaveExactElements(HavePrefix("ssh-ed25519 "))))))
		ep.mu.Lock()
		Expect(ep.auths).To(HaveEach("Bearer the-token"))
		ep.mu.Unlock()

		By("reporting its golden image's hostname first, then the name the operator sent")
		Eventually(func() []string {
			var names []string
			for _, hb := range ep.heartbeats() {
				names = append(names, hb.Hostname)
			}
			return names[:min(len(names), 2)]
		}).WithTimeout(30 * time.Second).Should(Equal([]string{"macos-golden", "mac"}))

		By("and falls silent once the VM is gone")
		Expect(k8sClient.Delete(ctx, vm)).To(Succeed())
		Eventually(vmiNotFound(ns, "mac")).WithTimeout(30 * time.Second).Should(BeTrue())
		silentFrom := len(ep.heartbeats())
		Consistently(func() int { return len(ep.heartbeats()) }).WithTimeout(2500*time.Millisecond).Should(Equal(silentFrom),
			"the guest heartbeats every second while it runs")
	})
})
