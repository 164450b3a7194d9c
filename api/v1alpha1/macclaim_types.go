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

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// ReclaimPolicy says what happens to a claim's machine when the claim is deleted.
// +kubebuilder:validation:Enum=Delete;Retain
type ReclaimPolicy string

// Reclaim policies.
const (
	// ReclaimDelete stops the machine gracefully and deletes it with its disks.
	ReclaimDelete ReclaimPolicy = "Delete"
	// ReclaimRetain keeps the machine, marked released; it never returns to a pool.
	ReclaimRetain ReclaimPolicy = "Retain"
)

// ClaimPhase summarises a claim for humans; conditions are the API.
// +kubebuilder:validation:Enum=Pending;Bound;Ready;Lost;Expired
type ClaimPhase string

// Claim phases.
const (
	ClaimPending ClaimPhase = "Pending"
	ClaimBound   ClaimPhase = "Bound"
	ClaimReady   ClaimPhase = "Ready"
	ClaimLost    ClaimPhase = "Lost"
	// ClaimExpired: the claim's lifetime is over and its machine was
	// given back; it is never bound again.
	ClaimExpired ClaimPhase = "Expired"
)

// Ended says a claim in this phase holds no machine and never will again
// (Lost or Expired): its tenant deletes it and claims again.
func (p ClaimPhase) Ended() bool { return p == ClaimLost || p == ClaimExpired }

// MacClaimSpec is a tenant's request for one Mac.
// +kubebuilder:validation:XValidation:rule="has(self.className) || has(self.poolName)",message="set className, poolName, or both"
// +kubebuilder:validation:XValidation:rule="has(self.className) == has(oldSelf.className) && has(self.poolName) == has(oldSelf.poolName)",message="className and poolName cannot be added or removed after creation"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.writeConnectionSecretToRef) || has(self.writeConnectionSecretToRef)",message="writeConnectionSecretToRef cannot be removed once set; delete and recreate the claim to stop its Secret"
type MacClaimSpec struct {
	// className is the MacClass wanted; required unless poolName is set. Immutable.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="className is immutable"
	// +optional
	ClassName string `json:"className,omitempty"`

	// poolName restricts binding to machines of this MacPool. Immutable.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="poolName is immutable"
	// +optional
	PoolName string `json:"poolName,omitempty"`

	// reclaimPolicy: Delete (default) stops the machine gracefully and
	// deletes it when the claim goes; Retain keeps it, marked released.
	// +kubebuilder:default=Delete
	// +optional
	ReclaimPolicy ReclaimPolicy `json:"reclaimPolicy,omitempty"`

	// access says how the machine is exposed: ClusterIP (the default) is a
	// DNS name under the namespace's headless Service "macs"; NodePort and
	// LoadBalancer get a Service of their own in the claim's namespace.
	// +optional
	Access ClaimAccess `json:"access,omitempty"`

	// sshAuthorizedKeys are delivered to the machine by the guest agent.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=16384
	// +listType=atomic
	// +optional
	SSHAuthorizedKeys []string `json:"sshAuthorizedKeys,omitempty"`

	// bootstrap is work the guest agent does on the Mac once it is bound
	// (files, a script, its environment), after the class's own; once per
	// binding. Immutable. The Secrets and ConfigMaps it names must be in
	// the claim's namespace and readable by whoever creates the claim.
	// +optional
	Bootstrap *Bootstrap `json:"bootstrap,omitempty"`

	// lifetime is how long the claim keeps its machine, counted from when
	// it is bound (status.boundAt). Then its machine is given back by
	// reclaimPolicy and the claim stays, phase Expired, never bound again;
	// a Warning event (ClaimExpiring) comes a tenth of the lifetime before,
	// 15 minutes at most. The class's tenancy.maxClaimLifetime caps it, and
	// applies to claims that name none. At least 1m. Immutable.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="lifetime must be at least 1m (a Go duration: 90m, 8h)"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="lifetime is immutable; claim again for another lifetime"
	// +optional
	Lifetime *metav1.Duration `json:"lifetime,omitempty"`

	// writeConnectionSecretToRef asks for a Secret in the claim's namespace
	// holding the connection (host, address, port, user, known_hosts), for
	// tools that read Secrets. It is written once the claim is Ready, never
	// on the way there; everything in it is also in status.connection. The
	// Secret must not exist yet, or be this claim's: one of that name that
	// is not the claim's is left alone. The name cannot change once set.
	// +optional
	WriteConnectionSecretToRef *LocalSecretReference `json:"writeConnectionSecretToRef,omitempty"`
}

// LocalSecretReference names a Secret in the referrer's namespace.
type LocalSecretReference struct {
	// name is the Secret's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="writeConnectionSecretToRef.name cannot change once set; delete and recreate the claim to use another Secret"
	// +required
	Name string `json:"name"`
}

// ClaimAccess says how a claim's machine is exposed.
type ClaimAccess struct {
	// type is the claim's Service type: ClusterIP (the default; reachable
	// inside the cluster), NodePort or LoadBalancer, as the class allows
	// (spec.tenancy.allowedAccessTypes).
	// +optional
	Type AccessType `json:"type,omitempty"`
}

// ClaimConnection says how to reach a claimed machine.
type ClaimConnection struct {
	// host is the Mac's DNS name, the same across re-binds of a claim of
	// this name: <claim>.macs.<namespace>.svc for ClusterIP access (it
	// resolves moments after the claim is Ready), the claim's own Service
	// (<service>.<namespace>.svc) for NodePort and LoadBalancer and for
	// claims bound before the namespace Service existed.
	// +optional
	Host string `json:"host,omitempty"`
	// serviceName is the Service that gives host: "macs", or the claim's own.
	// +optional
	ServiceName string `json:"serviceName,omitempty"`
	// user is the macOS account to log in as.
	// +optional
	User string `json:"user,omitempty"`
	// address is the machine's IP address on the pod network, as KubeVirt
	// reports it; it changes when the machine's instance is recreated.
	// +optional
	Address string `json:"address,omitempty"`
	// vncPort is the Screen Sharing port, when the class offers it.
	// +optional
	VNCPort int32 `json:"vncPort,omitempty"`
	// external is how to reach the machine from outside the cluster, for
	// the NodePort and LoadBalancer access types.
	// +optional
	External *ExternalAccess `json:"external,omitempty"`
	// sshPort is the SSH port.
	// +optional
	SSHPort int32 `json:"sshPort,omitempty"`
	// hostKeys are the machine's SSH host public keys as its guest agent
	// reported them; the connection Secret has them as known_hosts lines.
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	// +optional
	HostKeys []string `json:"hostKeys,omitempty"`
}

// ExternalAccess is how to reach a machine from outside the cluster.
type ExternalAccess struct {
	// address is the load balancer's address (IP or host name), or for
	// NodePort the address of the machine's node (its ExternalIP, else its
	// InternalIP; any node's address works); empty while unknown.
	// +optional
	Address string `json:"address,omitempty"`
	// sshPort is the SSH port there: the node port, or 22.
	// +optional
	SSHPort int32 `json:"sshPort,omitempty"`
	// vncPort is the Screen Sharing port there, when the class offers it.
	// +optional
	VNCPort int32 `json:"vncPort,omitempty"`
}

// ClaimMachineStatus summarises a claim's machine for its tenant.
type ClaimMachineStatus struct {
	// name is the machine as <namespace>/<name>.
	Name string `json:"name"`
	// phase is the machine's phase.
	// +optional
	Phase MachinePhase `json:"phase,omitempty"`
	// nodeName is the node the machine runs on.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// progress is the machine's disk provisioning progress, while it
	// provisions.
	// +optional
	Progress string `json:"progress,omitempty"`
}

// MacClaimStatus is the observed state of a claim.
type MacClaimStatus struct {
	// observedGeneration is the generation the status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// phase is Pending, Bound, Ready, Lost or Expired; informational.
	// +optional
	Phase ClaimPhase `json:"phase,omitempty"`
	// machineRef is the bound MacMachine.
	// +optional
	MachineRef *ObjectRef `json:"machineRef,omitempty"`
	// machine is what a tenant needs to know of the bound machine, which
	// lives in a namespace the tenant may not read.
	// +optional
	Machine *ClaimMachineStatus `json:"machine,omitempty"`
	// boundAt is when the claim was bound.
	// +optional
	BoundAt *metav1.Time `json:"boundAt,omitempty"`
	// readyAt is when the claim first became Ready.
	// +optional
	ReadyAt *metav1.Time `json:"readyAt,omitempty"`
	// expiresAt is when the claim's lifetime ends (spec.lifetime, or the
	// class's maxClaimLifetime), fixed when it is bound; unset when
	// neither is set.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
	// connection says how to reach the machine.
	// +optional
	Connection *ClaimConnection `json:"connection,omitempty"`
	// connectionSecretName is the Secret in the claim's namespace with
	// host, port, user and a known-hosts line, once written (only for
	// claims that set spec.writeConnectionSecretToRef, and for claims
	// bound before that field existed).
	// +optional
	ConnectionSecretName string `json:"connectionSecretName,omitempty"`
	// connectionSecretUID is the UID of the Secret the operator created, so
	// only that Secret is ever replaced when the connection changes.
	// +optional
	ConnectionSecretUID types.UID `json:"connectionSecretUID,omitempty"`
	// conditions: Bound, Ready, and Stalled when the claim cannot proceed
	// without a human (its machine was lost, or its class or pool is unusable);
	// ConnectionSecretReady says whether the connection Secret could be
	// written (False, reason SecretConflict, while a Secret of its name exists
	// that the claim does not control).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// bootstrap is what became of each part of the bootstrap (the class's,
	// then the claim's), while the claim is bound.
	// +kubebuilder:validation:MaxItems=2
	// +listType=map
	// +listMapKey=name
	// +optional
	Bootstrap []BootstrapPartStatus `json:"bootstrap,omitempty"`
}

// MacClaim is a tenant's request for one Mac; it binds to one MacMachine
// the way a PersistentVolumeClaim binds to a PersistentVolume.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=mcc,categories=macvirt
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.className`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.poolName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Machine",type=string,JSONPath=`.status.machine.name`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.machine.nodeName`,priority=1
// +kubebuilder:printcolumn:name="Progress",type=string,JSONPath=`.status.machine.progress`,priority=1
// +kubebuilder:printcolumn:name="Host",type=string,JSONPath=`.status.connection.host`,priority=1
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.status.connection.address`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Bootstrap",type=string,JSONPath=`.status.conditions[?(@.type=="BootstrapSucceeded")].reason`,priority=1
// +kubebuilder:printcolumn:name="Expires",type=string,JSONPath=`.status.expiresAt`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MacClaim struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the request.
	// +required
	Spec MacClaimSpec `json:"spec"`

	// status is the observed state.
	// +optional
	Status MacClaimStatus `json:"status,omitempty"`
}

// MacClaimList is a list of MacClaim.
// +kubebuilder:object:root=true
type MacClaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MacClaim `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &MacClaim{}, &MacClaimList{})
		return nil
	})
}
