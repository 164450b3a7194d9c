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

package simulator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
)

// CDI's DataVolume admission. CDI's apiserver registers a mutating webhook,
// datavolume-mutate.cdi.kubevirt.io (failurePolicy Fail), whose Admit
// authorises the clone a DataVolume asks for (pkg/apiserver/webhooks/
// datavolume-mutate.go; AuthorizeUser and newCloneSourceHandler in the
// API's authorize.go): it reads the DataSource a spec.sourceRef names, and
// a DataSource that does not exist refuses the create with 400 and the API
// server's NotFound text. The simulator serves that check at a local URL
// and registers it with the API server. Not imitated: the clone token
// annotation CDI adds, and the SubjectAccessReviews of a clone from another
// namespace (macvirt's DataVolumes clone from the namespace their
// DataSource is in, with the operator's own rights).

// dataVolumeMutateWebhook is the name CDI registers its webhook under.
const dataVolumeMutateWebhook = "datavolume-mutate.cdi.kubevirt.io"

// CDI's annotations that let a DataVolume through with no source to clone
// (authorize.go: ErrNoTokenOkay).
const (
	annPrePopulated      = "cdi.kubevirt.io/storage.prePopulated"
	annCheckStaticVolume = "cdi.kubevirt.io/storage.checkStaticVolume"
)

// dataVolumeAdmission serves CDI's DataVolume webhook, registered under a
// configuration of its own, until the manager stops.
type dataVolumeAdmission struct {
	sim *Simulator
	srv *httptest.Server
	cfg *admissionregistrationv1.MutatingWebhookConfiguration
}

// startDataVolumeAdmission serves the webhook and registers it at once, so
// that no DataVolume created after SetupWithManager escapes it.
func (s *Simulator) startDataVolumeAdmission(ctx context.Context) (*dataVolumeAdmission, error) {
	a := &dataVolumeAdmission{sim: s}
	a.srv = httptest.NewTLSServer(http.HandlerFunc(a.serve))
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		a.srv.Close()
		return nil, err
	}
	side := admissionregistrationv1.SideEffectClassNone
	a.cfg = &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "sim-cdi-api-datavolume-mutate-" + hex.EncodeToString(suffix)},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: dataVolumeMutateWebhook,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				URL:      ptr.To(a.srv.URL + "/datavolume-mutate"),
				CABundle: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.srv.Certificate().Raw}),
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{cdiv1.SchemeGroupVersion.Group},
					APIVersions: []string{cdiv1.SchemeGroupVersion.Version}, Resources: []string{"datavolumes"}},
			}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             &side,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if err := s.client.Create(ctx, a.cfg); err != nil {
		a.srv.Close()
		return nil, fmt.Errorf("registering the simulated CDI DataVolume webhook: %w", err)
	}
	return a, nil
}

// Start keeps the webhook until the manager stops, then takes it away: the
// API server would otherwise call a server that is gone.
func (a *dataVolumeAdmission) Start(ctx context.Context) error {
	<-ctx.Done()
	// Unregistered first: with failure policy Fail, a registration
	// outliving its server would refuse every DataVolume.
	_ = a.sim.client.Delete(context.WithoutCancel(ctx), a.cfg)
	a.srv.Close()
	return nil
}

// NeedLeaderElection: cdi-apiserver answers whoever leads.
func (*dataVolumeAdmission) NeedLeaderElection() bool { return false }

// serve answers one AdmissionReview.
func (a *dataVolumeAdmission) serve(w http.ResponseWriter, req *http.Request) {
	ctx := req.Context()
	body, err := io.ReadAll(io.LimitReader(req.Body, 4<<20))
	review := &admissionv1.AdmissionReview{}
	if err == nil {
		err = json.Unmarshal(body, review)
	}
	if err != nil || review.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	dv := &cdiv1.DataVolume{}
	if err := json.Unmarshal(review.Request.Object.Raw, dv); err != nil {
		resp.Allowed, resp.Result = false, &metav1.Status{Code: http.StatusBadRequest, Message: err.Error()}
	} else if refusal := a.refusal(ctx, dv); refusal != nil {
		resp.Allowed, resp.Result = false, refusal
	}
	review.Response, review.Request = resp, nil
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(review); err != nil {
		ctrl.Log.WithName("sim-cdi-apiserver").Error(err, "answering an AdmissionReview")
	}
}

// refusal is CDI's answer to a DataVolume whose clone source cannot be
// authorised, or nil: a sourceRef to a DataSource that does not exist.
func (a *dataVolumeAdmission) refusal(ctx context.Context, dv *cdiv1.DataVolume) *metav1.Status {
	ref := dv.Spec.SourceRef
	if ref == nil || ref.Kind != cdiv1.DataVolumeDataSource {
		return nil
	}
	if _, ok := dv.Annotations[annPrePopulated]; ok {
		return nil
	}
	if _, ok := dv.Annotations[annCheckStaticVolume]; ok {
		return nil
	}
	ns := dv.Namespace
	if ref.Namespace != nil && *ref.Namespace != "" {
		ns = *ref.Namespace
	}
	err := a.sim.reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, &cdiv1.DataSource{})
	if err == nil {
		return nil
	}
	// toAdmissionResponseError: the error's text (the API server's
	// `datasources.cdi.kubevirt.io "name" not found`), code 400, no causes.
	return &metav1.Status{Code: http.StatusBadRequest, Message: err.Error()}
}
