package claim

import (
	"net/netip"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

func TestComputeClaimStatus(t *testing.T) {
	claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "team", Generation: 2}}
	ready := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "pools", UID: "u1"},
		Status: macvirtv1alpha1.MacMachineStatus{Phase: macvirtv1alpha1.MachineReady, Addresses: []string{"10.0.0.7"},
			Conditions: []metav1.Condition{{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "AsExpected"}}}}
	// The guest reports what it sees behind masquerade; KubeVirt reports
	// no address (yet).
	unaddressed := ready.DeepCopy()
	unaddressed.Status.Addresses = nil
	unaddressed.Status.Guest = &macvirtv1alpha1.GuestStatus{IPAddresses: []string{"10.0.2.2"}}
	keysRefused := ready.DeepCopy()
	keysRefused.Status.Guest = &macvirtv1alpha1.GuestStatus{ApplyError: "refusing /Users/admin/.ssh: it is not a real directory"}
	booting := ready.DeepCopy()
	booting.Status.Phase, booting.Status.Conditions = macvirtv1alpha1.MachineBooting, nil
	// A Mac of the Virtualization runtime: Ready, its guest's address on
	// the Mac's NAT network only (status.host), none in status.addresses.
	onMac := unaddressed.DeepCopy()
	onMac.Spec.HostName = "mac-a"
	onMac.Status.Host = &macvirtv1alpha1.HostVMStatus{State: macvirtv1alpha1.HostVMRunning, Address: "192.168.64.5"}
	killed := ready.DeepCopy()
	killed.Status.Phase = macvirtv1alpha1.MachineStopped
	killed.Status.Conditions = []metav1.Condition{
		{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: macvirtv1alpha1.ReasonForcedPowerOff, Message: "KubeVirt killed it"},
		{Type: macvirtv1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: macvirtv1alpha1.ReasonForcedPowerOff, Message: "KubeVirt killed it"}}
	for name, tc := range map[string]struct {
		scope          claimScope
		phase          macvirtv1alpha1.ClaimPhase
		reason         string
		stalled        metav1.ConditionStatus
		wantConnection bool
	}{
		"waiting for a machine": {claimScope{waiting: &base.Problem{Reason: macvirtv1alpha1.ReasonWaitingForMachine, Message: "none idle"}},
			macvirtv1alpha1.ClaimPending, macvirtv1alpha1.ReasonWaitingForMachine, metav1.ConditionFalse, false},
		"waiting on a human": {claimScope{waiting: &base.Problem{Reason: macvirtv1alpha1.ReasonTooManyReleased, Message: "full"}},
			macvirtv1alpha1.ClaimPending, macvirtv1alpha1.ReasonTooManyReleased, metav1.ConditionTrue, false},
		"an on-demand machine refused": {claimScope{writeFailed: &base.Problem{Reason: macvirtv1alpha1.ReasonCreateFailed, Message: "exceeded quota"}},
			macvirtv1alpha1.ClaimPending, macvirtv1alpha1.ReasonCreateFailed, metav1.ConditionTrue, false},
		"bound, machine booting": {claimScope{machine: booting},
			macvirtv1alpha1.ClaimBound, macvirtv1alpha1.ReasonMachineNotReady, metav1.ConditionFalse, false},
		"bound, machine killed at the end of a stop": {claimScope{machine: killed},
			macvirtv1alpha1.ClaimBound, macvirtv1alpha1.ReasonForcedPowerOff, metav1.ConditionTrue, false},
		"ready": {claimScope{machine: ready, exposed: true},
			macvirtv1alpha1.ClaimReady, macvirtv1alpha1.ReasonAsExpected, metav1.ConditionFalse, true},
		"ready, but its NetworkPolicy does not let the claim in yet": {claimScope{machine: ready},
			macvirtv1alpha1.ClaimBound, macvirtv1alpha1.ReasonWaitingForNetworkPolicy, metav1.ConditionFalse, true},
		"ready, but the guest could not apply the keys": {claimScope{machine: keysRefused},
			macvirtv1alpha1.ClaimBound, macvirtv1alpha1.ReasonGuestConfigFailed, metav1.ConditionTrue, true},
		"ready, but with no address but the guest's own": {claimScope{machine: unaddressed},
			macvirtv1alpha1.ClaimBound, macvirtv1alpha1.ReasonMachineNotReady, metav1.ConditionFalse, false},
		"ready on an Apple-silicon Mac: Ready, reached through the tunnel": {claimScope{machine: onMac, exposed: true},
			macvirtv1alpha1.ClaimReady, macvirtv1alpha1.ReasonAsExpected, metav1.ConditionFalse, true},
		"lost": {claimScope{lost: "bound machine pools/m no longer exists"},
			macvirtv1alpha1.ClaimLost, macvirtv1alpha1.ReasonMachineLost, metav1.ConditionTrue, false},
	} {
		t.Run(name, func(t *testing.T) {
			s := tc.scope
			s.claim = claim
			st := computeClaimStatus(&s, metav1.Now())
			if st.Phase != tc.phase {
				t.Errorf("phase = %s, want %s", st.Phase, tc.phase)
			}
			if c := meta.FindStatusCondition(st.Conditions, macvirtv1alpha1.ConditionReady); c == nil || c.Reason != tc.reason {
				t.Errorf("Ready = %+v, want reason %s", c, tc.reason)
			}
			// Stalled is there only while it is True: no padding.
			c := meta.FindStatusCondition(st.Conditions, macvirtv1alpha1.ConditionStalled)
			if tc.stalled == metav1.ConditionTrue && (c == nil || c.Status != metav1.ConditionTrue) || tc.stalled == metav1.ConditionFalse && c != nil {
				t.Errorf("Stalled = %+v, want %s (absent when False)", c, tc.stalled)
			}
			if (st.Connection != nil) != tc.wantConnection {
				t.Errorf("connection = %+v, want one: %v", st.Connection, tc.wantConnection)
			}
			// A guest behind its host's NAT publishes the tunnel's port and
			// no address: the NAT address routes nowhere in the cluster.
			if conn := st.Connection; conn != nil && s.machine.Spec.HostName != "" &&
				(conn.Address != "" || conn.Host != "" || conn.ServiceName != "" || conn.SSHPort != 22) {
				t.Errorf("connection of a Mac on a host = %+v, want port 22 and no address", conn)
			}
		})
	}
}

func TestTurnedStalled(t *testing.T) {
	cond := func(status metav1.ConditionStatus, reason string) []metav1.Condition {
		return []metav1.Condition{{Type: macvirtv1alpha1.ConditionStalled, Status: status, Reason: reason, Message: reason + " message"}}
	}
	for name, tc := range map[string]struct {
		before, after []metav1.Condition
		want          string
	}{
		"turns stalled":              {cond(metav1.ConditionFalse, "AsExpected"), cond(metav1.ConditionTrue, "ForcedPowerOff"), "ForcedPowerOff"},
		"stalled from the first":     {nil, cond(metav1.ConditionTrue, "ClassNotFound"), "ClassNotFound"},
		"stalled for another reason": {cond(metav1.ConditionTrue, "ImagePullFailed"), cond(metav1.ConditionTrue, "ForcedPowerOff"), "ForcedPowerOff"},
		"stays stalled":              {cond(metav1.ConditionTrue, "ForcedPowerOff"), cond(metav1.ConditionTrue, "ForcedPowerOff"), ""},
		"recovers":                   {cond(metav1.ConditionTrue, "ForcedPowerOff"), cond(metav1.ConditionFalse, "AsExpected"), ""},
	} {
		t.Run(name, func(t *testing.T) {
			reason, note, ok := base.TurnedStalled(tc.before, tc.after)
			if reason != tc.want || ok != (tc.want != "") || (ok && note != tc.want+" message") {
				t.Errorf("turnedStalled = %q, %q, %v; want %q", reason, note, ok, tc.want)
			}
		})
	}
}

func TestKnownHosts(t *testing.T) {
	const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE0Ow6DQP+//k6m8zioktAbUb0Su/x93h9rtsTyq+kAs"
	for _, c := range []struct {
		conn macvirtv1alpha1.ClaimConnection
		want string
	}{
		{macvirtv1alpha1.ClaimConnection{Address: "10.0.0.5", SSHPort: 22, HostKeys: []string{key}}, "10.0.0.5 " + key + "\n"},
		{macvirtv1alpha1.ClaimConnection{Address: "10.0.0.5", SSHPort: 2222, HostKeys: []string{key, key}},
			"[10.0.0.5]:2222 " + key + "\n[10.0.0.5]:2222 " + key + "\n"},
		{macvirtv1alpha1.ClaimConnection{Address: "10.0.0.5", SSHPort: 22}, ""},
	} {
		if got := knownHosts(&c.conn); got != c.want {
			t.Errorf("knownHosts(%+v) = %q, want %q", c.conn, got, c.want)
		}
	}
}

func TestClaimOfAMachineThatHasNotReported(t *testing.T) {
	fresh := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "team", UID: "u1"}}
	s := claimScope{claim: &macvirtv1alpha1.MacClaim{}, machine: fresh}
	st := computeClaimStatus(&s, metav1.Now())
	if c := meta.FindStatusCondition(st.Conditions, macvirtv1alpha1.ConditionReady); c == nil || c.Message != "machine has not reported yet" {
		t.Errorf("Ready = %+v, want the message to say the machine has not reported yet", c)
	}
}

func TestAClaimShowsItsMachineToATenantWhoMayNotReadIt(t *testing.T) {
	m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "pool-3", Namespace: "macvirt-pools", UID: "u"},
		Status: macvirtv1alpha1.MacMachineStatus{Phase: macvirtv1alpha1.MachineProvisioning, NodeName: "mac-mini-7",
			Provisioning: &macvirtv1alpha1.ProvisioningStatus{Progress: "40%"}}}
	st := computeClaimStatus(&claimScope{claim: &macvirtv1alpha1.MacClaim{}, machine: m}, metav1.Now())
	want := macvirtv1alpha1.ClaimMachineStatus{Name: "macvirt-pools/pool-3", Phase: macvirtv1alpha1.MachineProvisioning,
		NodeName: "mac-mini-7", Progress: "40%"}
	if st.Machine == nil || *st.Machine != want {
		t.Errorf("status.machine = %+v, want %+v", st.Machine, want)
	}
}

// The address a tenant is given is KubeVirt's (the virt-launcher pod's on
// the pod network), never the guest's own: behind masquerade a macOS guest
// sees only 10.0.2.2 (or the .2 of the network's vmNetworkCIDR), which no
// one outside the pod can reach.
func TestTheConnectionAddressIsNeverTheGuestsMasqueradeAddress(t *testing.T) {
	masquerade := netip.MustParsePrefix("10.0.2.0/24")
	for name, guest := range map[string][]string{
		"the default network":       {"10.0.2.2"},
		"a guest with IPv6 too":     {"10.0.2.2", "fd10:0:2::2"},
		"a guest that reports none": nil,
	} {
		t.Run(name, func(t *testing.T) {
			m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "pools", UID: "u1"},
				Status: macvirtv1alpha1.MacMachineStatus{Phase: macvirtv1alpha1.MachineReady, Addresses: []string{"10.244.7.9"},
					Guest:      &macvirtv1alpha1.GuestStatus{IPAddresses: guest},
					Conditions: []metav1.Condition{{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "AsExpected"}}}}
			claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "team"}}
			st := computeClaimStatus(&claimScope{claim: claim, machine: m}, metav1.Now())
			if st.Connection == nil {
				t.Fatalf("no connection: %+v", st)
			}
			addr, err := netip.ParseAddr(st.Connection.Address)
			if err != nil || masquerade.Contains(addr) || st.Connection.Address != "10.244.7.9" {
				t.Errorf("connection address %q, want KubeVirt's 10.244.7.9 and never the guest's side of masquerade", st.Connection.Address)
			}
		})
	}
}

// A claim this process has just bound holds its status write only while
// the one thing missing for Ready is its machine's NetworkPolicy, and only
// for exposureHold.
func TestStatusHold(t *testing.T) {
	now := time.Now()
	ready := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "pools"},
		Status: macvirtv1alpha1.MacMachineStatus{Phase: macvirtv1alpha1.MachineReady, Addresses: []string{"10.0.0.7"},
			Conditions: []metav1.Condition{{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "AsExpected"}}}}
	booting := ready.DeepCopy()
	booting.Status.Phase, booting.Status.Conditions = macvirtv1alpha1.MachineBooting, nil
	claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "team"}}
	recorded := claim.DeepCopy()
	recorded.Status.BoundAt = &metav1.Time{Time: now}
	for name, tc := range map[string]struct {
		s    claimScope
		want time.Duration
	}{
		"just bound, policy behind":       {claimScope{claim: claim, machine: ready, boundAt: now.Add(-time.Second)}, exposureHold - time.Second},
		"just bound, policy in step":      {claimScope{claim: claim, machine: ready, boundAt: now, exposed: true}, 0},
		"bound too long ago":              {claimScope{claim: claim, machine: ready, boundAt: now.Add(-exposureHold)}, 0},
		"bound by someone else":           {claimScope{claim: claim, machine: ready}, 0},
		"the status records it already":   {claimScope{claim: recorded, machine: ready, boundAt: now}, 0},
		"the machine is not Ready anyway": {claimScope{claim: claim, machine: booting, boundAt: now}, 0},
		"a refusal the status must show":  {claimScope{claim: claim, machine: ready, boundAt: now, writeFailed: &base.Problem{Reason: "UpdateFailed"}}, 0},
	} {
		if got := statusHold(&tc.s, now); got != tc.want {
			t.Errorf("%s: statusHold = %v; want %v", name, got, tc.want)
		}
	}
}
