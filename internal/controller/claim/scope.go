package claim

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// claimScope is what one reconcile of a claim observed and decided.
type claimScope struct {
	claim   *macvirtv1alpha1.MacClaim
	class   *macvirtv1alpha1.MacClass
	machine *macvirtv1alpha1.MacMachine
	// orphans are the machines bound to the claim besides the one its
	// status names, found by findBound for deleteOrphans.
	orphans []*macvirtv1alpha1.MacMachine
	lost    string
	waiting *base.Problem
	// writeFailed is a create the API server refused, in its words, or a
	// read whose failure the status must show (the Node of a NodePort).
	writeFailed *base.Problem
	// retrySoon says every idle machine tried was taken under us: look
	// again soon, without a status write (the cache is about to catch up).
	retrySoon bool
	// waitSlot says the claim's idle machines are all suspended on MacHosts
	// with no free slot: its status says so, and it looks again shortly.
	waitSlot bool
	// boundAt is when this process bound the machine; zero when it does
	// not know (another process bound it, or this one restarted since).
	boundAt time.Time
	// exposed says the machine's NetworkPolicy lets the claim's namespace
	// in: without it the Mac is not reachable, and the claim not Ready.
	exposed bool
	// service is the claim's own Service as it is (NodePort, LoadBalancer,
	// or a ClusterIP one an older operator made); nil when the claim has
	// none, until it is written, or while one of its name is not the claim's.
	service *corev1.Service
	// endpointsReady says the Service's EndpointSlice names the machine.
	endpointsReady bool
	// serviceProblem says why the Service is not as the claim asks.
	serviceProblem *base.Problem
	// nodeAddress is the address of the machine's node, where a NodePort
	// Service reaches it; empty when unknown.
	nodeAddress string
	// dns is what publishing the claim's name under the namespace Service
	// came to in this reconcile; nil when it was not tried.
	dns *dnsOutcome
	// secret is what writing the connection Secret came to in this
	// reconcile; nil when nothing was written.
	secret *secretOutcome
	// machineClass is the class the bound machine was made of (its
	// recorded revision), once machineClassLoaded; what its access follows.
	machineClass       *macvirtv1alpha1.MacClass
	machineClassLoaded bool
}

// dnsOutcome is what publishing the claim's DNS name came to: its
// EndpointSlice written, or why not.
type dnsOutcome struct {
	published bool
	problem   *base.Problem
}

// secretOutcome is what a write of the connection Secret came to: the
// Secret created (its name and UID) or found in place, or why not (a Secret
// of its name that is not the claim's, or a write the API server refused),
// and whether the claim's own holds an earlier connection.
type secretOutcome struct {
	name     string
	uid      types.UID
	conflict string
	// stale says the claim's own Secret holds an earlier connection.
	stale   string
	refused *secretWriteError
	// at is when it was written.
	at time.Time
}

// accessClass is the class a bound claim's access follows: the revision its
// machine was made of, once read; until then the class the claim resolved.
func (s *claimScope) accessClass() *macvirtv1alpha1.MacClass {
	if s.machineClassLoaded {
		return s.machineClass
	}
	return s.class
}
