// Package guestendpoint is the operator's side of the guest-agent protocol
// (internal/guestprotocol): an HTTPS handler that authenticates a machine's
// heartbeat by its token, records it in the MacMachine's status.guest, and
// answers with what the agent should apply. Anything it refuses gets a 4xx
// and writes nothing.
package guestendpoint

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/classhistory"
	"github.com/macvirt/macvirt/internal/guestprotocol"
	"github.com/macvirt/macvirt/internal/tenancy"
)

// Handler serves the protocol. Client reads machines, claims and classes
// (a cache is fine) and writes machine status.
type Handler struct {
	Client client.Client
	Clock  clock.PassiveClock
	// Classes finds the class whose heartbeatTimeout a machine is held to,
	// as the machine controller finds it (the snapshot of the machine's
	// revision once its class changed or went), so the interval an agent is
	// told suits the timeout its machine is held to. Without a Classes
	// reader it reads the live class through Client.
	Classes classhistory.Resolver
	// Rate and Burst limit each machine's accepted heartbeats (defaults:
	// one per second, bursts of 5), so a misbehaving agent cannot turn into
	// a stream of API writes.
	Rate  rate.Limit
	Burst int
	// Hosts serves guestprotocol.HostConfigPath and HostTunnelsPath, for
	// host agents; nil serves no host.
	Hosts http.Handler
	// Sources reads the Secrets and ConfigMaps a bootstrap names: the API
	// server itself (the operator watches no Secret), where the namespace's
	// admin granted it. Without one, Client reads them.
	Sources client.Reader

	// WatchHold is how long a watch is held with nothing new
	// (guestprotocol.WatchHold by default; at most that).
	WatchHold time.Duration

	watches watches

	mu       sync.Mutex
	limiters map[types.NamespacedName]*rate.Limiter
	// sweepAt is the number of limiters at which the next new one first
	// sweeps the full ones away (minSweepAt at first).
	sweepAt int
}

// minSweepAt is the fewest limiters kept before a sweep.
const minSweepAt = 1024

// unauthorized is one answer for an unknown machine and a wrong token, so
// the endpoint does not tell which machines exist.
const unauthorized = "unknown machine or wrong token"

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.Hosts != nil && (r.URL.Path == guestprotocol.HostConfigPath || r.URL.Path == guestprotocol.HostTunnelsPath ||
		strings.HasPrefix(r.URL.Path, guestprotocol.HostTunnelsPath+"/")) {
		h.Hosts.ServeHTTP(w, r)
		return
	}
	version := guestprotocol.VersionV2
	if r.URL.Path == guestprotocol.HeartbeatPath {
		version = guestprotocol.Version
	}
	if r.URL.Path == guestprotocol.WatchPath {
		h.serveWatch(w, r)
		return
	}
	if r.URL.Path != guestprotocol.HeartbeatPath && r.URL.Path != guestprotocol.HeartbeatPathV2 {
		writeError(w, http.StatusNotFound, guestprotocol.ReasonUnsupported,
			"no such endpoint; this server speaks "+guestprotocol.HeartbeatPathV2+", "+guestprotocol.WatchPath+" and "+guestprotocol.HeartbeatPath)
		return
	}
	token, refused := checkBearerPost(w, r, "the machine's token")
	if refused != nil {
		writeError(w, refused.code, refused.reason, refused.msg)
		return
	}
	hb, err := decode(w, r, version)
	limit := guestprotocol.MaxBodyBytesV2
	if version == guestprotocol.Version {
		limit = guestprotocol.MaxBodyBytes
	}
	if refused := badBody(err, limit); refused != nil {
		writeError(w, refused.code, refused.reason, refused.msg)
		return
	}
	ctx := r.Context()
	key := types.NamespacedName{Namespace: hb.Machine.Namespace, Name: hb.Machine.Name}
	m := &macvirtv1alpha1.MacMachine{}
	if err := h.Client.Get(ctx, key, m); err != nil {
		if apierrors.IsNotFound(err) {
			writeError(w, http.StatusUnauthorized, guestprotocol.ReasonUnauthorized, unauthorized)
			return
		}
		writeError(w, http.StatusInternalServerError, guestprotocol.ReasonInternal, "reading the machine failed; retry")
		return
	}
	want := m.Annotations[macvirtv1alpha1.AnnotationAgentTokenHash]
	if want == "" || subtle.ConstantTimeCompare([]byte(want), []byte(guestprotocol.HashToken(token))) != 1 {
		writeError(w, http.StatusUnauthorized, guestprotocol.ReasonUnauthorized, unauthorized)
		return
	}
	if now := time.Now(); !h.limiter(key, now).AllowN(now, 1) {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, guestprotocol.ReasonRateLimited, "heartbeats too frequent; wait for the interval the last reply gave")
		return
	}
	if msg := staleIdentity(m, hb.SSHHostKeys); msg != "" {
		ctrl.LoggerFrom(ctx).Info("refused a resumed guest's heartbeat", "machine", key, "reason", msg)
		writeError(w, http.StatusConflict, guestprotocol.ReasonStaleIdentity, msg)
		return
	}
	state, tasks, err := h.desiredState(ctx, m, version, guestTasks(hb.Tasks))
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "reading a machine's desired state", "machine", key)
		writeError(w, http.StatusInternalServerError, guestprotocol.ReasonInternal, "reading the desired state failed; retry")
		return
	}
	written, err := h.record(ctx, m, &hb.Heartbeat, version, tasks, state.HeartbeatIntervalSeconds)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "recording a heartbeat", "machine", key)
		writeError(w, http.StatusInternalServerError, guestprotocol.ReasonInternal, "recording the heartbeat failed; retry")
		return
	}
	if written {
		h.watches.wrote(key, m.ResourceVersion, h.now())
	}
	heartbeats.WithLabelValues(resultAccepted).Inc()
	w.Header().Set("Content-Type", "application/json")
	if version == guestprotocol.Version {
		_ = json.NewEncoder(w).Encode(state.DesiredState)
		return
	}
	state.Revision = guestprotocol.Revision(*state)
	_ = json.NewEncoder(w).Encode(state)
}

// staleIdentity says why the heartbeat of a guest resumed from a saved state
// is refused: its first report since the resume (the first heard since
// status.host.resumes was raised, counted, not timed: the Mac's clock may be
// off) names one of the SSH host keys the machine reported before. The saved memory, on its host's
// disk, held their private halves; a resumed guest makes new ones first
// (guestagent.RenewAfterResume). Empty when it is not refused.
func staleIdentity(m *macvirtv1alpha1.MacMachine, keys []string) string {
	hv, g := m.Status.Host, m.Status.Guest
	if hv == nil || hv.Resumes == 0 || g == nil || g.Resumes >= hv.Resumes || len(g.SSHHostKeys) == 0 {
		return ""
	}
	before := map[string]bool{}
	for _, k := range g.SSHHostKeys {
		before[k] = true
	}
	kept := false
	for _, k := range keys {
		kept = kept || before[k]
	}
	if !kept {
		return ""
	}
	return "this guest was resumed from the state saved when it was suspended, and reports an SSH host key it had then; " +
		"its agent must make new ones on resume (update the guest agent in the image)"
}

// decode reads a heartbeat of the version; a v1 heartbeat is one with no
// task reports.
func decode(w http.ResponseWriter, r *http.Request, version string) (*guestprotocol.HeartbeatV2, error) {
	if version == guestprotocol.Version {
		hb, err := guestprotocol.DecodeHeartbeat(http.MaxBytesReader(w, r.Body, guestprotocol.MaxBodyBytes))
		if err != nil {
			return nil, err
		}
		return &guestprotocol.HeartbeatV2{Heartbeat: *hb}, nil
	}
	return guestprotocol.DecodeHeartbeatV2(http.MaxBytesReader(w, r.Body, guestprotocol.MaxBodyBytesV2))
}

// resultAccepted is the result label of a heartbeat recorded and answered.
const resultAccepted = "Accepted"

// heartbeats counts the endpoint's answers by result: Accepted, or the
// reason of the refusal. A refused heartbeat writes nothing on any machine
// (anyone who reaches the endpoint could otherwise write there), so this is
// where a guest with a wrong token, or someone trying tokens, shows.
var heartbeats = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "macvirt_agent_heartbeats_total",
	Help: "Heartbeats the guest-agent endpoint answered, by result: Accepted, or the refusal's reason (Unauthorized, RateLimited, Malformed, TooLarge, Unsupported, MethodNotAllowed, Internal).",
}, []string{"result"})

func init() { ctrlmetrics.Registry.MustRegister(Collectors()...) }

// Collectors is every metric the endpoint exports.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{heartbeats, watchAnswers, watchesHeld, hostConfigs, hostTunnelRequests}
}

// limiter is the machine's rate limiter. Before adding one to a map that
// has reached sweepAt entries, it forgets every limiter that is full again
// at now: a new limiter starts full, so forgetting them changes no answer,
// and deleted machines' limiters do not pile up.
func (h *Handler) limiter(key types.NamespacedName, now time.Time) *rate.Limiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.limiters == nil {
		h.limiters = map[types.NamespacedName]*rate.Limiter{}
	}
	l, ok := h.limiters[key]
	if !ok {
		if len(h.limiters) >= max(h.sweepAt, minSweepAt) {
			for k, old := range h.limiters {
				if old.TokensAt(now) >= float64(old.Burst()) {
					delete(h.limiters, k)
				}
			}
			h.sweepAt = 2 * len(h.limiters)
		}
		r, b := h.Rate, h.Burst
		if r == 0 {
			r = 1
		}
		if b == 0 {
			b = 5
		}
		l = rate.NewLimiter(r, b)
		h.limiters[key] = l
	}
	return l
}

// record writes the heartbeat into status.guest, with the protocol
// version it came in and the bound claim's tasks. The guest's free text is
// recorded guestprotocol.Printable: the claim's conditions quote applyError, and
// people read both in terminals, which a guest must not drive. IP addresses
// and host keys need nothing: they were parsed.
//
// A heartbeat that says nothing new (the interval it is answered with
// included), from a guest judged ready whose recorded heartbeat is younger
// than guestprotocol.HeartbeatRecordGap of that interval, is not written
// (it reports false): liveness needs a recorded beat about every other
// interval, and the machine controller allows for the gap of the interval
// recorded, which is the one every unwritten beat was answered with.
func (h *Handler) record(ctx context.Context, m *macvirtv1alpha1.MacMachine, hb *guestprotocol.Heartbeat, version string,
	tasks []macvirtv1alpha1.GuestTaskStatus, intervalSeconds int) (bool, error) {
	now := metav1.NewTime(h.now())
	before := m.DeepCopy()
	g := &macvirtv1alpha1.GuestStatus{
		AgentVersion: guestprotocol.Printable(hb.AgentVersion), OSVersion: guestprotocol.Printable(hb.OSVersion),
		OSBuild: guestprotocol.Printable(hb.OSBuild), Hostname: guestprotocol.Printable(hb.Hostname),
		LastHeartbeat: &now, IPAddresses: hb.IPAddresses, SSHHostKeys: hb.SSHHostKeys, ApplyError: guestprotocol.Printable(hb.ApplyError),
		ProtocolVersion: version, Tasks: tasks, HeartbeatIntervalSeconds: int32(intervalSeconds), //nolint:gosec // at most 60.
	}
	if !hb.BootTime.IsZero() {
		bt := metav1.NewTime(hb.BootTime)
		g.BootTime = &bt
	}
	if hv := m.Status.Host; hv != nil {
		g.Resumes = hv.Resumes
	}
	gap := guestprotocol.HeartbeatRecordGap(time.Duration(intervalSeconds) * time.Second)
	if old := m.Status.Guest; old != nil && old.LastHeartbeat != nil && now.Sub(old.LastHeartbeat.Time) < gap &&
		meta.IsStatusConditionTrue(m.Status.Conditions, macvirtv1alpha1.ConditionGuestAgentReady) {
		same := *old
		same.LastHeartbeat = g.LastHeartbeat
		if equality.Semantic.DeepEqual(&same, g) {
			return false, nil
		}
	}
	m.Status.Guest = g
	return true, h.Client.Status().Patch(ctx, m, client.MergeFrom(before))
}

// desiredState is the bound claim's keys and bootstrap (bootstrap.go),
// the machine's name as hostname, and an interval a quarter of the
// heartbeatTimeout the machine is held to (5s to 60s); with the tasks to
// record in status.guest.
func (h *Handler) desiredState(ctx context.Context, m *macvirtv1alpha1.MacMachine, version string, reported []macvirtv1alpha1.GuestTaskStatus) (
	*guestprotocol.DesiredStateV2, []macvirtv1alpha1.GuestTaskStatus, error) {
	answer := &guestprotocol.DesiredStateV2{DesiredState: guestprotocol.DesiredState{Hostname: m.Name, SSHUser: guestprotocol.DefaultSSHUser,
		SSHAuthorizedKeys: []string{}}}
	state := &answer.DesiredState
	var tasks []macvirtv1alpha1.GuestTaskStatus
	timeout := macvirtv1alpha1.DefaultHeartbeatTimeout
	classes := h.Classes
	if classes.Classes == nil {
		classes.Classes = h.Client
	}
	res, err := classes.Resolve(ctx, m)
	if err != nil {
		return nil, nil, err
	}
	if res.Class != nil {
		timeout = res.Class.Spec.Lifecycle.HeartbeatTimeoutOrDefault()
	}
	state.HeartbeatIntervalSeconds = int(guestprotocol.HeartbeatInterval(timeout) / time.Second)
	if ref := m.Spec.ClaimRef; ref != nil {
		claim := &macvirtv1alpha1.MacClaim{}
		err := h.Client.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, claim)
		switch {
		case err == nil && claim.UID == ref.UID && boundTo(claim, m):
			ok, err := h.mayServe(ctx, m, claim.Namespace)
			if err != nil {
				return nil, nil, err
			}
			if ok {
				state.SSHAuthorizedKeys = append(state.SSHAuthorizedKeys, claim.Spec.SSHAuthorizedKeys...)
				answer.Binding = string(claim.UID)
				// The class as it is now: the one the claim's plan was made
				// from, and the one whose tenancy holds now.
				class := res.Live
				if class == nil {
					class = res.Class
				}
				if version != guestprotocol.Version {
					if answer.Tasks, tasks, err = h.bootstrap(ctx, claim, class, reported); err != nil {
						return nil, nil, err
					}
					if waitingForSource(tasks) {
						// A source made just after the claim (a runner's JIT
						// Secret) is taken at the next heartbeat, not a
						// whole interval later.
						state.HeartbeatIntervalSeconds = min(state.HeartbeatIntervalSeconds, int(pendingRetry/time.Second))
					}
				}
			}
		case err != nil && !apierrors.IsNotFound(err):
			return nil, nil, err
		}
	}
	return answer, tasks, nil
}

// pendingRetry is how soon an agent whose next part waits for its source
// heartbeats again.
const pendingRetry = 2 * time.Second

// waitingForSource reports whether a part could not be handed over, with
// the reason recorded.
func waitingForSource(tasks []macvirtv1alpha1.GuestTaskStatus) bool {
	for _, t := range tasks {
		if t.State == macvirtv1alpha1.BootstrapPending && t.Message != "" {
			return true
		}
	}
	return false
}

// mayServe reports whether the machine may serve claims of the namespace
// (tenancy.MayServe), reading the pool its label names.
func (h *Handler) mayServe(ctx context.Context, m *macvirtv1alpha1.MacMachine, namespace string) (bool, error) {
	var pool *macvirtv1alpha1.MacPool
	if name := m.Labels[macvirtv1alpha1.LabelPool]; name != "" {
		pool = &macvirtv1alpha1.MacPool{}
		if err := h.Client.Get(ctx, types.NamespacedName{Name: name}, pool); err != nil {
			if !apierrors.IsNotFound(err) {
				return false, err
			}
			pool = nil
		}
	}
	return tenancy.MayServe(m, namespace, pool), nil
}

// boundTo reports whether the claim names the machine as its own: a claim's
// keys go only to a machine both sides of the binding agree on, never to one
// that merely names the claim.
func boundTo(claim *macvirtv1alpha1.MacClaim, m *macvirtv1alpha1.MacMachine) bool {
	ref := claim.Status.MachineRef
	return ref != nil && ref.UID == m.UID && ref.Namespace == m.Namespace && ref.Name == m.Name
}

func (h *Handler) now() time.Time {
	if h.Clock == nil {
		return time.Now()
	}
	return h.Clock.Now()
}

func writeError(w http.ResponseWriter, code int, reason, msg string) {
	heartbeats.WithLabelValues(reason).Inc()
	writeProblem(w, code, reason, msg)
}

// refusal is a request refused: its status, the protocol's reason, and why.
type refusal struct {
	code        int
	reason, msg string
}

// badBody is the refusal of a body that could not be decoded (err) under
// its limit in bytes; nil when err is.
func badBody(err error, limit int) *refusal {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.Is(err, guestprotocol.ErrTooLarge) || errors.As(err, &tooLarge):
		return &refusal{http.StatusRequestEntityTooLarge, guestprotocol.ReasonTooLarge, fmt.Sprintf("the body is larger than %d bytes", limit)}
	case err != nil:
		return &refusal{http.StatusBadRequest, guestprotocol.ReasonMalformed, err.Error()}
	}
	return nil
}

// checkBearerPost checks what both of the endpoint's routes take: a POST
// of JSON with a bearer token (whose names which token), and returns the
// token, or the refusal (with Allow set for a wrong method).
func checkBearerPost(w http.ResponseWriter, r *http.Request, whose string) (string, *refusal) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return "", &refusal{http.StatusMethodNotAllowed, guestprotocol.ReasonMethodNotAllowed, "use POST"}
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return "", &refusal{http.StatusUnsupportedMediaType, guestprotocol.ReasonUnsupported, "the body must be application/json"}
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return "", &refusal{http.StatusUnauthorized, guestprotocol.ReasonUnauthorized, "send " + whose + " as Authorization: Bearer <token>"}
	}
	return token, nil
}

// writeProblem answers with the protocol's Error.
func writeProblem(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(guestprotocol.Error{Reason: reason, Message: msg})
}
