package controllers_test

import (
	"context"
	"errors"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	gomegatypes "github.com/onsi/gomega/types"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/operator"
)

// machineUIDs maps each machine of ns to its UID: a machine deleted and
// recreated under the same slot name shows as a changed UID.
func machineUIDs(g Gomega, ns string) map[string]types.UID {
	out := map[string]types.UID{}
	for _, m := range machinesInWith(g, ns) {
		out[m.Name] = m.UID
	}
	return out
}

// everyGuestCondition asserts that each machine of ns has a
// GuestAgentReady condition matching want.
func everyGuestCondition(ns string, want gomegatypes.GomegaMatcher) func(Gomega) {
	return func(g Gomega) {
		list := &macvirtv1alpha1.MacMachineList{}
		g.Expect(k8sClient.List(context.Background(), list, client.InNamespace(ns))).To(Succeed())
		g.Expect(list.Items).NotTo(BeEmpty())
		for _, m := range list.Items {
			g.Expect(meta.FindStatusCondition(m.Status.Conditions, macvirtv1alpha1.ConditionGuestAgentReady)).To(
				HaveValue(want), "machine %s", m.Name)
		}
	}
}

// denyByQuota makes the API server refuse creating resource (a ResourceQuota
// object-count name such as count/macmachines.macvirt.io) in ns, the way a
// platform team's quota would, until the returned function lifts it. No
// quota controller runs here, so the quota's status is written as it would
// compute it.
func denyByQuota(ns, resourceName string) (lift func()) {
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "no-more", Namespace: ns},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceName(resourceName): resource.MustParse("0")}}}
	Expect(k8sClient.Create(context.Background(), q)).To(Succeed())
	q.Status.Hard = q.Spec.Hard
	q.Status.Used = corev1.ResourceList{corev1.ResourceName(resourceName): resource.MustParse("0")}
	Expect(k8sClient.Status().Update(context.Background(), q)).To(Succeed())
	return func() { Expect(client.IgnoreNotFound(k8sClient.Delete(context.Background(), q))).To(Succeed()) }
}

// denyBinds makes the API server refuse, by a ValidatingAdmissionPolicy as a
// platform team might run one, every write that binds a machine in ns,
// until the returned function lifts it.
func denyBinds(ns string) (lift func()) {
	return denyMachineUpdates("no-binds-"+ns, ns,
		"!has(object.spec.claimRef) || has(oldObject.spec.claimRef)", "binding machines is frozen for maintenance")
}

// denyMachineUpdates refuses, with a ValidatingAdmissionPolicy, the updates
// of MacMachines in ns that fail the CEL expression.
func denyMachineUpdates(name, ns, expression, message string) (lift func()) {
	return denyMachineWrites(name, ns, admissionregistrationv1.Update, expression, message)
}

// denyMachineWrites refuses, with a ValidatingAdmissionPolicy, the op
// requests on MacMachines in ns that fail the CEL expression.
func denyMachineWrites(name, ns string, op admissionregistrationv1.OperationType, expression, message string) (lift func()) {
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{op},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{"macvirt.io"}, APIVersions: []string{"v1alpha1"},
						Resources: []string{"macmachines"}}}}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: expression,
				Message:    message}},
		}}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}}}}
	Expect(k8sClient.Create(context.Background(), policy)).To(Succeed())
	Expect(k8sClient.Create(context.Background(), binding)).To(Succeed())
	lift = func() {
		Expect(client.IgnoreNotFound(k8sClient.Delete(context.Background(), binding))).To(Succeed())
		Expect(client.IgnoreNotFound(k8sClient.Delete(context.Background(), policy))).To(Succeed())
	}
	DeferCleanup(lift)
	return lift
}

// warningsAbout lists the Warning events recorded about the named object.
func warningsAbout(name, reason string) func() []eventsv1.Event {
	return func() []eventsv1.Event {
		var list eventsv1.EventList
		if err := k8sClient.List(context.Background(), &list); err != nil {
			return nil
		}
		var out []eventsv1.Event
		for _, e := range list.Items {
			if e.Regarding.Name == name && e.Type == corev1.EventTypeWarning && e.Reason == reason {
				out = append(out, e)
			}
		}
		return out
	}
}

// warningsIn lists the Warning events with reason recorded in ns.
func warningsIn(ns, reason string) []eventsv1.Event {
	var list eventsv1.EventList
	Expect(k8sClient.List(context.Background(), &list, client.InNamespace(ns))).To(Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Type == corev1.EventTypeWarning && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

var _ = Describe("Under faults", func() {
	BeforeEach(func() { DeferCleanup(clock.Reset) })

	It("an operator outage of 3 minutes deletes no idle machine, and every one is Ready again after it", func() {
		stopFirst := startOperator()
		class := newClass()
		pool, ns := newPool(class.Name, 3, 6)
		agents := startGuests(ns)
		Eventually(poolStatus(pool.Name)).WithTimeout(timeout).Should(And(HaveField("Idle", int32(3)), HaveField("Provisioning", int32(0))))
		before := machineUIDs(Default, ns)

		By("the operator, and with it the agent endpoint, is gone for 3 minutes: the guests' heartbeats go unheard")
		stopFirst()
		agents.Pause()
		clock.Advance(3 * time.Minute)

		By("a new operator starts, before any guest has been heard again")
		DeferCleanup(startOperator())
		Eventually(everyGuestCondition(ns, And(HaveField("Status", metav1.ConditionTrue),
			HaveField("Message", ContainSubstring("before the agent endpoint began to listen"))))).WithTimeout(timeout).Should(Succeed())
		Expect(machineUIDs(Default, ns)).To(Equal(before), "no idle machine was deleted or replaced")
		Expect(poolStatus(pool.Name)()).To(And(HaveField("Idle", int32(3)), HaveField("Unhealthy", int32(0))))

		By("the guests' retries get through")
		agents.Resume()
		Eventually(everyGuestCondition(ns, HaveField("Message", ContainSubstring("heartbeats within")))).WithTimeout(timeout).Should(Succeed())
		Expect(machineUIDs(Default, ns)).To(Equal(before))
		Eventually(poolStatus(pool.Name)).WithTimeout(timeout).Should(HaveField("Idle", int32(3)))
	})

	It("guests that all fall silent while the operator runs are not replaced: the pool reports TooManyUnhealthy", func() {
		DeferCleanup(startOperator())
		class := newClass()
		pool, ns := newPool(class.Name, 3, 6)
		agents := startGuests(ns)
		Eventually(poolStatus(pool.Name)).WithTimeout(timeout).Should(And(HaveField("Idle", int32(3)), HaveField("Provisioning", int32(0))))
		before := machineUIDs(Default, ns)

		By("the agent endpoint becomes unreachable (a network cut) past heartbeatTimeout")
		agents.Pause()
		clock.Advance(silentPast(macvirtv1alpha1.DefaultHeartbeatTimeout))
		for name := range before {
			touch(types.NamespacedName{Namespace: ns, Name: name})
		}
		Eventually(poolStatus(pool.Name)).WithTimeout(timeout).Should(And(HaveField("Unhealthy", int32(3)),
			HaveField("Conditions", ContainElement(And(HaveField("Type", macvirtv1alpha1.ConditionReady),
				HaveField("Reason", macvirtv1alpha1.ReasonTooManyUnhealthy), HaveField("Message", ContainSubstring("3 of 3 unbound machines")))))))
		Eventually(warningsAbout(pool.Name, macvirtv1alpha1.ReasonTooManyUnhealthy)).WithTimeout(timeout).ShouldNot(BeEmpty())
		Consistently(func(g Gomega) map[string]types.UID { return machineUIDs(g, ns) }).WithTimeout(2 * time.Second).Should(Equal(before))

		By("the endpoint is reachable again")
		agents.Resume()
		Eventually(poolStatus(pool.Name)).WithTimeout(timeout).Should(And(HaveField("Idle", int32(3)), HaveField("Unhealthy", int32(0)),
			HaveField("Conditions", ContainElement(And(HaveField("Type", macvirtv1alpha1.ConditionReady), HaveField("Status", metav1.ConditionTrue))))))
		Expect(machineUIDs(Default, ns)).To(Equal(before))
	})

	It("a pool whose machine creates are refused says so in the API server's words, and fills once the cause goes", func() {
		DeferCleanup(startOperator())
		class := newClass()
		ns := newNamespace()
		lift := denyByQuota(ns, "count/macmachines.macvirt.io")
		pool, _ := newPool(class.Name, 1, 2, func(p *macvirtv1alpha1.MacPool) { p.Spec.Namespace = ns })
		Eventually(poolStatus(pool.Name)).WithTimeout(timeout).Should(HaveField("Conditions", ContainElements(
			And(HaveField("Type", macvirtv1alpha1.ConditionReady), HaveField("Status", metav1.ConditionFalse),
				HaveField("Reason", macvirtv1alpha1.ReasonCreateFailed), HaveField("Message", ContainSubstring("exceeded quota"))),
			And(HaveField("Type", macvirtv1alpha1.ConditionStalled), HaveField("Status", metav1.ConditionTrue)))))
		Eventually(warningsAbout(pool.Name, macvirtv1alpha1.ReasonCreateFailed)).WithTimeout(timeout).ShouldNot(BeEmpty())

		lift()
		startGuests(ns)
		Eventually(poolStatus(pool.Name)).WithTimeout(timeout).Should(And(HaveField("Idle", int32(1)), HaveField("Conditions", ContainElements(
			And(HaveField("Type", macvirtv1alpha1.ConditionReady), HaveField("Status", metav1.ConditionTrue)),
			And(HaveField("Type", macvirtv1alpha1.ConditionStalled), HaveField("Status", metav1.ConditionFalse))))))
	})

	It("a machine whose DataVolumes are refused says so in the API server's words, and provisions once the cause goes", func() {
		DeferCleanup(startOperator())
		class := newClass()
		ns := newNamespace()
		lift := denyByQuota(ns, "count/datavolumes.cdi.kubevirt.io")
		k := key(newMachine(ns, class.Name))
		Eventually(conditionOf(k, macvirtv1alpha1.ConditionReady)).WithTimeout(timeout).Should(And(
			HaveField("Reason", macvirtv1alpha1.ReasonCreateFailed), HaveField("Message", ContainSubstring("exceeded quota"))))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionStalled)()).To(HaveField("Status", metav1.ConditionTrue))
		Eventually(warningsAbout(k.Name, macvirtv1alpha1.ReasonCreateFailed)).WithTimeout(timeout).ShouldNot(BeEmpty())

		lift()
		Eventually(conditionOf(k, macvirtv1alpha1.ConditionDisksReady)).WithTimeout(timeout).Should(HaveField("Status", metav1.ConditionTrue))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionStalled)()).To(HaveField("Status", metav1.ConditionFalse))
	})

	It("a machine whose VirtualMachine is refused says so in the API server's words, and starts once the cause goes", func() {
		DeferCleanup(startOperator())
		class := newClass()
		ns := newNamespace()
		lift := denyByQuota(ns, "count/virtualmachines.kubevirt.io")
		k := key(newMachine(ns, class.Name))
		Eventually(conditionOf(k, macvirtv1alpha1.ConditionReady)).WithTimeout(timeout).Should(And(
			HaveField("Reason", macvirtv1alpha1.ReasonCreateFailed), HaveField("Message", ContainSubstring("VirtualMachine")),
			HaveField("Message", ContainSubstring("exceeded quota"))))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionStalled)()).To(HaveField("Status", metav1.ConditionTrue))
		Eventually(warningsAbout(k.Name, macvirtv1alpha1.ReasonCreateFailed)).WithTimeout(timeout).ShouldNot(BeEmpty())

		lift()
		Eventually(conditionOf(k, macvirtv1alpha1.ConditionVMRunning)).WithTimeout(timeout).Should(HaveField("Status", metav1.ConditionTrue))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionStalled)()).To(HaveField("Status", metav1.ConditionFalse))
	})

	It("a pool whose machine deletes are refused says so in the API server's words, and shrinks once the cause goes", func() {
		DeferCleanup(startOperator())
		class := newClass()
		pool, ns := newPool(class.Name, 2, 2)
		startGuests(ns)
		Eventually(poolStatus(pool.Name)).WithTimeout(timeout).Should(HaveField("Idle", int32(2)))
		lift := denyMachineWrites("no-deletes-"+ns, ns, admissionregistrationv1.Delete, "false", "deleting machines is frozen for maintenance")
		By("the policy refuses before the pool shrinks (the API server loads a new policy in its own time)")
		var machines macvirtv1alpha1.MacMachineList
		Expect(k8sClient.List(context.Background(), &machines, client.InNamespace(ns))).To(Succeed())
		Expect(machines.Items).NotTo(BeEmpty())
		probe := machines.Items[0].DeepCopy()
		Eventually(func() error { return k8sClient.Delete(context.Background(), probe, client.DryRunAll) }).WithTimeout(timeout).Should(
			MatchError(ContainSubstring("deleting machines is frozen for maintenance")))

		p := &macvirtv1alpha1.MacPool{}
		Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(pool), p)).To(Succeed())
		p.Spec.Idle = ptrTo(int32(0))
		Expect(k8sClient.Update(context.Background(), p)).To(Succeed())
		Eventually(poolStatus(pool.Name)).WithTimeout(timeout).Should(HaveField("Conditions", ContainElements(
			And(HaveField("Type", macvirtv1alpha1.ConditionReady), HaveField("Status", metav1.ConditionFalse),
				HaveField("Reason", macvirtv1alpha1.ReasonDeleteFailed), HaveField("Message", ContainSubstring("deleting machines is frozen for maintenance"))),
			And(HaveField("Type", macvirtv1alpha1.ConditionStalled), HaveField("Status", metav1.ConditionTrue)))))
		Eventually(warningsAbout(pool.Name, macvirtv1alpha1.ReasonDeleteFailed)).WithTimeout(timeout).ShouldNot(BeEmpty())

		lift()
		Eventually(poolStatus(pool.Name)).WithTimeout(timeout).Should(And(HaveField("Idle", int32(0)), HaveField("Conditions", ContainElement(
			And(HaveField("Type", macvirtv1alpha1.ConditionStalled), HaveField("Status", metav1.ConditionFalse))))))
	})

	It("a machine whose finalizer is refused says so in the API server's words, creates nothing, and provisions once the cause goes", func() {
		class := newClass()
		ns := newNamespace()
		lift := denyMachineUpdates("no-finalizers-"+ns, ns,
			"!has(object.metadata.finalizers) || has(oldObject.metadata.finalizers)", "finalizers are frozen for maintenance")
		By("the policy refuses before the operator runs (the API server loads a new policy in its own time)")
		probe := newMachine(ns, class.Name)
		Eventually(func() error {
			p := &macvirtv1alpha1.MacMachine{}
			if err := k8sClient.Get(context.Background(), key(probe), p); err != nil {
				return err
			}
			p.Finalizers = append(p.Finalizers, macvirtv1alpha1.MachineFinalizer)
			return k8sClient.Update(context.Background(), p, client.DryRunAll)
		}).WithTimeout(timeout).Should(MatchError(ContainSubstring("finalizers are frozen for maintenance")))
		Expect(k8sClient.Delete(context.Background(), probe)).To(Succeed())
		DeferCleanup(startOperator())
		k := key(newMachine(ns, class.Name))
		Eventually(conditionOf(k, macvirtv1alpha1.ConditionReady)).WithTimeout(timeout).Should(And(
			HaveField("Reason", macvirtv1alpha1.ReasonUpdateFailed), HaveField("Message", ContainSubstring("finalizers are frozen for maintenance"))))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionStalled)()).To(HaveField("Status", metav1.ConditionTrue))
		Eventually(warningsAbout(k.Name, macvirtv1alpha1.ReasonUpdateFailed)).WithTimeout(timeout).ShouldNot(BeEmpty())
		var dvs cdiv1.DataVolumeList
		Expect(k8sClient.List(context.Background(), &dvs, client.InNamespace(ns))).To(Succeed())
		Expect(dvs.Items).To(BeEmpty(), "nothing is created before the machine's deletion is sure to wait for a graceful stop")

		lift()
		Eventually(conditionOf(k, macvirtv1alpha1.ConditionDisksReady)).WithTimeout(timeout).Should(HaveField("Status", metav1.ConditionTrue))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionStalled)()).To(HaveField("Status", metav1.ConditionFalse))
	})

	It("an on-demand claim whose machine is refused says so in the API server's words, and binds once the cause goes", func() {
		DeferCleanup(startOperator())
		onDemand := true
		class := newClass(func(c *macvirtv1alpha1.MacClass) { c.Spec.Tenancy.OnDemand = &onDemand })
		ns := newNamespace()
		lift := denyByQuota(ns, "count/macmachines.macvirt.io")
		k := key(newClaim(ns, func(c *macvirtv1alpha1.MacClaim) { c.Spec.ClassName = class.Name }))
		Eventually(claimCondition(k, macvirtv1alpha1.ConditionReady)).WithTimeout(timeout).Should(And(
			HaveField("Reason", macvirtv1alpha1.ReasonCreateFailed), HaveField("Message", ContainSubstring("exceeded quota"))))
		Expect(claimCondition(k, macvirtv1alpha1.ConditionStalled)()).To(HaveField("Status", metav1.ConditionTrue))
		Eventually(warningsAbout(k.Name, macvirtv1alpha1.ReasonCreateFailed)).WithTimeout(timeout).ShouldNot(BeEmpty())

		lift()
		Eventually(claimCondition(k, macvirtv1alpha1.ConditionBound)).WithTimeout(timeout).Should(HaveField("Status", metav1.ConditionTrue))
		Expect(claimCondition(k, macvirtv1alpha1.ConditionStalled)()).To(HaveField("Type", BeEmpty()), "Stalled is gone with the problem")
	})

	It("a claim whose binding write is refused says so in the API server's words, and binds once the cause goes", func() {
		DeferCleanup(startOperator())
		class := newClass()
		poolNS := newNamespace()
		lift := denyBinds(poolNS)
		pool, _ := newPool(class.Name, 1, 2, func(p *macvirtv1alpha1.MacPool) { p.Spec.Namespace = poolNS })
		startGuests(poolNS)
		Eventually(poolStatus(pool.Name)).Should(HaveField("Idle", int32(1)))
		By("the policy refuses before the claim exists (the API server loads a new policy in its own time)")
		Eventually(func() error {
			var machines macvirtv1alpha1.MacMachineList
			if err := k8sClient.List(context.Background(), &machines, client.InNamespace(poolNS)); err != nil {
				return err
			}
			if len(machines.Items) == 0 {
				return errors.New("the pool has no machine yet")
			}
			m := machines.Items[0]
			m.Spec.ClaimRef = &macvirtv1alpha1.ObjectRef{Namespace: "probe", Name: "probe", UID: "probe"}
			return k8sClient.Update(context.Background(), &m, client.DryRunAll)
		}).Should(MatchError(ContainSubstring("frozen for maintenance")))
		k := key(newClaim(newNamespace(), func(c *macvirtv1alpha1.MacClaim) { c.Spec.PoolName = pool.Name }))
		Eventually(claimCondition(k, macvirtv1alpha1.ConditionReady)).Should(And(
			HaveField("Reason", macvirtv1alpha1.ReasonUpdateFailed), HaveField("Message", ContainSubstring("frozen for maintenance"))))
		Expect(claimCondition(k, macvirtv1alpha1.ConditionStalled)()).To(HaveField("Status", metav1.ConditionTrue))
		Eventually(warningsAbout(k.Name, macvirtv1alpha1.ReasonUpdateFailed)).ShouldNot(BeEmpty())

		lift()
		Eventually(claimCondition(k, macvirtv1alpha1.ConditionBound)).Should(HaveField("Status", metav1.ConditionTrue))
		Expect(claimCondition(k, macvirtv1alpha1.ConditionStalled)()).To(HaveField("Type", BeEmpty()), "Stalled is gone with the problem")
	})

	It("a deleted connection Secret comes back", func() {
		DeferCleanup(startOperator(func(o *operator.Options) { o.ConnectionResync = time.Second }))
		class := newClass()
		pool, poolNS := newPool(class.Name, 1, 2)
		startGuests(poolNS)
		tenant := newNamespace()
		k := key(newClaim(tenant, func(c *macvirtv1alpha1.MacClaim) {
			c.Spec.PoolName = pool.Name
			c.Spec.WriteConnectionSecretToRef = &macvirtv1alpha1.LocalSecretReference{Name: "mac-ssh"}
		}))
		Eventually(func(g Gomega) string { return getClaimWith(g, k).Status.ConnectionSecretName }).WithTimeout(timeout).Should(Equal("mac-ssh"))
		secret := &corev1.Secret{}
		Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: tenant, Name: "mac-ssh"}, secret)).To(Succeed())
		Expect(k8sClient.Delete(context.Background(), secret)).To(Succeed())
		Eventually(func(g Gomega) {
			got := &corev1.Secret{}
			g.Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(secret), got)).To(Succeed())
			g.Expect(got.UID).NotTo(Equal(secret.UID))
			g.Expect(got.Data).To(And(HaveKeyWithValue("host", []byte(k.Name+".macs."+tenant+".svc")), HaveKeyWithValue("user", []byte("admin"))))
		}).WithTimeout(timeout).Should(Succeed())
	})

	It("a Secret naming the claim as an owner but not as its controller is not the claim's, and is left untouched", func() {
		DeferCleanup(startOperator())
		class := newClass()
		tenant := newNamespace()
		poolName := "later-" + tenant
		k := key(newClaim(tenant, func(c *macvirtv1alpha1.MacClaim) {
			c.GenerateName, c.Name, c.Spec.PoolName = "", "db", poolName
			c.Spec.WriteConnectionSecretToRef = &macvirtv1alpha1.LocalSecretReference{Name: "db-connection"}
		}))
		claim := getClaim(k)
		mine := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db-connection", Namespace: tenant,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: macvirtv1alpha1.GroupVersion.String(), Kind: "MacClaim", Name: claim.Name, UID: claim.UID}}},
			Data: map[string][]byte{"known_hosts": []byte("the tenant's own")}}
		Expect(k8sClient.Create(context.Background(), mine)).To(Succeed())
		_, poolNS := newPool(class.Name, 1, 2, func(p *macvirtv1alpha1.MacPool) { p.GenerateName, p.Name = "", poolName })
		startGuests(poolNS)

		Eventually(claimCondition(k, macvirtv1alpha1.ConditionConnectionSecretReady)).WithTimeout(timeout).Should(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", macvirtv1alpha1.ReasonSecretConflict)))
		got := &corev1.Secret{}
		Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(mine), got)).To(Succeed())
		Expect(got.Data).To(Equal(mine.Data), "the tenant's data is kept")
	})

	It("a tenant's own Secret named like the connection Secret is left untouched, and the claim says so until it goes", func() {
		DeferCleanup(startOperator(func(o *operator.Options) { o.ConnectionResync = time.Second }))
		class := newClass()
		pool, poolNS := newPool(class.Name, 1, 2)
		startGuests(poolNS)
		tenant := newNamespace()
		mine := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db-connection", Namespace: tenant},
			Data: map[string][]byte{"password": []byte("the tenant's own")}}
		Expect(k8sClient.Create(context.Background(), mine)).To(Succeed())
		k := key(newClaim(tenant, func(c *macvirtv1alpha1.MacClaim) {
			c.GenerateName, c.Name, c.Spec.PoolName = "", "db", pool.Name
			c.Spec.WriteConnectionSecretToRef = &macvirtv1alpha1.LocalSecretReference{Name: "db-connection"}
		}))

		Eventually(claimCondition(k, macvirtv1alpha1.ConditionConnectionSecretReady)).WithTimeout(timeout).Should(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", macvirtv1alpha1.ReasonSecretConflict),
			HaveField("Message", ContainSubstring("not one this claim created"))))
		Eventually(claimPhase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.ClaimReady), "the Mac itself is usable")
		Expect(getClaim(k).Status.ConnectionSecretName).To(BeEmpty())
		Eventually(warningsAbout("db", macvirtv1alpha1.ReasonSecretConflict)).WithTimeout(timeout).ShouldNot(BeEmpty())
		Consistently(func(g Gomega) {
			got := &corev1.Secret{}
			g.Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(mine), got)).To(Succeed())
			g.Expect(got.Data).To(Equal(mine.Data), "the tenant's data is kept")
			g.Expect(got.OwnerReferences).To(BeEmpty(), "no owner reference: deleting the claim must not delete it")
		}).WithTimeout(3 * time.Second).Should(Succeed())

		By("once the tenant's Secret goes, the claim's is written")
		Expect(k8sClient.Delete(context.Background(), mine)).To(Succeed())
		Eventually(claimCondition(k, macvirtv1alpha1.ConditionConnectionSecretReady)).WithTimeout(timeout).Should(HaveField("Status", metav1.ConditionTrue))
		Expect(getClaim(k).Status.ConnectionSecretName).To(Equal("db-connection"))
		got := &corev1.Secret{}
		Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(mine), got)).To(Succeed())
		Expect(got.OwnerReferences).To(ConsistOf(HaveField("UID", getClaim(k).UID)))
	})
})
