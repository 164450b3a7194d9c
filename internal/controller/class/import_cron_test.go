package class

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/macvirt/macvirt/internal/controller/controllertest"
)

// A refreshed class keeps its DataImportCron: created, updated when the
// schedule changes, deleted when refresh is turned off. Its owner reference
// has no blockOwnerDeletion, which where OwnerReferencesPermissionEnforcement
// is on would need a right on macclasses/finalizers the operator lacks.
func TestARefreshedClassKeepsItsCronAndDeletesItWhenRefreshIsOff(t *testing.T) {
	ctx := context.Background()
	scheme := controllertest.Scheme(t)
	if err := cdiv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	r := &Reconciler{Client: c, ImagesNamespace: "imgs"}
	class := refreshedClass()
	class.UID = "class-uid"
	key := types.NamespacedName{Namespace: "imgs", Name: ImportName(class.Name)}
	cron := &cdiv1.DataImportCron{}
	ensure := func() {
		t.Helper()
		if _, err := r.ensureImageImport(ctx, &classScope{Name: class.Name, Class: class}); err != nil {
			t.Fatal(err)
		}
	}

	ensure()
	if err := c.Get(ctx, key, cron); err != nil {
		t.Fatal(err)
	}
	if cron.Spec.Schedule != "0 */6 * * *" || !metav1.IsControlledBy(cron, class) || cron.OwnerReferences[0].BlockOwnerDeletion != nil {
		t.Errorf("cron %+v %+v; want the class's schedule, controlled by the class, without blockOwnerDeletion", cron.Spec.Schedule, cron.OwnerReferences)
	}

	class.Spec.Image.Refresh.Schedule = "0 3 * * *"
	ensure()
	if err := c.Get(ctx, key, cron); err != nil || cron.Spec.Schedule != "0 3 * * *" {
		t.Errorf("after a new schedule: %v %q; want it updated", err, cron.Spec.Schedule)
	}

	class.Spec.Image.Refresh = nil
	ensure()
	if err := c.Get(ctx, key, cron); !apierrors.IsNotFound(err) {
		t.Errorf("refresh off: %v; want the cron deleted", err)
	}
}
