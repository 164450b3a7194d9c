/*
Copyright 2026 The macvirt Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package hosts_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"golang.org/x/crypto/ssh"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/kubectlmac"
	"github.com/macvirt/macvirt/internal/tunnel"
	"github.com/macvirt/macvirt/test/harness"
)

var _ = Describe("A tenant's ssh to a Mac on an Apple-silicon host", func() {
	It("goes through the API server and the host agent's own connection out to the operator, authorised as on KubeVirt", func() {
		const spec = "tunnel"
		const a = "tunnel-mac-a"
		macs := startMacs(spec, nil, a)
		class := vzClass(spec)
		ns := namespace(spec)
		p := pool(spec, class, 1)
		awaitIdle(p, 1)

		By("a tenant with the shipped roles claims a Mac with kubectl mac, from a laptop that reaches only the API server")
		dir := GinkgoT().TempDir()
		Expect(harness.SetUpTenant(ctx, admin, "carol", ns)).To(Succeed())
		kubeconfig := filepath.Join(dir, "carol.kubeconfig")
		Expect(harness.WriteTenantKubeconfig(world.Cluster.Environment, "carol", ns, kubeconfig)).To(Succeed())
		key := filepath.Join(dir, "id_ed25519")
		writeSSHKey(key)
		mac := func(args ...string) (int, string, string) {
			var out, errOut bytes.Buffer
			all := append([]string{"--kubeconfig", kubeconfig, "-n", ns}, args...)
			code := kubectlmac.Main(ctx, all, kubectlmac.Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
			GinkgoWriter.Printf("$ kubectl mac %s\n%s%s(exit %d)\n", strings.Join(args, " "), out.String(), errOut.String(), code)
			return code, out.String(), errOut.String()
		}
		began := time.Now()
		code, _, _ := mac("claim", "laptop", "--class", class, "--ssh-key", key+".pub", "--wait", "--timeout", "3m")
		Expect(code).To(BeZero())
		claimed := time.Since(began)
		claim := &macvirtv1alpha1.MacClaim{}
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "laptop"}, claim)).To(Succeed())
		conn := claim.Status.Connection
		Expect(conn).NotTo(BeNil())
		Expect(conn.Address).To(BeEmpty(), "the guest's NAT address routes nowhere in the cluster")
		Expect(conn.HostKeys).NotTo(BeEmpty(), "the guest's host keys, for kubectl mac to check at the other end")
		m := &macvirtv1alpha1.MacMachine{}
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: claim.Status.MachineRef.Namespace, Name: claim.Status.MachineRef.Name}, m)).To(Succeed())
		Expect(m.Spec.HostName).To(Equal(a))

		By("kubectl mac ssh reaches the guest's sshd through the tunnel, checking its host key")
		// A pool's Mac was Ready before the claim bound it: the guest agent
		// gets the claim's keys with its next heartbeat's answer.
		began = time.Now()
		Eventually(func() string {
			_, out, _ := mac("ssh", "laptop", "-i", key, "--", "hostname")
			return strings.TrimSpace(out)
		}).WithPolling(time.Second).Should(Equal(m.Status.Host.VMName), "the guest of the claim's own VM answers")
		sshTook := time.Since(began)
		code, out, _ := mac("ssh", "laptop", "-i", key, "--", "sw_vers")
		Expect(code).To(BeZero())
		Expect(out).To(ContainSubstring("ProductVersion:\t\t15.5"), "the guest answers as the macOS its agent reports")
		code, _, errOut := mac("ssh", "laptop", "-i", key, "--via", "direct", "--", "true")
		Expect(code).NotTo(BeZero())
		Expect(errOut).To(ContainSubstring("--via tunnel"), "directly, the tenant is told the only way in")

		By("only the class's ports, only for the claim's own tenant")
		tenantCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		Expect(err).NotTo(HaveOccurred())
		_, err = tunnel.Dial(ctx, tenantCfg, ns, "laptop", 8080)
		Expect(apierrors.IsServiceUnavailable(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("port 8080 of macclaim " + ns + "/laptop is not open"))
		_, err = tunnel.Dial(ctx, tenantCfg, ns, "laptop", 5900)
		Expect(err).To(MatchError(ContainSubstring("is not open")), "the class offers no Screen Sharing")
		Expect(harness.SetUpTenant(ctx, admin, "mallory", spec+"-other")).To(Succeed())
		other := filepath.Join(dir, "mallory.kubeconfig")
		Expect(harness.WriteTenantKubeconfig(world.Cluster.Environment, "mallory", spec+"-other", other)).To(Succeed())
		malloryCfg, err := clientcmd.BuildConfigFromFlags("", other)
		Expect(err).NotTo(HaveOccurred())
		_, err = tunnel.Dial(ctx, malloryCfg, ns, "laptop", 22)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "another namespace's tenant: %v", err)

		By("the tunnel rides on the host agent's connection: with the agent stopped there is none, and back once it reconnects")
		macs.Halt(a)
		Eventually(func() error {
			c, err := tunnel.Dial(ctx, tenantCfg, ns, "laptop", 22)
			if err == nil {
				_ = c.Close()
			}
			return err
		}).Should(MatchError(ContainSubstring("holds no tunnel connection")))
		Expect(macs.Start(ctx, a)).To(Succeed())
		Eventually(func() int {
			code, _, _ := mac("ssh", "laptop", "-i", key, "--", "true")
			return code
		}).Should(BeZero())

		By("released, its tunnel ends with it")
		code, _, _ = mac("release", "laptop")
		Expect(code).To(BeZero())
		Eventually(func() bool {
			return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(m), &macvirtv1alpha1.MacMachine{}))
		}).Should(BeTrue())
		GinkgoWriter.Printf("a VZ Mac claimed and Ready in %s; kubectl mac ssh -- hostname answered through the tunnel %s later (the keys ride on the next heartbeat)\n",
			claimed.Round(time.Millisecond), sshTook.Round(time.Millisecond))
	})
})

// writeSSHKey writes an ed25519 key pair at path and path.pub.
func writeSSHKey(path string) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	Expect(err).NotTo(HaveOccurred())
	block, err := ssh.MarshalPrivateKey(priv, "")
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(path, pem.EncodeToMemory(block), 0o600)).To(Succeed())
	sshPub, err := ssh.NewPublicKey(pub)
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(path+".pub", ssh.MarshalAuthorizedKey(sshPub), 0o600)).To(Succeed())
}
