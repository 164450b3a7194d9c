package base

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// An object whose last finalizer its reconcile removed is gone from the
// API server: its status is not patched (the patch would be a 404, one
// wasted request per deleted object). One still held by a finalizer is.
func TestWriteStatusSkipsAnObjectDeletedByItsLastFinalizer(t *testing.T) {
	now := metav1.Now()
	for name, tc := range map[string]struct {
		finalizers []string
		deleting   bool
		patches    int
	}{
		"deleted, no finalizer left":      {deleting: true, patches: 0},
		"deleted, held by a finalizer":    {deleting: true, finalizers: []string{testFinalizer}, patches: 1},
		"not deleted, with no finalizers": {patches: 1},
	} {
		t.Run(name, func(t *testing.T) {
			patches := 0
			c := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
				SubResourcePatch: func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
					patches++
					return nil
				},
			}).Build()
			obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "mac", Finalizers: tc.finalizers}}
			if tc.deleting {
				obj.DeletionTimestamp = &now
			}
			before := obj.DeepCopy()
			obj.Labels = map[string]string{"changed": "yes"}
			written, err := WriteStatus(context.Background(), c, obj, before, false)
			if err != nil {
				t.Fatal(err)
			}
			if patches != tc.patches || written != (tc.patches == 1) {
				t.Errorf("patches %d, written %v; want %d patches", patches, written, tc.patches)
			}
		})
	}
}
