package controllers_test

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/classhistory"
)

// serviceOf gets the Service and the EndpointSlice of a name.
func serviceOf(ns, name string) (*corev1.Service, *discoveryv1.EndpointSlice) {
	svc, slice := &corev1.Service{}, &discoveryv1.EndpointSlice{}
	key := types.NamespacedName{Namespace: ns, Name: name}
	if err := k8sClient.Get(context.Background(), key, svc); err != nil {
		svc = nil
	}
	if err := k8sClient.Get(context.Background(), key, slice); err != nil {
		slice = nil
	}
	return svc, slice
}

var _ = Describe("A claim's Service", func() {
	It("of a NodePort claim has the claim's name, routes to its machine's address, offers Screen Sharing when the class does, and is what the Secret names", func() {
		DeferCleanup(startOperator())
		class := newClass(func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Access.ScreenSharing = true
			c.Spec.Tenancy.AllowedAccessTypes = []macvirtv1alpha1.AccessType{macvirtv1alpha1.AccessClusterIP, macvirtv1alpha1.AccessNodePort}
		})
		pool, poolNS := newPool(class.Name, 1, 2)
		startGuests(poolNS)
		tenant := newNamespace()
		k := key(newClaim(tenant, func(c *macvirtv1alpha1.MacClaim) {
			c.GenerateName, c.Name = "", "build"
			c.Spec.PoolName, c.Spec.Access.Type = pool.Name, macvirtv1alpha1.AccessNodePort
			c.Spec.WriteConnectionSecretToRef = &macvirtv1alpha1.LocalSecretReference{Name: "build-ssh"}
		}))
		Eventually(claimPhase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.ClaimReady))
		Eventually(claimCondition(k, macvirtv1alpha1.ConditionServiceReady)).WithTimeout(timeout).Should(HaveField("Status", metav1.ConditionTrue))
		c := getClaim(k)
		podIP := launcherPodIP(poolNS, c.Status.MachineRef.Name)

		svc, slice := serviceOf(tenant, "build")
		Expect(svc).NotTo(BeNil())
		Expect(svc.Spec.Type).To(Equal(corev1.ServiceTypeNodePort))
		Expect(svc.Spec.Selector).To(BeEmpty(), "the Mac's pod is in another namespace: the operator keeps the endpoints")
		Expect(svc.Spec.Ports).To(ConsistOf(
			And(HaveField("Name", "ssh"), HaveField("Port", int32(22)), HaveField("NodePort", Not(BeZero()))),
			And(HaveField("Name", "vnc"), HaveField("Port", int32(5900)))))
		Expect(metav1.IsControlledBy(svc, c)).To(BeTrue())
		Expect(slice).NotTo(BeNil())
		Expect(slice.Labels).To(HaveKeyWithValue(discoveryv1.LabelServiceName, "build"))
		Expect(slice.Endpoints).To(ConsistOf(And(HaveField("Addresses", ConsistOf(podIP)),
			HaveField("Conditions.Ready", HaveValue(BeTrue())), HaveField("NodeName", HaveValue(Equal(c.Status.Machine.NodeName))))))

		var nodePort int32
		for _, p := range svc.Spec.Ports {
			if p.Name == "ssh" {
				nodePort = p.NodePort
			}
		}
		host := "build." + tenant + ".svc"
		Expect(c.Status.Connection).To(And(HaveField("Host", host), HaveField("Address", podIP), HaveField("VNCPort", int32(5900)),
			HaveField("User", "admin"), HaveField("External", HaveValue(HaveField("SSHPort", nodePort)))))
		// Asked for, the Secret follows Ready.
		Eventually(func(g Gomega) string { return getClaimWith(g, k).Status.ConnectionSecretName }).WithTimeout(timeout).Should(Equal("build-ssh"))
		secret := &corev1.Secret{}
		Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: tenant, Name: "build-ssh"}, secret)).To(Succeed())
		Expect(secret.UID).To(Equal(getClaim(k).Status.ConnectionSecretUID))
		Expect(secret.Data).To(And(HaveKeyWithValue("host", []byte(host)), Not(HaveKey("address")),
			HaveKeyWithValue("vnc-port", []byte("5900")), HaveKey("external-port"),
			HaveKeyWithValue("known_hosts", []byte(host+" "+testHostKey+"\n"))), "what lasts as long as the binding: not the pod address")

		By("the bound machine lets in its claim's namespace and, exposed by a NodePort, the outside; the idle one nobody")
		Eventually(func(g Gomega) {
			np := &networkingv1.NetworkPolicy{}
			g.Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: poolNS, Name: c.Status.MachineRef.Name}, np)).To(Succeed())
			g.Expect(np.Spec.PodSelector.MatchLabels).To(Equal(map[string]string{macvirtv1alpha1.LabelMachine: c.Status.MachineRef.Name}))
			g.Expect(np.Spec.PolicyTypes).To(ConsistOf(networkingv1.PolicyTypeIngress))
			g.Expect(np.Spec.Ingress).To(HaveLen(1))
			g.Expect(np.Spec.Ingress[0].Ports).To(ConsistOf(HaveField("Port.IntVal", int32(22)), HaveField("Port.IntVal", int32(5900))))
			g.Expect(np.Spec.Ingress[0].From).To(ConsistOf(
				HaveField("NamespaceSelector.MatchLabels", Equal(map[string]string{corev1.LabelMetadataName: tenant})),
				HaveField("IPBlock.CIDR", "0.0.0.0/0"), HaveField("IPBlock.CIDR", "::/0")))
		}).WithTimeout(timeout).Should(Succeed())
		Eventually(func(g Gomega) {
			var machines macvirtv1alpha1.MacMachineList
			g.Expect(k8sClient.List(context.Background(), &machines, client.InNamespace(poolNS))).To(Succeed())
			idle := 0
			for _, m := range machines.Items {
				if m.Spec.ClaimRef != nil {
					continue
				}
				np := &networkingv1.NetworkPolicy{}
				g.Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: poolNS, Name: m.Name}, np)).To(Succeed())
				g.Expect(np.Spec.Ingress).To(BeEmpty(), "an idle machine lets nobody in")
				g.Expect(np.Spec.PolicyTypes).To(ConsistOf(networkingv1.PolicyTypeIngress))
				idle++
			}
			g.Expect(idle).To(BeNumerically(">=", 1))
		}).WithTimeout(timeout).Should(Succeed())
	})

	Context("of hand-made Ready machines (only the claim controller runs)", func() {
		var class *macvirtv1alpha1.MacClass
		var pool *macvirtv1alpha1.MacPool
		var tenant string
		BeforeEach(func() {
			DeferCleanup(startOperator(claimsOnly))
			class = newClass(func(c *macvirtv1alpha1.MacClass) {
				c.Spec.Tenancy.AllowedAccessTypes = []macvirtv1alpha1.AccessType{macvirtv1alpha1.AccessClusterIP, macvirtv1alpha1.AccessLoadBalancer}
			})
			pool, _ = newPool(class.Name, 0, 4, func(p *macvirtv1alpha1.MacPool) { p.Spec.Paused = true })
			readyIdleMachines(pool, class, 1)
			m := &macvirtv1alpha1.MacMachine{}
			Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: pool.Spec.Namespace, Name: pool.Name + "-0"}, m)).To(Succeed())
			m.Status.Addresses, m.Status.NodeName = []string{"10.244.0.5"}, "apple-1"
			Expect(k8sClient.Status().Update(context.Background(), m)).To(Succeed())
			tenant = newNamespace()
		})

		It("publishes a ClusterIP claim's name under the namespace Service, following the machine to another node and address", func() {
			k := key(newClaim(tenant, func(c *macvirtv1alpha1.MacClaim) { c.GenerateName, c.Name, c.Spec.PoolName = "", "ci", pool.Name }))
			Eventually(func(g Gomega) {
				_, slice := serviceOf(tenant, "ci.macs")
				g.Expect(slice).NotTo(BeNil())
				g.Expect(slice.Labels).To(HaveKeyWithValue(discoveryv1.LabelServiceName, "macs"))
				g.Expect(slice.Endpoints).To(ConsistOf(And(HaveField("Addresses", ConsistOf("10.244.0.5")),
					HaveField("Hostname", HaveValue(Equal("ci"))), HaveField("NodeName", HaveValue(Equal("apple-1"))))))
			}).WithTimeout(timeout).Should(Succeed())
			svc, _ := serviceOf(tenant, "macs")
			Expect(svc).NotTo(BeNil())
			Expect(svc.Spec.ClusterIP).To(Equal(corev1.ClusterIPNone), "headless: no cluster IP allocated")
			Expect(svc.Spec.Selector).To(BeEmpty())
			Expect(svc.OwnerReferences).To(BeEmpty(), "it serves every claim of the namespace")
			own, _ := serviceOf(tenant, "ci")
			Expect(own).To(BeNil(), "a ClusterIP claim has no Service of its own")
			Expect(getClaim(k).Status.Connection).To(And(HaveField("Host", "ci.macs."+tenant+".svc"), HaveField("ServiceName", "macs")))
			By("its instance restarts on another node")
			m := getMachine(types.NamespacedName{Namespace: pool.Spec.Namespace, Name: getClaim(k).Status.MachineRef.Name})
			m.Status.Addresses, m.Status.NodeName = []string{"10.244.3.7"}, "apple-2"
			Expect(k8sClient.Status().Update(context.Background(), m)).To(Succeed())
			Eventually(func(g Gomega) {
				_, slice := serviceOf(tenant, "ci.macs")
				g.Expect(slice.Endpoints).To(ConsistOf(And(HaveField("Addresses", ConsistOf("10.244.3.7")), HaveField("NodeName", HaveValue(Equal("apple-2"))))))
				g.Expect(getClaimWith(g, k).Status.Connection).To(HaveField("Address", "10.244.3.7"))
			}).WithTimeout(timeout).Should(Succeed())
		})

		It("reports a load balancer's address, once it has one", func() {
			k := key(newClaim(tenant, func(c *macvirtv1alpha1.MacClaim) {
				c.GenerateName, c.Name, c.Spec.PoolName, c.Spec.Access.Type = "", "lb", pool.Name, macvirtv1alpha1.AccessLoadBalancer
			}))
			var svc *corev1.Service
			Eventually(func(g Gomega) {
				svc, _ = serviceOf(tenant, "lb")
				g.Expect(svc).NotTo(BeNil())
			}).WithTimeout(timeout).Should(Succeed())
			Expect(svc.Spec.Type).To(Equal(corev1.ServiceTypeLoadBalancer))
			By("the cloud's load balancer controller gives it an address")
			svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.7"}}
			Expect(k8sClient.Status().Update(context.Background(), svc)).To(Succeed())
			Eventually(func(g Gomega) {
				g.Expect(getClaimWith(g, k).Status.Connection).To(HaveField("External",
					HaveValue(And(HaveField("Address", "203.0.113.7"), HaveField("SSHPort", int32(22))))))
			}).WithTimeout(timeout).Should(Succeed())
		})

		It("keeps a LoadBalancer claim's Service and address when its class is deleted: the Service follows the machine's revision", func() {
			k := key(newClaim(tenant, func(c *macvirtv1alpha1.MacClaim) {
				c.GenerateName, c.Name, c.Spec.PoolName, c.Spec.Access.Type = "", "kept", pool.Name, macvirtv1alpha1.AccessLoadBalancer
			}))
			var svc *corev1.Service
			Eventually(func(g Gomega) {
				svc, _ = serviceOf(tenant, "kept")
				g.Expect(svc).NotTo(BeNil())
			}).WithTimeout(timeout).Should(Succeed())
			Expect(svc.Spec.Type).To(Equal(corev1.ServiceTypeLoadBalancer))
			svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.9"}}
			Expect(k8sClient.Status().Update(context.Background(), svc)).To(Succeed())
			Eventually(func(g Gomega) {
				g.Expect(getClaimWith(g, k).Status.Connection).To(HaveField("External", HaveValue(HaveField("Address", "203.0.113.9"))))
			}).WithTimeout(timeout).Should(Succeed())

			By("the class goes; the class controller kept a snapshot of the machine's revision")
			m := getMachine(types.NamespacedName{Namespace: pool.Spec.Namespace, Name: getClaim(k).Status.MachineRef.Name})
			snap, err := classhistory.New(operatorNamespace, class, m.Spec.ClassRevision)
			Expect(err).NotTo(HaveOccurred())
			Expect(k8sClient.Create(context.Background(), snap)).To(Succeed())
			DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(context.Background(), snap))).To(Succeed()) })
			Expect(k8sClient.Delete(context.Background(), class)).To(Succeed())
			Eventually(func() bool {
				return apierrors.IsNotFound(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(class), &macvirtv1alpha1.MacClass{}))
			}).WithTimeout(timeout).Should(BeTrue())
			claim := getClaim(k)
			before := claim.DeepCopy()
			claim.Annotations = map[string]string{"test.macvirt.io/touched": "after the class went"}
			Expect(k8sClient.Patch(context.Background(), claim, client.MergeFrom(before))).To(Succeed())
			Consistently(func(g Gomega) {
				svc, _ := serviceOf(tenant, "kept")
				g.Expect(svc).NotTo(BeNil())
				g.Expect(svc.Spec.Type).To(Equal(corev1.ServiceTypeLoadBalancer), "a deleted class turned the claim's LoadBalancer into a %s", svc.Spec.Type)
				g.Expect(getClaimWith(g, k).Status.Connection).To(HaveField("External", HaveValue(HaveField("Address", "203.0.113.9"))))
			}).WithTimeout(3 * time.Second).Should(Succeed())
		})

		It("is reached inside the cluster, saying why, when the claim asks for an access type its class does not allow", func() {
			k := key(newClaim(tenant, func(c *macvirtv1alpha1.MacClaim) {
				c.GenerateName, c.Name, c.Spec.PoolName, c.Spec.Access.Type = "", "np", pool.Name, macvirtv1alpha1.AccessNodePort
			}))
			Eventually(claimCondition(k, macvirtv1alpha1.ConditionServiceReady)).WithTimeout(timeout).Should(And(
				HaveField("Reason", macvirtv1alpha1.ReasonAccessTypeNotAllowed), HaveField("Message", ContainSubstring("allowedAccessTypes")),
				HaveField("Status", metav1.ConditionTrue)))
			svc, _ := serviceOf(tenant, "np")
			Expect(svc).To(BeNil(), "no node port")
			Expect(getClaim(k).Status.Connection).To(HaveField("Host", "np.macs."+tenant+".svc"))
		})

		It("leaves a tenant's own Service named like the namespace Service alone, and says so", func() {
			mine := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "macs", Namespace: tenant},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "pg", Port: 5432}}, Selector: map[string]string{"app": "db"}}}
			Expect(k8sClient.Create(context.Background(), mine)).To(Succeed())
			k := key(newClaim(tenant, func(c *macvirtv1alpha1.MacClaim) { c.GenerateName, c.Name, c.Spec.PoolName = "", "db", pool.Name }))
			Eventually(claimCondition(k, macvirtv1alpha1.ConditionServiceReady)).WithTimeout(timeout).Should(And(
				HaveField("Status", metav1.ConditionFalse), HaveField("Reason", macvirtv1alpha1.ReasonServiceConflict)))
			Expect(claimPhase(k)()).To(Equal(macvirtv1alpha1.ClaimReady), "reachable at its address all the same")
			got := &corev1.Service{}
			Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(mine), got)).To(Succeed())
			Expect(got.Spec.Ports).To(ConsistOf(HaveField("Name", "pg")))
			Expect(got.Spec.Selector).To(HaveKeyWithValue("app", "db"))
			Expect(got.OwnerReferences).To(BeEmpty())
			Expect(getClaim(k).Status.Connection.Host).To(BeEmpty())
			Expect(getClaim(k).Status.Connection.Address).To(Equal("10.244.0.5"))
			Expect(strings.Contains(meta.FindStatusCondition(getClaim(k).Status.Conditions, macvirtv1alpha1.ConditionServiceReady).Message,
				"Service "+tenant+"/macs exists and is not macvirt's headless Service")).To(BeTrue())
			_, slice := serviceOf(tenant, "db.macs")
			Expect(slice).To(BeNil(), "no name published under a Service that is not macvirt's")
		})
	})
})
