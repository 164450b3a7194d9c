package guestendpoint

import (
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strings"

	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create

// HostConfigHandler gives a host agent the configuration of a machine
// placed on its Mac, for the VM it is about to start
// (docs/design/apple-silicon-runtime.md, section 7): the token of that
// boot, drawn anew, with the endpoint and the machine's names. The agent
// proves who it is with its ServiceAccount's token, which the API server
// reviews; it is answered only for machines whose spec.hostName is its
// own Mac. Host agents never read Secrets.
type HostConfigHandler struct {
	// Client reads machines (a cache is fine), creates TokenReviews and
	// issues tokens (a Secret created, the machine patched).
	Client client.Client
	// Address is what every configuration says about the endpoint.
	Address Address
	// Limiter bounds the requests answered, whoever sends them (each costs
	// a TokenReview); nil: 20 per second, bursts of 40.
	Limiter *rate.Limiter
}

// unplaced is one answer for a machine that does not exist and one placed
// elsewhere, so a host cannot learn which machines exist.
const unplaced = "no machine of that name and UID is placed on this host"

func (h *HostConfigHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeProblem(w, http.StatusMethodNotAllowed, guestprotocol.ReasonMethodNotAllowed, "use POST")
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeProblem(w, http.StatusUnsupportedMediaType, guestprotocol.ReasonUnsupported, "the body must be application/json")
		return
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		writeProblem(w, http.StatusUnauthorized, guestprotocol.ReasonUnauthorized,
			"send the host's ServiceAccount token (macvirt-hosts/<host>) as Authorization: Bearer <token>")
		return
	}
	if h.Limiter == nil {
		h.Limiter = rate.NewLimiter(20, 40)
	}
	if !h.Limiter.Allow() {
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusTooManyRequests, guestprotocol.ReasonRateLimited, "too many configuration requests; retry in a second")
		return
	}
	var req guestprotocol.HostConfigRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, guestprotocol.MaxHostConfigRequestBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.Machine.Namespace == "" || req.Machine.Name == "" || req.UID == "" {
		msg := "the body must be {\"machine\":{\"namespace\":...,\"name\":...},\"uid\":...}"
		if err != nil {
			msg += ": " + err.Error()
		}
		writeProblem(w, http.StatusBadRequest, guestprotocol.ReasonMalformed, msg)
		return
	}
	ctx := r.Context()
	log := ctrl.LoggerFrom(ctx).WithName("host-config")
	host, err := h.hostOf(r, token)
	if err != nil {
		writeProblem(w, http.StatusUnauthorized, guestprotocol.ReasonUnauthorized, err.Error())
		return
	}
	m := &macvirtv1alpha1.MacMachine{}
	key := types.NamespacedName{Namespace: req.Machine.Namespace, Name: req.Machine.Name}
	if err := h.Client.Get(ctx, key, m); err != nil && !apierrors.IsNotFound(err) {
		writeProblem(w, http.StatusInternalServerError, guestprotocol.ReasonInternal, "reading the machine failed; retry")
		return
	} else if err != nil || m.Spec.HostName != host || string(m.UID) != req.UID {
		writeProblem(w, http.StatusForbidden, guestprotocol.ReasonUnauthorized, unplaced)
		return
	}
	if !m.DeletionTimestamp.IsZero() {
		writeProblem(w, http.StatusConflict, guestprotocol.ReasonUnauthorized, "the machine is being deleted; its VM is not started again")
		return
	}
	// A start is a new boot: the machine's token is drawn anew, and only
	// the guest of this start holds it. The operator never reads a Secret.
	files, err := ReissueToken(ctx, h.Client, m.DeepCopy(), h.Address)
	if err != nil {
		log.Info("issuing a machine's token for its host failed; the host retries", "machine", key, "host", host, "error", err.Error())
		w.Header().Set("Retry-After", "2")
		writeProblem(w, http.StatusServiceUnavailable, guestprotocol.ReasonInternal, "issuing the machine's token failed; retry")
		return
	}
	out := guestprotocol.HostConfig{Files: files}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(out)
}

// hostOf asks the API server whose token it is, and returns the Mac of a
// host agent's ServiceAccount.
func (h *HostConfigHandler) hostOf(r *http.Request, token string) (string, error) {
	ctx := r.Context()
	review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}
	if err := h.Client.Create(ctx, review); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "reviewing a host agent's token")
		return "", errors.New("the token could not be reviewed; retry")
	}
	if !review.Status.Authenticated {
		return "", errors.New("the token is not valid (expired, or not the cluster's)")
	}
	prefix := "system:serviceaccount:" + macvirtv1alpha1.HostAgentNamespace + ":"
	host, ok := strings.CutPrefix(review.Status.User.Username, prefix)
	if !ok || host == "" || strings.Contains(host, ":") {
		return "", errors.New("the token is not a host agent's: give the token of the ServiceAccount named like the Mac in " +
			macvirtv1alpha1.HostAgentNamespace)
	}
	return host, nil
}
