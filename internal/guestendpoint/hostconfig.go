package guestendpoint

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
	// Reader reads the machine fresh from the API server before its token
	// is reissued, so a cache behind by a write does not fail the patch;
	// nil reads through Client.
	Reader client.Reader
	// Address is what every configuration says about the endpoint.
	Address Address
	// Tunnels carries tenants' tunnels over the connections host agents
	// hold here (guestprotocol.HostTunnelsPath); nil refuses them.
	Tunnels HostTunnels

	mu sync.Mutex
	// reviewed remembers, by the token's hash, the host a TokenReview found,
	// for reviewTTL: a host's next start needs no review.
	reviewed map[string]reviewedToken
	// perClient limits, per client address, the requests that need a
	// TokenReview, so nobody (a guest can reach the endpoint too) starves
	// the hosts of the others by sending junk tokens.
	perClient map[string]*rate.Limiter
}

type reviewedToken struct {
	host  string
	until time.Time
}

// reviewTTL is how long a reviewed token counts without a new review.
const reviewTTL = time.Minute

// Per client address: reviews per second and burst; and the number of
// addresses kept before the table starts again.
const (
	reviewRate     = 2
	reviewBurst    = 10
	maxClientsKept = 4096
)

// hostConfigs counts the host agents' configuration requests by result:
// Issued, or the refusal's reason; a host with the wrong token, or someone
// trying tokens, shows here.
var hostConfigs = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "macvirt_host_config_requests_total",
	Help: "Host agents' requests for a VM's configuration, by result: Issued, or the refusal's reason (Unauthorized, RateLimited, Malformed, Unsupported, MethodNotAllowed, Internal).",
}, []string{"result"})

// writeHostProblem answers a host with the protocol's Error, and counts it.
func writeHostProblem(w http.ResponseWriter, code int, reason, msg string) {
	hostConfigs.WithLabelValues(reason).Inc()
	writeProblem(w, code, reason, msg)
}

// unplaced is one answer for a machine that does not exist and one placed
// elsewhere, so a host cannot learn which machines exist.
const unplaced = "no machine of that name and UID is placed on this host"

func (h *HostConfigHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == guestprotocol.HostTunnelsPath || strings.HasPrefix(r.URL.Path, guestprotocol.HostTunnelsPath+"/") {
		h.serveTunnel(w, r)
		return
	}
	token, refused := checkBearerPost(w, r, "the host's ServiceAccount token (macvirt-hosts/<host>)")
	if refused != nil {
		writeHostProblem(w, refused.code, refused.reason, refused.msg)
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
		writeHostProblem(w, http.StatusBadRequest, guestprotocol.ReasonMalformed, msg)
		return
	}
	ctx := r.Context()
	log := ctrl.LoggerFrom(ctx).WithName("host-config")
	host, refused := h.authenticate(w, r, token)
	if refused != nil {
		writeHostProblem(w, refused.code, refused.reason, refused.msg)
		return
	}
	key := types.NamespacedName{Namespace: req.Machine.Namespace, Name: req.Machine.Name}
	reader := h.Reader
	if reader == nil {
		reader = h.Client
	}
	var files map[string]string
	// The token's record on the machine is written with the machine's
	// resourceVersion, and the machine's controllers write it too: on a
	// conflict the machine is read again and the token drawn anew, so a
	// start is not refused for a write that raced it.
	for attempt := 1; ; attempt++ {
		m := &macvirtv1alpha1.MacMachine{}
		if err := reader.Get(ctx, key, m); err != nil && !apierrors.IsNotFound(err) {
			writeHostProblem(w, http.StatusInternalServerError, guestprotocol.ReasonInternal, "reading the machine failed; retry")
			return
		} else if err != nil || m.Spec.HostName != host || string(m.UID) != req.UID {
			writeHostProblem(w, http.StatusForbidden, guestprotocol.ReasonUnauthorized, unplaced+" (the agent's --host must be its ServiceAccount's name)")
			return
		}
		if !m.DeletionTimestamp.IsZero() {
			writeHostProblem(w, http.StatusConflict, guestprotocol.ReasonUnauthorized, "the machine is being deleted; its VM is not started again")
			return
		}
		// A start is a new boot: the machine's token is drawn anew, and
		// only the guest of this start holds it. The operator never reads
		// a Secret.
		var err error
		files, err = ReissueToken(ctx, h.Client, m.DeepCopy(), h.Address)
		if err == nil {
			break
		}
		if apierrors.IsConflict(err) && attempt < issueAttempts {
			// The machine's controllers write it in bursts (a binding,
			// the status after it): wait a little, then read it again.
			select {
			case <-time.After(time.Duration(attempt) * 25 * time.Millisecond):
			case <-ctx.Done():
				return
			}
			continue
		}
		log.Info("issuing a machine's token for its host failed; the host retries", "machine", key, "host", host, "error", err.Error())
		w.Header().Set("Retry-After", "2")
		writeHostProblem(w, http.StatusServiceUnavailable, guestprotocol.ReasonInternal,
			"issuing the machine's token failed, retry (the operator's log and the machine's events say why): "+apiReason(err))
		return
	}
	out := guestprotocol.HostConfig{Files: files}
	hostConfigs.WithLabelValues("Issued").Inc()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(out)
}

// issueAttempts is how many times a start's token is drawn when the
// machine changed under the write.
const issueAttempts = 6

// forget drops a token that is no host's any more.
func (h *HostConfigHandler) forget(token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.reviewed, guestprotocol.HashToken(token))
}

// authenticate finds the host whose agent's token a request carries: one
// reviewed lately, else the API server's review of it, limited per client
// address.
func (h *HostConfigHandler) authenticate(w http.ResponseWriter, r *http.Request, token string) (string, *refusal) {
	host, known, renewal := h.knownHost(token)
	if known {
		return host, nil
	}
	// A token reviewed before is reviewed again without the per-address
	// budget: its host's guests share the Mac's address, and one that sends
	// junk tokens must not lock its own host agent out.
	if !renewal && !h.allowReview(r.RemoteAddr) {
		w.Header().Set("Retry-After", "1")
		return "", &refusal{http.StatusTooManyRequests, guestprotocol.ReasonRateLimited, "too many requests from this address; retry in a second"}
	}
	host, err := h.hostOf(r, token)
	if err != nil {
		return "", &refusal{http.StatusUnauthorized, guestprotocol.ReasonUnauthorized, err.Error()}
	}
	return host, nil
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
		h.forget(token)
		return "", errors.New("the token is not valid (expired, or not the cluster's)")
	}
	prefix := "system:serviceaccount:" + macvirtv1alpha1.HostAgentNamespace + ":"
	host, ok := strings.CutPrefix(review.Status.User.Username, prefix)
	// "default" is every namespace's own account, nobody's Mac.
	if !ok || host == "" || host == "default" || strings.Contains(host, ":") {
		return "", errors.New("the token is not a host agent's: give the token of the ServiceAccount named like the Mac in " +
			macvirtv1alpha1.HostAgentNamespace)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reviewed == nil || len(h.reviewed) >= maxClientsKept {
		h.reviewed = map[string]reviewedToken{}
	}
	h.reviewed[guestprotocol.HashToken(token)] = reviewedToken{host: host, until: time.Now().Add(reviewTTL)}
	return host, nil
}

// knownHost is the host of a token reviewed less than reviewTTL ago;
// renewal says the token was a host's when it was last reviewed, longer
// ago.
func (h *HostConfigHandler) knownHost(token string) (host string, known, renewal bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.reviewed[guestprotocol.HashToken(token)]
	switch {
	case !ok:
		return "", false, false
	case time.Now().After(r.until):
		return "", false, true
	}
	return r.host, true, false
}

// allowReview says whether the client at addr may have a token reviewed now.
func (h *HostConfigHandler) allowReview(addr string) bool {
	ip, _, err := net.SplitHostPort(addr)
	if err != nil {
		ip = addr
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.perClient == nil || len(h.perClient) >= maxClientsKept {
		h.perClient = map[string]*rate.Limiter{}
	}
	l, ok := h.perClient[ip]
	if !ok {
		l = rate.NewLimiter(reviewRate, reviewBurst)
		h.perClient[ip] = l
	}
	return l.Allow()
}

// apiReason is the API server's reason for a refused write, or "internal".
func apiReason(err error) string {
	if r := apierrors.ReasonForError(err); r != "" {
		return string(r)
	}
	return "internal"
}
