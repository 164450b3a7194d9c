package controllers_test

import (
	"context"
	"encoding/pem"
	"net/http/httptest"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestagent"
	"github.com/macvirt/macvirt/internal/guestendpoint"
	"github.com/macvirt/macvirt/internal/render"
)

// The guest agent's own code, configured from the machine's real agent
// Secret, against the operator's real heartbeat handler over TLS.
var _ = Describe("The guest agent", func() {
	var ns string
	BeforeEach(func() {
		DeferCleanup(startOperator())
		ns = newNamespace()
		DeferCleanup(clock.Reset)
	})

	// agentOf returns a client configured as the machine's config disk says,
	// except for the endpoint, which is this test's server.
	agentOf := func(k types.NamespacedName, endpoint string, ca []byte) *guestagent.Client {
		secret := &corev1.Secret{}
		Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: k.Namespace, Name: render.AgentSecretName(getMachine(k))}, secret)).To(Succeed())
		c, err := guestagent.NewClient(&guestagent.Config{Endpoint: endpoint, CABundle: ca, Token: string(secret.Data["token"]),
			Namespace: string(secret.Data["namespace"]), Machine: string(secret.Data["machine"])})
		Expect(err).NotTo(HaveOccurred())
		return c
	}

	It("makes a booting machine Ready, loses Ready when silent, and receives its claim's keys once bound", func() {
		srv := httptest.NewTLSServer(&guestendpoint.Handler{Client: k8sClient, Clock: clock})
		DeferCleanup(srv.Close)
		ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})

		class := newClass(func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Tenancy.OnDemand = ptrTo(true)
		})
		claim := newClaim(ns, func(c *macvirtv1alpha1.MacClaim) {
			c.Spec.ClassName = class.Name
			c.Spec.SSHAuthorizedKeys = []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGjmcsp0y1ajFmlpJ0mBQhnEkcA0nfDy8cE8gSOVUiOK dev@example"}
		})
		var k types.NamespacedName
		Eventually(func(g Gomega) *macvirtv1alpha1.ObjectRef { return getClaimWith(g, key(claim)).Status.MachineRef }).WithTimeout(timeout).ShouldNot(BeNil())
		ref := getClaim(key(claim)).Status.MachineRef
		k = types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineBooting))

		client := agentOf(k, srv.URL, ca)
		facts := guestagent.Facts{OSVersion: "14.5", OSBuild: "23F79", Hostname: k.Name, BootTime: clock.Now().Add(-time.Minute),
			IPAddresses: []string{"10.0.2.2"}}
		state, err := client.Heartbeat(context.Background(), facts)
		Expect(err).NotTo(HaveOccurred())
		Expect(state.SSHAuthorizedKeys).To(Equal(getClaim(key(claim)).Spec.SSHAuthorizedKeys), "the bound claim's keys are delivered")
		Expect(state.Hostname).To(Equal(k.Name))
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineReady), "the first heartbeat makes it Ready")
		Expect(getMachine(k).Status.Guest.OSBuild).To(Equal("23F79"))
		Eventually(claimPhase(key(claim))).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.ClaimReady))

		clock.Advance(silentPast(macvirtv1alpha1.DefaultHeartbeatTimeout))
		touch(k)
		Eventually(conditionOf(k, macvirtv1alpha1.ConditionGuestAgentReady)).WithTimeout(timeout).
			Should(HaveField("Reason", macvirtv1alpha1.ReasonHeartbeatStale), "silence past heartbeatTimeout")
		Expect(phase(k)()).NotTo(Equal(macvirtv1alpha1.MachineReady))

		_, err = client.Heartbeat(context.Background(), facts)
		Expect(err).NotTo(HaveOccurred())
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineReady), "a heartbeat again makes it Ready again")

		By("another machine's token is refused and writes nothing")
		other := newMachine(ns, class.Name)
		ok := key(other)
		DeferCleanup(deleteAndWait, ok)
		Eventually(func(g Gomega) string {
			return getMachineWith(g, ok).Annotations[macvirtv1alpha1.AnnotationAgentTokenHash]
		}).WithTimeout(timeout).ShouldNot(BeEmpty())
		stolen := agentOf(ok, srv.URL, ca)
		forged, err := guestagent.NewClient(&guestagent.Config{Endpoint: srv.URL, CABundle: ca, Token: tokenOf(stolen), Namespace: k.Namespace, Machine: k.Name})
		Expect(err).NotTo(HaveOccurred())
		before := getMachine(k).Status.Guest.LastHeartbeat
		_, err = forged.Heartbeat(context.Background(), facts)
		Expect(err).To(MatchError(ContainSubstring("401")))
		Expect(getMachine(k).Status.Guest.LastHeartbeat).To(Equal(before))
	})
})

// tokenOf reads the token back from a client's configuration.
func tokenOf(c *guestagent.Client) string { return c.Token() }
