package machine

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/macvirt/macvirt/internal/controller/controllertest"
)

// A DataVolume cloned from a DataSource is created only when the DataSource
// exists (CDI's webhook refuses one that clones from a missing DataSource)
// and names a disk in its own namespace: CDI authorises the clone for the
// operator, which may clone anywhere, while admission asked the class's
// author about the DataSource's namespace only.
func TestClonesOnlyFromADataSourcesOwnNamespace(t *testing.T) {
	ds := func(name string, src cdiv1.DataSourceSource) client.Object {
		return &cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Namespace: "carol", Name: name}, Spec: cdiv1.DataSourceSpec{Source: src}}
	}
	scheme := controllertest.Scheme(t)
	if err := cdiv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		ds("own", cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "carol", Name: "disk"}}),
		ds("implicit", cdiv1.DataSourceSource{Snapshot: &cdiv1.DataVolumeSourceSnapshot{Name: "snap"}}),
		ds("elsewhere", cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "team-b", Name: "secret-disk"}}),
		ds("snap-elsewhere", cdiv1.DataSourceSource{Snapshot: &cdiv1.DataVolumeSourceSnapshot{Namespace: "team-b", Name: "s"}}),
		ds("chained", cdiv1.DataSourceSource{DataSource: &cdiv1.DataSourceRefSourceDataSource{Namespace: "carol", Name: "own"}}),
	).Build()}
	for _, tc := range []struct{ source, problem string }{
		{"own", ""}, {"implicit", ""},
		{"missing", "DataSource carol/missing does not exist, and CDI refuses a DataVolume (m-system)"},
		{"elsewhere", "names PVC team-b/..., outside its own namespace"},
		{"snap-elsewhere", "names VolumeSnapshot team-b/..., outside its own namespace"},
		{"chained", "names another DataSource"},
	} {
		t.Run(tc.source, func(t *testing.T) {
			ns := "carol"
			dv := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "macvirt-pools", Name: "m-system"},
				Spec: cdiv1.DataVolumeSpec{SourceRef: &cdiv1.DataVolumeSourceRef{Kind: cdiv1.DataVolumeDataSource, Namespace: &ns, Name: tc.source}}}
			p, err := r.cloneSourceProblem(context.Background(), dv)
			switch {
			case err != nil:
				t.Fatal(err)
			case tc.problem == "" && p != nil:
				t.Errorf("refused: %s", p.Message)
			case tc.problem != "" && (p == nil || !strings.Contains(p.Message, tc.problem)):
				t.Errorf("problem %+v; want one saying %q", p, tc.problem)
			}
		})
	}
}
