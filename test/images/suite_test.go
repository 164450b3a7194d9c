// Package images_test runs macvirt's golden-image lifecycle end to end: the
// operator with its webhooks against the KubeVirt and CDI simulator, whose
// guests run the agent's real protocol and generalisation on disks whose
// contents clones, snapshots and restores carry (so what a captured Mac
// held is in its image, and what its clones shed can be checked), and a
// simulated registry behind CDI's DataImportCron.
package images_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/test/harness"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

// The suite's world: macvirt at work, with a registry the simulated CDI
// polls for refreshed images.
var (
	world    *harness.World
	admin    client.Client
	system   *harness.System
	registry *simulator.Registry
	ctx      context.Context
)

func TestImages(t *testing.T) {
	cluster.NeedsAPIServer(t)
	RegisterFailHandler(Fail)
	RunSpecs(t, "Golden Images Suite")
}

var _ = BeforeSuite(func() {
	SetDefaultEventuallyTimeout(3 * time.Minute)
	SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	registry = simulator.NewRegistry()
	world = harness.ForTest(GinkgoT(), harness.Options{Log: GinkgoWriter,
		System: &harness.SystemOptions{Speed: 4, Registry: registry}, Samples: &harness.SampleOptions{}})
	admin, system, ctx = world.Admin, world.System, world.Ctx

	By("two storage classes: the default can only copy; fast is a CSI driver's with a VolumeSnapshotClass")
	immediate := storagev1.VolumeBindingImmediate
	Expect(admin.Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "standard",
		Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner: "rancher.io/local-path", VolumeBindingMode: &immediate})).To(Succeed())
	Expect(admin.Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: fastDriver}})).To(Succeed())
	Expect(admin.Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: fastClass},
		Provisioner: fastDriver, VolumeBindingMode: &immediate, AllowVolumeExpansion: ptr.To(true)})).To(Succeed())
	Expect(admin.Create(ctx, &snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: "fast-snapshots"},
		Driver: fastDriver, DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete})).To(Succeed())
})

// The storage class whose clones are snapshot restores, and its driver.
const (
	fastClass  = "fast"
	fastDriver = "fast.csi.example.com"
)

// showKubectl logs `kubectl get <args>` against the test cluster when
// MACVIRT_SHOW_KUBECTL is set and kubectl is installed: a picture for a
// person reading the log, never a check.
func showKubectl(args ...string) {
	if os.Getenv("MACVIRT_SHOW_KUBECTL") == "" {
		return
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		return
	}
	path := filepath.Join(GinkgoT().TempDir(), "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: world.Config.Host, CertificateAuthorityData: world.Config.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: world.Config.CertData, ClientKeyData: world.Config.KeyData, Token: world.Config.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "admin"}
	kc.CurrentContext = "test"
	if clientcmd.WriteToFile(*kc, path) != nil {
		return
	}
	out, _ := exec.Command(kubectl, append([]string{"--kubeconfig", path, "get"}, args...)...).CombinedOutput() //nolint:gosec // the test's own kubeconfig.
	GinkgoWriter.Printf("$ kubectl get %s\n%s\n", strings.Join(args, " "), out)
}
