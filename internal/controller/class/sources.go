package class

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// dataSourceNotReady says, in CDI's words, why a DataSource is not Ready. A
// DataSource CDI does not report Ready has nothing to clone from: CDI gives
// the DataVolumes cloned from it no status at all, or CloneWithoutSource
// (pkg/controller/datasource-controller.go;
// pkg/controller/datavolume/controller-base.go, getSourceRefOp).
func dataSourceNotReady(ds *cdiv1.DataSource) (string, bool) {
	for _, c := range ds.Status.Conditions {
		if c.Type != cdiv1.DataSourceReady {
			continue
		}
		if c.Status == corev1.ConditionTrue {
			return "", false
		}
		return fmt.Sprintf("CDI reports Ready=%s, %s: %s", c.Status, c.Reason, c.Message), true
	}
	return "CDI has not reported it Ready yet", true
}

// notReadyProblem is the class's problem when DataSources exist but are not
// Ready; nil when there are none.
func notReadyProblem(notReady []string) *base.Problem {
	if len(notReady) == 0 {
		return nil
	}
	return &base.Problem{Reason: macvirtv1alpha1.ReasonDataSourceNotReady,
		Message: "not ready: " + strings.Join(notReady, ", ") + "; machines of this class wait until CDI has a source to clone"}
}

func reasonOf(err error) string {
	switch {
	case apierrors.IsNotFound(err):
		return "not found"
	case apierrors.IsForbidden(err):
		return "forbidden: the operator reads Secrets only in its own namespace unless granted more"
	}
	return err.Error()
}
