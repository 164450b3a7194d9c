package claim

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/bootstrap"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/drain"
	"github.com/macvirt/macvirt/internal/controller/state"
	"github.com/macvirt/macvirt/internal/tenancy"
)

// computeClaimStatus derives a claim's status from its scope: its phase
// and conditions, its connection (connectionOf) and what the connection
// Secret's write came to.
func computeClaimStatus(s *claimScope, now metav1.Time) macvirtv1alpha1.MacClaimStatus {
	st := bindingStatus(s, now)
	st.Connection = connectionOf(s)
	if st.Phase == macvirtv1alpha1.ClaimExpired {
		st.Connection = nil
	}
	setConnectionSecret(s, &st)
	return st
}

// bindingStatus is the claim's phase and conditions.
func bindingStatus(s *claimScope, now metav1.Time) macvirtv1alpha1.MacClaimStatus {
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
	stalled := func(p *base.Problem) {
		// Stalled is there while it is True, and gone otherwise: a claim
		// without a problem carries no condition that says so.
		if p == nil {
			meta.RemoveStatusCondition(&st.Conditions, macvirtv1alpha1.ConditionStalled)
			return
		}
		meta.SetStatusCondition(&st.Conditions, base.StalledCondition(c.Generation, p))
	}
	drain.Mirror(&st.Conditions, s.machine, c.Generation)
	switch {
	case expired(&st, now.Time):
		// Before Lost: the machine it gives back goes, as it should.
		st.Phase = macvirtv1alpha1.ClaimExpired
		if s.machine != nil {
			st.Machine = machineSummary(s.machine)
		}
		p := base.Problem{Reason: macvirtv1alpha1.ReasonLifetimeExpired, Message: fmt.Sprintf(
			"the claim's lifetime ended at %s; its machine is given back (reclaimPolicy %s) and the claim is not bound again: delete it, and claim again for another Mac",
			st.ExpiresAt.UTC().Format(time.RFC3339), reclaimPolicy(c))}
		set(macvirtv1alpha1.ConditionReady, false, p.Reason, p.Message)
		stalled(&p)
		return st
	case s.lost != "":
		st.Phase = macvirtv1alpha1.ClaimLost
		if s.machine != nil {
			st.Machine = machineSummary(s.machine)
		}
		lost := base.Problem{Reason: macvirtv1alpha1.ReasonMachineLost, Message: s.lost + "; the claim is not re-bound: delete it and claim again"}
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
			p = &base.Problem{Reason: macvirtv1alpha1.ReasonWaitingForMachine, Message: "waiting for a machine"}
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
		// What the binding runs, and how long it lasts, is fixed as it is
		// made.
		st.Bootstrap = bootstrap.Plan(s.class, c)
		st.ExpiresAt = expiresAt(now, lifetimeOf(c, s.accessClass()))
	}
	set(macvirtv1alpha1.ConditionBound, true, macvirtv1alpha1.ReasonBound, "bound to "+m.Namespace+"/"+m.Name)
	if !state.MachineUsable(m) {
		st.Phase = macvirtv1alpha1.ClaimBound
		msg := "machine is " + string(m.Status.Phase)
		if m.Status.Phase == "" {
			msg = "machine has not reported yet"
		}
		if rc := meta.FindStatusCondition(m.Status.Conditions, macvirtv1alpha1.ConditionReady); rc != nil {
			msg = fmt.Sprintf("machine is %s: %s", m.Status.Phase, rc.Message)
		}
		if takesConnections(m) && m.Status.Guest != nil {
			// Which part is wrong: the Mac is up and reachable, what it
			// lacks is the guest agent's word (or what waits on it).
			msg += fmt.Sprintf("; its VM runs and %s still takes connections (its Service routes there): "+
				"what is missing is the guest agent's report from inside macOS", machineAddress(m))
		}
		reason := macvirtv1alpha1.ReasonMachineNotReady
		if sc := meta.FindStatusCondition(m.Status.Conditions, macvirtv1alpha1.ConditionStalled); sc != nil && sc.Status == metav1.ConditionTrue {
			// The machine waits for a human (a forced power-off, an image
			// that cannot be pulled): its tenant hears it in its words.
			reason = sc.Reason
			stalled(&base.Problem{Reason: sc.Reason, Message: fmt.Sprintf("machine %s/%s is %s and needs a human: %s", m.Namespace, m.Name, m.Status.Phase, sc.Message)})
		}
		set(macvirtv1alpha1.ConditionReady, false, reason, msg)
		return st
	}
	if machineAddress(m) == "" && m.Spec.HostName == "" {
		st.Phase = macvirtv1alpha1.ClaimBound
		set(macvirtv1alpha1.ConditionReady, false, macvirtv1alpha1.ReasonMachineNotReady,
			fmt.Sprintf("KubeVirt reports no pod-network address for machine %s yet", m.Name))
		return st
	}
	setServiceReady(s, &st)
	boot, hasBootstrap := setBootstrap(s, &st)
	if g := m.Status.Guest; g != nil && g.ApplyError != "" {
		// The Mac runs, but the tenant's keys are not on it: not Ready,
		// and a human must look at the guest.
		st.Phase = macvirtv1alpha1.ClaimBound
		p := base.Problem{Reason: macvirtv1alpha1.ReasonGuestConfigFailed, Message: fmt.Sprintf(
			"the guest agent on machine %s could not apply what it was sent (this claim's SSH keys, the machine's hostname): %s "+
				"(it tries again with every heartbeat; the guest or its golden image needs fixing)",
			m.Name, g.ApplyError)}
		set(macvirtv1alpha1.ConditionReady, false, p.Reason, p.Message)
		stalled(&p)
		return st
	}
	if !s.exposed {
		st.Phase = macvirtv1alpha1.ClaimBound
		set(macvirtv1alpha1.ConditionReady, false, macvirtv1alpha1.ReasonWaitingForNetworkPolicy,
			fmt.Sprintf("machine %s's NetworkPolicy does not let namespace %s in yet", m.Name, c.Namespace))
		return st
	}
	if hasBootstrap && boot.HoldsReady {
		st.Phase = macvirtv1alpha1.ClaimBound
		set(macvirtv1alpha1.ConditionReady, false, bootstrapReadyReason(boot.Reason), fmt.Sprintf(
			"machine %s is Ready at %s; the claim is Ready once its bootstrap succeeded: %s", m.Name, machineAddress(m), boot.Message))
		return st
	}
	st.Phase = macvirtv1alpha1.ClaimReady
	if st.ReadyAt == nil {
		st.ReadyAt = &now
	}
	if m.Spec.HostName != "" {
		// An Apple-silicon Mac's guest sits behind its host's NAT: the
		// cluster has no route to it, and the claim publishes no address.
		// The tunnel reaches it through the host agent
		// (docs/design/apple-silicon-runtime.md, section 7).
		set(macvirtv1alpha1.ConditionReady, true, macvirtv1alpha1.ReasonAsExpected, fmt.Sprintf(
			"Ready on MacHost %s, reached through the tunnel (kubectl mac ssh %s); it has no address in the cluster",
			m.Spec.HostName, c.Name))
		return st
	}
	set(macvirtv1alpha1.ConditionReady, true, macvirtv1alpha1.ReasonAsExpected, "Ready at "+machineAddress(m))
	return st
}

// connectionOf is how the claim's tenant reaches its Mac, as the status
// says it: nothing once the claim is lost; what the status said while the
// machine is not reachable yet or for a while (not bound, not Ready, no
// address); once it is, the machine's address, its DNS name, the login
// user and the host keys its guest agent reported. A connection Secret,
// where the claim asks for one, holds the same.
func connectionOf(s *claimScope) *macvirtv1alpha1.ClaimConnection {
	c, m := s.claim, s.machine
	switch {
	case s.lost != "":
		return nil
	case m == nil || !state.MachineUsable(m) || machineAddress(m) == "" && m.Spec.HostName == "":
		return c.Status.Connection.DeepCopy()
	}
	conn := &macvirtv1alpha1.ClaimConnection{Address: machineAddress(m), SSHPort: defaultSSHPort, User: defaultSSHUser}
	if m.Spec.HostName != "" {
		// Behind its host's NAT: no address, no Service; the tunnel's
		// ports, and the host keys to check at the other end of it.
		if class := s.accessClass(); class != nil && class.Spec.Access.ScreenSharing {
			conn.VNCPort = vncPort
		}
	} else if svc := s.service; svc != nil {
		conn.Host, conn.ServiceName = serviceHost(c), svc.Name
		for _, p := range svc.Spec.Ports {
			if p.Name == vncPortName {
				conn.VNCPort = p.Port
			}
		}
		conn.External = externalAccess(svc, s.nodeAddress)
	} else if published(s) {
		conn.Host, conn.ServiceName = nameHost(c), namespaceServiceName
		if class := s.accessClass(); class != nil && class.Spec.Access.ScreenSharing {
			conn.VNCPort = vncPort
		}
	}
	if g := m.Status.Guest; g != nil {
		conn.HostKeys = g.SSHHostKeys
	}
	return conn
}

// published says a claim without a Service of its own has, or is about to
// have, its name under the namespace Service: it is ClusterIP, and neither
// the namespace Service nor its slice turned out to be someone else's. The
// name is in the status from Ready on; it resolves once publishName has
// written the slice, moments later.
func published(s *claimScope) bool {
	if access, _ := tenancy.Access(s.accessClass(), s.claim.Spec.Access.Type); access != macvirtv1alpha1.AccessClusterIP {
		return false
	}
	if s.dns != nil {
		return s.dns.problem == nil || s.dns.problem.Reason != macvirtv1alpha1.ReasonServiceConflict
	}
	// Not tried in this reconcile: as the status said before.
	if conn := s.claim.Status.Connection; conn != nil && conn.ServiceName == "" && conn.Address != "" {
		return false
	}
	return true
}

// setConnectionSecret says what the connection Secret's write came to:
// ConnectionSecretReady, the Secret's name and UID once it holds the
// connection; the clash, or the API server's refusal, otherwise. With no
// write in this reconcile they stay as they were.
func setConnectionSecret(s *claimScope, st *macvirtv1alpha1.MacClaimStatus) {
	o := s.secret
	if o == nil {
		return
	}
	c := s.claim
	cond := metav1.Condition{Type: macvirtv1alpha1.ConditionConnectionSecretReady, ObservedGeneration: c.Generation}
	switch {
	case o.refused != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, o.refused.reason, o.refused.Error()
	case o.conflict != "":
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, macvirtv1alpha1.ReasonSecretConflict, o.conflict
		st.ConnectionSecretName, st.ConnectionSecretUID = "", ""
	case o.stale != "":
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, macvirtv1alpha1.ReasonConnectionSecretStale, o.stale
		st.ConnectionSecretName, st.ConnectionSecretUID = o.name, o.uid
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, macvirtv1alpha1.ReasonAsExpected
		cond.Message = "Secret " + o.name + " holds the connection"
		st.ConnectionSecretName, st.ConnectionSecretUID = o.name, o.uid
	}
	meta.SetStatusCondition(&st.Conditions, cond)
}

// statusHold is how long a claim this process has just bound holds its
// status write while the machine's NetworkPolicy catches up with the
// binding: then Bound and Ready are one write, not two. Zero when there is
// nothing to wait for, or exposureHold has passed since the binding (the
// status then says what it waits for).
func statusHold(s *claimScope, now time.Time) time.Duration {
	c, m := s.claim, s.machine
	if m == nil || s.lost != "" || s.exposed || s.boundAt.IsZero() || c.Status.BoundAt != nil || s.writeFailed != nil ||
		!state.MachineUsable(m) || machineAddress(m) == "" {
		return 0
	}
	return max(0, exposureHold-now.Sub(s.boundAt))
}

// exposureHold bounds statusHold.
const exposureHold = 5 * time.Second

// setServiceReady says whether the claim's Service routes to its machine:
// its own Service's, or its name's under the namespace Service. A name
// published as it should be needs no condition; one that could not be
// says why.
func setServiceReady(s *claimScope, st *macvirtv1alpha1.MacClaimStatus) {
	c := s.claim
	cond := metav1.Condition{Type: macvirtv1alpha1.ConditionServiceReady, ObservedGeneration: c.Generation}
	switch {
	case s.writeFailed != nil:
		// The API server refused the Service or its EndpointSlice: the
		// Mac is reachable at its address only, until it is written.
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, s.writeFailed.Reason, s.writeFailed.Message
	case s.dns != nil && s.dns.problem != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, s.dns.problem.Reason, s.dns.problem.Message
	case s.serviceProblem != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, s.serviceProblem.Reason, s.serviceProblem.Message
		if s.serviceProblem.Reason == macvirtv1alpha1.ReasonAccessTypeNotAllowed &&
			(s.service != nil && s.endpointsReady || s.dns != nil && s.dns.published) {
			// Reachable all the same, inside the cluster.
			cond.Status = metav1.ConditionTrue
		}
	case s.service != nil && s.endpointsReady:
		cond.Status, cond.Reason = metav1.ConditionTrue, macvirtv1alpha1.ReasonAsExpected
		cond.Message = fmt.Sprintf("Service %s (%s) routes to %s", s.service.Name, s.service.Spec.Type, machineAddress(s.machine))
	case s.dns != nil && s.dns.published:
		meta.RemoveStatusCondition(&st.Conditions, cond.Type)
		return
	default:
		return
	}
	meta.SetStatusCondition(&st.Conditions, cond)
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

// setBootstrap brings the bootstrap's parts up to date with what the
// machine's guest agent reported, and sets BootstrapSucceeded from them;
// ok is false when the binding runs no bootstrap.
func setBootstrap(s *claimScope, st *macvirtv1alpha1.MacClaimStatus) (bootstrap.Summary, bool) {
	c, m := s.claim, s.machine
	st.Bootstrap = bootstrap.Observe(st.Bootstrap, c.UID, m.Status.Guest)
	version := ""
	if g := m.Status.Guest; g != nil {
		version = g.ProtocolVersion
	}
	sum, ok := bootstrap.Summarize(st.Bootstrap, version)
	if !ok {
		meta.RemoveStatusCondition(&st.Conditions, macvirtv1alpha1.ConditionBootstrapSucceeded)
		return sum, false
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionBootstrapSucceeded, Status: sum.Status,
		Reason: sum.Reason, Message: sum.Message, ObservedGeneration: c.Generation})
	return sum, true
}

// bootstrapReadyReason is Ready's reason while it waits for the bootstrap:
// the bootstrap's own reason, named as the bootstrap's where it is a word
// of its own (Running, Failed, TimedOut).
func bootstrapReadyReason(reason string) string {
	switch reason {
	case macvirtv1alpha1.ReasonBootstrapRunning, macvirtv1alpha1.ReasonBootstrapFailed, macvirtv1alpha1.ReasonBootstrapTimedOut:
		return "Bootstrap" + reason
	}
	return reason
}
