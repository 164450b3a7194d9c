package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// Connection defaults until the guest agent reports them.
const (
	defaultSSHPort = 22
	defaultSSHUser = "admin"
	fieldOwner     = "macvirt-operator"
)

// computeClaimStatus derives a claim's status from its scope.
func computeClaimStatus(s *claimScope, now metav1.Time) macvirtv1alpha1.MacClaimStatus {
	c := s.claim
	st := *c.Status.DeepCopy()
	st.ObservedGeneration = c.Generation
	set := func(t string, ok bool, reason, msg string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason,
			Message: msg, ObservedGeneration: c.Generation})
	}
	stalled := func(p *problem) {
		meta.SetStatusCondition(&st.Conditions, stalledCondition(c.Generation, p))
	}
	mirrorHostDraining(&st.Conditions, s.machine, c.Generation)
	switch {
	case s.lost != "":
		st.Phase = macvirtv1alpha1.ClaimLost
		st.Connection = nil
		if s.machine != nil {
			st.Machine = machineSummary(s.machine)
		}
		lost := problem{macvirtv1alpha1.ReasonMachineLost, s.lost + "; the claim is not re-bound: delete it and claim again"}
		set(macvirtv1alpha1.ConditionReady, false, lost.Reason, lost.Message)
		stalled(&lost)
		return st
	case s.machine == nil:
		st.Phase = macvirtv1alpha1.ClaimPending
		p := s.waiting
		if s.writeFailed != nil {
			p = s.writeFailed
		}
		if p == nil {
			p = &problem{macvirtv1alpha1.ReasonWaitingForMachine, "waiting for a machine"}
		}
		if !bindingInProgress(c) {
			// A binding in progress keeps its Bound condition: it is the
			// mark that only completing or undoing it may follow.
			set(macvirtv1alpha1.ConditionBound, false, p.Reason, p.Message)
		}
		set(macvirtv1alpha1.ConditionReady, false, p.Reason, p.Message)
		if p.Reason == macvirtv1alpha1.ReasonWaitingForMachine {
			p = nil
		}
		stalled(p)
		return st
	}
	stalled(nil)
	m := s.machine
	st.MachineRef = &macvirtv1alpha1.ObjectRef{Namespace: m.Namespace, Name: m.Name, UID: m.UID}
	st.Machine = machineSummary(m)
	if st.BoundAt == nil {
		st.BoundAt = &now
	}
	set(macvirtv1alpha1.ConditionBound, true, macvirtv1alpha1.ReasonBound, fmt.Sprintf("bound to MacMachine %s/%s", m.Namespace, m.Name))
	if !machineIsReady(m) {
		st.Phase = macvirtv1alpha1.ClaimBound
		msg := "machine is " + string(m.Status.Phase)
		if m.Status.Phase == "" {
			msg = "machine has not reported yet"
		}
		if rc := meta.FindStatusCondition(m.Status.Conditions, macvirtv1alpha1.ConditionReady); rc != nil {
			msg = fmt.Sprintf("machine is %s: %s", m.Status.Phase, rc.Message)
		}
		reason := macvirtv1alpha1.ReasonMachineNotReady
		if sc := meta.FindStatusCondition(m.Status.Conditions, macvirtv1alpha1.ConditionStalled); sc != nil && sc.Status == metav1.ConditionTrue {
			// The machine waits for a human (a forced power-off, an image
			// that cannot be pulled): its tenant hears it in its words.
			reason = sc.Reason
			stalled(&problem{sc.Reason, fmt.Sprintf("machine %s/%s is %s and needs a human: %s", m.Namespace, m.Name, m.Status.Phase, sc.Message)})
		}
		set(macvirtv1alpha1.ConditionReady, false, reason, msg)
		return st
	}
	if machineAddress(m) == "" {
		st.Phase = macvirtv1alpha1.ClaimBound
		set(macvirtv1alpha1.ConditionReady, false, macvirtv1alpha1.ReasonMachineNotReady,
			fmt.Sprintf("KubeVirt reports no pod-network address for machine %s yet", m.Name))
		return st
	}
	st.Connection = &macvirtv1alpha1.ClaimConnection{Address: machineAddress(m), SSHPort: defaultSSHPort}
	setServiceReady(s, &st)
	if svc := s.service; svc != nil {
		st.Connection.Host, st.Connection.ServiceName = serviceHost(c), svc.Name
		for _, p := range svc.Spec.Ports {
			if p.Name == vncPortName {
				st.Connection.VNCPort = p.Port
			}
		}
		st.Connection.External = externalAccess(svc, s.nodeAddress)
	}
	if g := m.Status.Guest; g != nil {
		st.Connection.HostKeys = g.SSHHostKeys
		if g.ApplyError != "" {
			// The Mac runs, but the tenant's keys are not on it: not Ready,
			// and a human must look at the guest.
			st.Phase = macvirtv1alpha1.ClaimBound
			p := problem{macvirtv1alpha1.ReasonGuestConfigFailed, fmt.Sprintf(
				"the guest agent on machine %s could not apply what it was sent (this claim's SSH keys, the machine's hostname): %s "+
					"(it tries again with every heartbeat; the guest or its golden image needs fixing)",
				m.Name, g.ApplyError)}
			set(macvirtv1alpha1.ConditionReady, false, p.Reason, p.Message)
			stalled(&p)
			return st
		}
	}
	st.Phase = macvirtv1alpha1.ClaimReady
	if st.ReadyAt == nil {
		st.ReadyAt = &now
	}
	set(macvirtv1alpha1.ConditionReady, true, macvirtv1alpha1.ReasonAsExpected,
		fmt.Sprintf("machine %s is Ready at %s", m.Name, st.Connection.Address))
	return st
}

// setServiceReady says whether the claim's Service routes to its machine.
func setServiceReady(s *claimScope, st *macvirtv1alpha1.MacClaimStatus) {
	c := s.claim
	cond := metav1.Condition{Type: macvirtv1alpha1.ConditionServiceReady, ObservedGeneration: c.Generation}
	switch {
	case s.writeFailed != nil:
		// The API server refused the Service or its EndpointSlice: the
		// Mac is reachable at its address only, until it is written.
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, s.writeFailed.Reason, s.writeFailed.Message
	case s.serviceProblem != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, s.serviceProblem.Reason, s.serviceProblem.Message
		if s.service != nil && s.endpointsReady && s.serviceProblem.Reason == macvirtv1alpha1.ReasonAccessTypeNotAllowed {
			// Reachable all the same, inside the cluster.
			cond.Status = metav1.ConditionTrue
		}
	case s.service != nil && s.endpointsReady:
		cond.Status, cond.Reason = metav1.ConditionTrue, macvirtv1alpha1.ReasonAsExpected
		cond.Message = fmt.Sprintf("Service %s (%s) routes to machine %s at %s", s.service.Name, s.service.Spec.Type,
			s.machine.Name, machineAddress(s.machine))
	default:
		return
	}
	meta.SetStatusCondition(&st.Conditions, cond)
}

// machineAddress is the address a tenant connects to: KubeVirt's, the
// virt-launcher pod's IP on the pod network. Never the guest's own report:
// behind KubeVirt's masquerade binding the guest sees only its side of the
// NAT (10.0.2.2 by default), which nobody outside the pod can reach.
func machineAddress(m *macvirtv1alpha1.MacMachine) string {
	if len(m.Status.Addresses) > 0 {
		return m.Status.Addresses[0]
	}
	return ""
}

// machineSummary is what the claim's tenant sees of its machine, which it
// may not read: phase, node and progress, named <namespace>/<name>. The
// progress moves in coarse steps (reportedProgress), so the claim's status
// is not rewritten on every tick of CDI's.
func machineSummary(m *macvirtv1alpha1.MacMachine) *macvirtv1alpha1.ClaimMachineStatus {
	sum := &macvirtv1alpha1.ClaimMachineStatus{Name: m.Namespace + "/" + m.Name, Phase: m.Status.Phase, NodeName: m.Status.NodeName}
	if p := m.Status.Provisioning; p != nil {
		sum.Progress = p.Progress
	}
	return sum
}

// patchClaimStatus writes the computed status once, if it changed, after
// applying the connection Secret when the connection changed.
func (r *MacClaimReconciler) patchClaimStatus(ctx context.Context, s *claimScope) error {
	c := s.claim
	now := r.Clock.Now()
	st := computeClaimStatus(s, metav1.NewTime(now))
	key := client.ObjectKeyFromObject(c)
	clashed := meta.IsStatusConditionFalse(c.Status.Conditions, macvirtv1alpha1.ConditionConnectionSecretReady)
	if st.Connection != nil && ((c.Status.ConnectionSecretName == "" && !clashed) || !equality.Semantic.DeepEqual(c.Status.Connection, st.Connection) ||
		r.connectionDue(key, now)) {
		// Written when the connection changes, and again every
		// ConnectionResync (and once after a restart): the operator cannot
		// watch Secrets, so this is how a deleted one comes back, and how a
		// clash clears once the other Secret is gone.
		conflict, err := r.applyConnectionSecret(ctx, c, st.Connection)
		var refused *secretWriteError
		if errors.As(err, &refused) {
			// A quota, an admission policy or webhook, or an API server
			// that failed: the claim says so in the API server's words, and
			// the write is retried with backoff.
			cond := metav1.Condition{Type: macvirtv1alpha1.ConditionConnectionSecretReady, Status: metav1.ConditionFalse,
				Reason: refused.reason, Message: refused.Error(), ObservedGeneration: c.Generation}
			if was := meta.FindStatusCondition(c.Status.Conditions, cond.Type); was == nil || was.Status != cond.Status || was.Reason != cond.Reason {
				recordEvent(r.Recorder, c, corev1.EventTypeWarning, refused.reason, "WriteConnectionSecret", refused.Error())
			}
			meta.SetStatusCondition(&st.Conditions, cond)
			if werr := r.writeClaimStatus(ctx, s, st); werr != nil {
				return werr
			}
			return err
		}
		if err != nil {
			return err
		}
		if conflict != "" {
			if !clashed {
				recordEvent(r.Recorder, c, corev1.EventTypeWarning, macvirtv1alpha1.ReasonSecretConflict, "WriteConnectionSecret", conflict)
			}
			meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionConnectionSecretReady,
				Status: metav1.ConditionFalse, Reason: macvirtv1alpha1.ReasonSecretConflict, Message: conflict, ObservedGeneration: c.Generation})
			st.ConnectionSecretName = ""
			r.connectionApplied.Store(key, now)
			return r.writeClaimStatus(ctx, s, st)
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionConnectionSecretReady,
			Status: metav1.ConditionTrue, Reason: macvirtv1alpha1.ReasonAsExpected,
			Message: fmt.Sprintf("Secret %s holds the connection", connectionSecretName(c)), ObservedGeneration: c.Generation})
		st.ConnectionSecretName = connectionSecretName(c)
		// Remembered only once the status agrees with what was applied: a
		// losing operator's Secret is applied again by the next reconcile.
		defer func() {
			if c.Status.Connection != nil && equality.Semantic.DeepEqual(c.Status.Connection, st.Connection) {
				r.connectionApplied.Store(client.ObjectKeyFromObject(c), now)
			}
		}()
	}
	return r.writeClaimStatus(ctx, s, st)
}

// writeClaimStatus writes st as the claim's status if it changed.
func (r *MacClaimReconciler) writeClaimStatus(ctx context.Context, s *claimScope, st macvirtv1alpha1.MacClaimStatus) error {
	c := s.claim
	if equality.Semantic.DeepEqual(c.Status, st) {
		return nil
	}
	before := c.DeepCopy()
	oldPhase := c.Status.Phase
	c.Status = st
	// Every write is guarded by the claim's resourceVersion: the status
	// carries the binding protocol's reservation, which a status computed
	// from a stale copy must never overwrite.
	if written, err := writeStatus(ctx, r.Client, c, before, true); !written {
		return err
	}
	if before.Status.BoundAt == nil && st.BoundAt != nil {
		claimBindSeconds.Observe(st.BoundAt.Sub(c.CreationTimestamp.Time).Seconds())
	}
	if before.Status.ReadyAt == nil && st.ReadyAt != nil {
		claimReadySeconds.Observe(st.ReadyAt.Sub(c.CreationTimestamp.Time).Seconds())
	}
	if oldPhase != st.Phase {
		r.recordClaimPhase(c)
	}
	// A refused write and a lost machine have their Warning events already.
	if reason, note, ok := turnedStalled(before.Status.Conditions, st.Conditions); ok && s.writeFailed == nil && st.Phase != macvirtv1alpha1.ClaimLost {
		recordEvent(r.Recorder, c, corev1.EventTypeWarning, reason, "Claim", note)
	}
	if reason, note, ok := drainWarning(before.Status.Conditions, st.Conditions); ok {
		recordEvent(r.Recorder, c, corev1.EventTypeWarning, reason, "Drain", note)
	}
	return nil
}

// turnedStalled reports a Stalled condition that is True now and was not,
// or was for another reason: the moment a human is needed is a Warning event.
func turnedStalled(before, after []metav1.Condition) (string, string, bool) {
	now := meta.FindStatusCondition(after, macvirtv1alpha1.ConditionStalled)
	if now == nil || now.Status != metav1.ConditionTrue {
		return "", "", false
	}
	if was := meta.FindStatusCondition(before, macvirtv1alpha1.ConditionStalled); was != nil && was.Status == metav1.ConditionTrue && was.Reason == now.Reason {
		return "", "", false
	}
	return now.Reason, now.Message, true
}

// connectionDue says the claim's connection Secret was not applied by this
// process within ConnectionResync.
func (r *MacClaimReconciler) connectionDue(key types.NamespacedName, now time.Time) bool {
	at, ok := r.connectionApplied.Load(key)
	return !ok || now.Sub(at.(time.Time)) >= r.connectionResync()
}

func (r *MacClaimReconciler) recordClaimPhase(c *macvirtv1alpha1.MacClaim) {
	if r.Recorder == nil {
		return
	}
	eventType, note := corev1.EventTypeNormal, string(c.Status.Phase)
	if c.Status.Phase == macvirtv1alpha1.ClaimLost {
		eventType = corev1.EventTypeWarning
	}
	if rc := meta.FindStatusCondition(c.Status.Conditions, macvirtv1alpha1.ConditionReady); rc != nil {
		note = rc.Message
	}
	reason := "Claim" + string(c.Status.Phase)
	recordEvent(r.Recorder, c, eventType, reason, "Bind", note)
}

func connectionSecretName(c *macvirtv1alpha1.MacClaim) string { return c.Name + "-connection" }

// knownHosts is an OpenSSH known_hosts file for the connection: one line
// per host key, the host in brackets with its port when that is not 22.
// Empty until the guest agent has reported the keys.
func knownHosts(conn *macvirtv1alpha1.ClaimConnection) string {
	name := func(host string, port int32) string {
		if port != 0 && port != 22 {
			return fmt.Sprintf("[%s]:%d", host, port)
		}
		return host
	}
	// One line per key, naming the machine every way the connection does:
	// the Service's name, the address, and the external address.
	var names []string
	if conn.Host != "" {
		names = append(names, name(conn.Host, conn.SSHPort))
	}
	names = append(names, name(conn.Address, conn.SSHPort))
	if ext := conn.External; ext != nil && ext.Address != "" {
		names = append(names, name(ext.Address, ext.SSHPort))
	}
	hosts := strings.Join(names, ",")
	var b strings.Builder
	for _, k := range conn.HostKeys {
		b.WriteString(hosts + " " + k + "\n")
	}
	return b.String()
}

// applyConnectionSecret writes host, port, user and known_hosts into a
// Secret owned by the claim, by server-side apply: the operator creates and
// updates Secrets but never reads them.
func (r *MacClaimReconciler) applyConnectionSecret(ctx context.Context, c *macvirtv1alpha1.MacClaim, conn *macvirtv1alpha1.ClaimConnection) (conflict string, err error) {
	name := connectionSecretName(c)
	host := conn.Host
	if host == "" {
		host = conn.Address
	}
	data := map[string][]byte{
		"host":        []byte(host),
		"address":     []byte(conn.Address),
		"port":        []byte(fmt.Sprint(conn.SSHPort)),
		"user":        []byte(defaultSSHUser),
		"known_hosts": []byte(knownHosts(conn)),
	}
	if conn.VNCPort != 0 {
		data["vnc-port"] = []byte(fmt.Sprint(conn.VNCPort))
	}
	if ext := conn.External; ext != nil {
		if ext.Address != "" {
			data["external-address"] = []byte(ext.Address)
		}
		if ext.SSHPort != 0 {
			data["external-port"] = []byte(fmt.Sprint(ext.SSHPort))
		}
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace,
			Labels:          map[string]string{macvirtv1alpha1.LabelClass: c.Spec.ClassName},
			OwnerReferences: []metav1.OwnerReference{controllerRef("MacClaim", c.Name, c.UID)}},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
	var createErr error
	if c.Status.ConnectionSecretName == "" && !meta.IsStatusConditionFalse(c.Status.Conditions, macvirtv1alpha1.ConditionConnectionSecretReady) {
		// The claim's status names no Secret yet: it is most likely not
		// there, so it is created first, one request. Whatever refuses the
		// create lets the patch below decide: a Secret of that name (this
		// claim's from before a crash, or a tenant's), which admission may
		// refuse to create again (a full quota) before the name is checked.
		if createErr = r.Create(ctx, secret.DeepCopy()); createErr == nil {
			return "", nil
		}
	}
	// Once the status names it, the Secret usually exists (it is written
	// again every resync), so it is patched first: one request, and none
	// that changes anything when the connection is the same. The operator
	// may not read Secrets, so the API server checks, in the same request,
	// that this claim controls it: the JSON patch first tests the owner
	// reference the claim put first: this claim's, as controller. A
	// tenant's own Secret of that name, even one naming the claim as a
	// plain owner, fails the test and is left untouched.
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": c.UID},
		{"op": "test", "path": "/metadata/ownerReferences/0/controller", "value": true},
		{"op": "add", "path": "/data", "value": data},
	})
	if err != nil {
		return "", err
	}
	err = r.Patch(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace}}, client.RawPatch(types.JSONPatchType, patch))
	switch {
	case err == nil:
		return "", nil
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		return fmt.Sprintf("Secret %s/%s exists and is not controlled by this claim (the API server: %v); it is left as it is, and the connection "+
			"is only in the claim's status: rename or delete that Secret to have it written", c.Namespace, name, err), nil
	case !apierrors.IsNotFound(err):
		return "", &secretWriteError{macvirtv1alpha1.ReasonUpdateFailed, fmt.Errorf("updating connection Secret %s/%s: %w", c.Namespace, name, err)}
	}
	if createErr != nil && !apierrors.IsAlreadyExists(createErr) {
		// There is none, and creating one was refused: that refusal stands.
		return "", &secretWriteError{macvirtv1alpha1.ReasonCreateFailed, fmt.Errorf("creating connection Secret %s/%s: %w", c.Namespace, name, createErr)}
	}
	if err := r.Create(ctx, secret); err != nil {
		// AlreadyExists: created meanwhile (by a tenant or another
		// operator); the retry patches it, or finds the clash.
		return "", &secretWriteError{macvirtv1alpha1.ReasonCreateFailed, fmt.Errorf("creating connection Secret %s/%s: %w", c.Namespace, name, err)}
	}
	return "", nil
}

// secretWriteError is a write of the connection Secret that failed, with
// the condition reason it shows as on the claim.
type secretWriteError struct {
	reason string
	err    error
}

func (e *secretWriteError) Error() string { return e.err.Error() }
func (e *secretWriteError) Unwrap() error { return e.err }
