package controllers_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestendpoint"
	"github.com/macvirt/macvirt/internal/guestprotocol"
	"github.com/macvirt/macvirt/internal/render"
)

// Issuing a machine's guest-agent token, step by step, with no operator
// running: each spec plays the writers itself, so the interleaving is
// exactly the one named.
var _ = Describe("Issuing the guest agent's token", func() {
	var (
		ns   string
		opts = guestendpoint.Address{Endpoint: "https://agent.test:9444", CABundle: []byte("test CA bundle")}
	)
	BeforeEach(func() { ns = newNamespace() })

	// mounted reads the Secret the machine's VM would mount and returns it
	// with the hash the machine records.
	mounted := func(k types.NamespacedName) (*corev1.Secret, string) {
		m := getMachine(k)
		secret := &corev1.Secret{}
		Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: render.AgentSecretName(m)}, secret)).To(Succeed())
		return secret, m.Annotations[macvirtv1alpha1.AnnotationAgentTokenHash]
	}

	It("never loses the recorded token to a second writer working from a stale copy of the machine", func() {
		ctx := context.Background()
		k := key(newMachine(ns, "sonoma"))
		// The second writer's copy predates the first writer's hash, as a
		// lagging cache or a second operator replica would have it.
		stale := getMachine(k)

		Expect(guestendpoint.IssueToken(ctx, k8sClient, getMachine(k), opts)).To(BeTrue())
		issued, hash := mounted(k)
		Expect(hash).To(HaveLen(64))
		Expect(guestprotocol.HashToken(string(issued.Data[guestprotocol.KeyToken]))).To(Equal(hash))

		_, err := guestendpoint.IssueToken(ctx, k8sClient, stale, opts)
		Expect(apierrors.IsConflict(err)).To(BeTrue(), "the second writer's stale copy loses the optimistic lock, got %v", err)

		secret, recorded := mounted(k)
		Expect(recorded).To(Equal(hash), "the first writer's hash stays recorded")
		Expect(guestprotocol.HashToken(string(secret.Data[guestprotocol.KeyToken]))).To(Equal(recorded),
			"the Secret the VM mounts holds the token whose hash the machine records")
		Expect(secret.ResourceVersion).To(Equal(issued.ResourceVersion), "a Secret whose hash is recorded is never written again")

		By("the loser's Secret is an unused orphan that goes with the machine")
		secrets := &corev1.SecretList{}
		Expect(k8sClient.List(ctx, secrets, client.InNamespace(ns), client.MatchingLabels{macvirtv1alpha1.LabelMachine: k.Name})).To(Succeed())
		Expect(secrets.Items).To(HaveLen(2))
		for _, s := range secrets.Items {
			Expect(s.OwnerReferences).To(ConsistOf(HaveField("UID", getMachine(k).UID)), "Secret %s", s.Name)
		}

		By("a writer with a fresh copy finds the token issued and writes nothing")
		Expect(guestendpoint.IssueToken(ctx, k8sClient, getMachine(k), opts)).To(BeTrue())
		Expect(k8sClient.List(ctx, secrets, client.InNamespace(ns), client.MatchingLabels{macvirtv1alpha1.LabelMachine: k.Name})).To(Succeed())
		Expect(secrets.Items).To(HaveLen(2))
	})

	It("issues a token whose Secret exists after a crash between writing the Secret and recording the hash", func() {
		ctx := context.Background()
		k := key(newMachine(ns, "sonoma"))
		crashing := newFaultyClient(k8sClient)
		crashing.crashAfter = 1 // the Secret is written, the machine's patch is not
		_, err := guestendpoint.IssueToken(ctx, crashing, getMachine(k), opts)
		Expect(err).To(MatchError(ContainSubstring("simulated operator crash")))
		Expect(getMachine(k).Annotations).NotTo(HaveKey(macvirtv1alpha1.AnnotationAgentTokenHash))

		Expect(guestendpoint.IssueToken(ctx, k8sClient, getMachine(k), opts)).To(BeTrue())
		secret, hash := mounted(k)
		Expect(guestprotocol.HashToken(string(secret.Data[guestprotocol.KeyToken]))).To(Equal(hash))
	})
})
