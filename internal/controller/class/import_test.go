package class

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
)

// A DataSource of the managed name that CDI's cron did not make (a
// MacImage of that name, say) is not the class's image.
func TestARefreshedClassTakesOnlyItsCronsDataSource(t *testing.T) {
	for name, tc := range map[string]struct {
		labels   map[string]string
		resolved bool
	}{
		"the cron's":  {labels: map[string]string{labelDataImportCron: "nightly-image"}, resolved: true},
		"another one": {labels: map[string]string{macvirtv1alpha1.LabelImage: "nightly-image"}},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := macvirtscheme.New()
			if err != nil {
				t.Fatal(err)
			}
			class := refreshedClass()
			class.UID = "c1"
			ds := &cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Namespace: "macvirt-images", Name: "nightly-image", Labels: tc.labels},
				Spec: cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "macvirt-images", Name: "captured"}}},
				Status: cdiv1.DataSourceStatus{Conditions: []cdiv1.DataSourceCondition{{Type: cdiv1.DataSourceReady,
					ConditionState: cdiv1.ConditionState{Status: "True"}}}}}
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(class, ds).WithStatusSubresource(ds).Build()
			r := &Reconciler{Client: c, APIReader: c, Namespace: "macvirt-system", ImagesNamespace: "macvirt-images"}
			scope := &classScope{Name: class.Name, Class: class}
			if _, err := r.ensureImageImport(context.Background(), scope); err != nil {
				t.Fatal(err)
			}
			if got := scope.Image != nil && scope.Image.Resolved != nil; got != tc.resolved {
				t.Errorf("resolved = %v, want %v (image %+v, problem %+v)", got, tc.resolved, scope.Image, scope.ImageProblem)
			}
			if !tc.resolved && (scope.ImageProblem == nil || scope.ImageProblem.Reason != macvirtv1alpha1.ReasonNotOwned) {
				t.Errorf("problem = %+v, want NotOwned", scope.ImageProblem)
			}
			cron := &cdiv1.DataImportCron{}
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: "macvirt-images", Name: "nightly-image"}, cron); err != nil {
				t.Fatalf("the class's DataImportCron: %v", err)
			}
			if cron.Spec.ManagedDataSource != "nightly-image" || *cron.Spec.ImportsToKeep != macvirtv1alpha1.DefaultImportsToKeep ||
				!metav1.IsControlledBy(cron, class) {
				t.Errorf("cron = %+v", cron)
			}
		})
	}
}
