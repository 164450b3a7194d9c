package claim

import (
	"context"
	"errors"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// failingWrites fails the updates and the status patches made through it
// with the errors given (nil: lets them through).
type failingWrites struct {
	client.Client
	update, status error
}

func (f failingWrites) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if f.update != nil {
		return f.update
	}
	return f.Client.Update(ctx, obj, opts...)
}

func (f failingWrites) Status() client.SubResourceWriter {
	return failingStatus{SubResourceWriter: f.Client.Status(), err: f.status}
}

type failingStatus struct {
	client.SubResourceWriter
	err error
}

func (f failingStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if f.err != nil {
		return f.err
	}
	return f.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// The reconcile's one deferred function writes the status first, from
// what the steps found, and then makes a conflict (a step's, or the status
// write's) a quiet requeue; any other error is the reconcile's.
func TestAConflictIsLookedAtAgainQuietlyAfterTheStatusPart(t *testing.T) {
	gr := schema.GroupResource{Group: macvirtv1alpha1.GroupVersion.Group, Resource: "macclaims"}
	conflict := apierrors.NewConflict(gr, "build", errors.New("the object has been modified"))
	refused := apierrors.NewForbidden(gr, "build", errors.New("a policy says no"))
	for name, tc := range map[string]struct {
		update, status error
		wantRequeue    bool
		wantRefusal    bool
		wantWrites     []string
	}{
		"the status write meets a newer claim": {status: conflict, wantRequeue: true,
			wantWrites: []string{"update MacMachine", "patch MacClaim/status"}},
		"the binding meets a newer machine: no status from a scope it left incomplete": {update: conflict, wantRequeue: true,
			wantWrites: []string{"update MacMachine", "update MacMachine"}},
		"the status write is refused": {status: refused, wantRefusal: true, wantWrites: []string{"update MacMachine", "patch MacClaim/status"}},
	} {
		t.Run(name, func(t *testing.T) {
			c, w, _, r, req, m := claimFixture(t, macvirtv1alpha1.MacClaimSpec{})
			exposeTo(t, c, m, "team")
			w.Client = failingWrites{Client: w.Client, update: tc.update, status: tc.status}
			res, err := r.Reconcile(context.Background(), req)
			if (err != nil) != tc.wantRefusal || err != nil && !apierrors.IsForbidden(err) {
				t.Errorf("Reconcile = %v; want the refusal returned: %v", err, tc.wantRefusal)
			}
			if got := res.RequeueAfter == base.ConflictRetry; got != tc.wantRequeue {
				t.Errorf("requeue after %v; want a requeue after %v: %v", res.RequeueAfter, base.ConflictRetry, tc.wantRequeue)
			}
			if got := w.take(); !slices.Equal(got, tc.wantWrites) {
				t.Errorf("writes %q; want %q", got, tc.wantWrites)
			}
		})
	}
}
