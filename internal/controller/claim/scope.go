package claim

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// claimScope is what one reconcile of a claim observed and decided.
type claimScope struct {
	claim   *macvirtv1alpha1.MacClaim
	class   *macvirtv1alpha1.MacClass
	machine *macvirtv1alpha1.MacMachine
	lost    string
	waiting *base.Problem
	// writeFailed is a create the API server refused, in its words, or a
	// read whose failure the status must show (the Node of a NodePort).
	writeFailed *base.Problem
	// retrySoon says every idle machine tried was taken under us: look
	// again soon, without a status write (the cache is about to catch up).
	retrySoon bool
	// service is the claim's Service as it is; nil until it is written, or
	// while one of its name is not the claim's.
	service *corev1.Service
	// endpointsReady says the Service's EndpointSlice names the machine.
	endpointsReady bool
	// serviceProblem says why the Service is not as the claim asks.
	serviceProblem *base.Problem
	// nodeAddress is the address of the machine's node, where a NodePort
	// Service reaches it; empty when unknown.
	nodeAddress string
	// secret is what writing the connection Secret came to in this
	// reconcile; nil when nothing was written (the connection unchanged,
	// and not due again).
	secret *secretOutcome
}

// secretOutcome is what a write of the connection Secret came to: the
// connection written, or why not (a Secret of its name that is not the
// claim's, or a write the API server refused).
type secretOutcome struct {
	applied  *macvirtv1alpha1.ClaimConnection
	conflict string
	refused  *secretWriteError
	// at is when it was written.
	at time.Time
}
