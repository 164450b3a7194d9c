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
	"errors"
	"fmt"
	"sync"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// Defaults applied by New to zero-valued Options fields.
const (
	DefaultImportSteps   = 4
	DefaultStepInterval  = 50 * time.Millisecond
	DefaultStartDelay    = 50 * time.Millisecond
	DefaultShutdownDelay = 50 * time.Millisecond
	DefaultNodeName      = "apple-node-1"
)

// faultEventBuffer bounds the queue of reconcile triggers sent by Inject and
// Clear before the controllers start reading them.
const faultEventBuffer = 256

// Options tunes the simulated timings. Zero values take the defaults above.
type Options struct {
	// ImportSteps is the number of progress updates a DataVolume import or
	// clone reports before it Succeeds.
	ImportSteps int
	// StepInterval is the time between DataVolume phase and progress steps.
	StepInterval time.Duration
	// StartDelay is the time the node side takes from a virt-launcher pod
	// virt-controller created to its instance Running, spread over binding
	// the pod, starting its containers and reporting the domain.
	StartDelay time.Duration
	// ShutdownDelay is the simulated ACPI shutdown time: from a graceful stop
	// (deletion of the VirtualMachineInstance) to the instance being gone. A
	// shorter spec.terminationGracePeriodSeconds on the instance cuts it.
	ShutdownDelay time.Duration
	// NodeName is the node reported for scheduled VirtualMachineInstances
	// when Nodes is empty.
	NodeName string
	// Nodes, when set, registers these Apple-hardware nodes (labelled and
	// tainted macvirt.io/apple-hardware, each with a kubelet stand-in; see
	// nodes.go) and places every instance on one of them as kube-scheduler
	// would, counting extended resources such as macOS slots against each
	// node's allocatable (scheduler.go). Without it every instance lands on
	// NodeName, which has room for all.
	Nodes []string
	// GuestFiles are files every simulated guest's disk holds from its first
	// boot, as a golden image would carry them (GitHub's runner, say), by
	// path under the guest's root (Users/admin/actions-runner/run.sh).
	GuestFiles map[string]GuestFile
	// Guests runs a simulated macOS guest, speaking the guest agent's real
	// protocol, in every Running instance with a macvirt agent config disk.
	Guests bool
	// Network simulates the pod network for guests and a kube-proxy for
	// NodePort Services on a registered node whose address is NodeAddress
	// (see network.go): each simulated guest then answers SSH on its pod
	// address, port 22, and a NodePort reaches it from this machine.
	Network bool
	// GarbageCollector runs a stand-in for kube-controller-manager's garbage
	// collector (see gc.go): Services, EndpointSlices, Secrets,
	// NetworkPolicies, VirtualMachines and DataVolumes whose owners are all
	// gone are deleted.
	GarbageCollector bool
	// GuestBootDelay is the simulated macOS boot: from Running to the first
	// heartbeat.
	GuestBootDelay time.Duration
	// Jitter spreads every paced step (DataVolume steps, instance start and
	// shutdown) by a random share of up to this fraction either way. Zero,
	// the default, keeps timings exact; Realistic sets it.
	Jitter float64
	// Seed seeds the jitter's random source, so that a run can be repeated.
	Seed int64
	// CloneStrategy is the clone strategy of DataVolumes with no storage
	// class at all (named, or a cluster default): copy (host-assisted,
	// with progress; the default), csi-clone or snapshot, which report no
	// progress until they are done. A DataVolume with a class takes the
	// strategy CDI picks from the class's StorageProfile
	// (datavolume_clone.go).
	CloneStrategy cdiv1.CDICloneStrategy
	// CloneDurations is how long clones take, by the strategy CDI picks
	// (cdi.kubevirt.io/cloneType): for snapshot and csi-clone the whole
	// clone after CloneScheduled, spread over its phases, whatever its size
	// (the storage clones on its side); for copy the time to copy one GiB
	// of the source, spread over ImportSteps progress steps. Missing
	// entries: one StepInterval per phase, and for copy ImportSteps
	// StepIntervals per 64 GiB.
	CloneDurations map[cdiv1.CDICloneStrategy]time.Duration
	// SnapshotDelay is the time a CSI driver takes to cut a VolumeSnapshot
	// and report it readyToUse (volumesnapshot.go); default StepInterval.
	SnapshotDelay time.Duration
	// ControlPlane is an administrator's connection to the cluster, which
	// runs KubeVirt's own virt-api and virt-controller
	// (cluster.StartWithKubeVirt); it is required. Of KubeVirt the
	// simulator plays only what runs on nodes: kube-scheduler and the
	// kubelet for virt-launcher pods (kubelet.go), and virt-handler
	// (handler.go), whose writes impersonate its service account from this
	// config.
	ControlPlane *rest.Config
	// Registry is the container registry DataImportCrons poll for their
	// images' digests (registry.go, dataimportcron_poll.go). Nil: there is
	// none, and every poll fails as for an image that does not exist.
	Registry *Registry
}

func (o Options) withDefaults() Options {
	if o.ImportSteps <= 0 {
		o.ImportSteps = DefaultImportSteps
	}
	if o.StepInterval <= 0 {
		o.StepInterval = DefaultStepInterval
	}
	if o.StartDelay <= 0 {
		o.StartDelay = DefaultStartDelay
	}
	if o.ShutdownDelay <= 0 {
		o.ShutdownDelay = DefaultShutdownDelay
	}
	if o.NodeName == "" {
		o.NodeName = DefaultNodeName
	}
	if o.SnapshotDelay <= 0 {
		o.SnapshotDelay = o.StepInterval
	}
	return o
}

// Simulator plays KubeVirt's nodes and CDI against a cluster that runs
// KubeVirt's control plane but no nodes and no CDI. Create it with New and
// register its controllers with SetupWithManager (once per Simulator).
type Simulator struct {
	client client.Client
	// reader reads from the API server, not from a cache that may lag
	// behind a write just made.
	reader client.Reader
	opts   Options
	pacer  *pacer
	jitter *jitter
	timing *timing

	mu     sync.Mutex
	faults map[Fault]struct{}
	// nodes are the Apple-hardware nodes instances are scheduled onto
	// (Options.Nodes, or SetNodes); none: every instance goes to NodeName.
	nodes []string
	// assumed holds the node of each pod placed there that waits for its
	// volumes before it is bound.
	assumed map[types.UID]string
	// handlers are the clients of the nodes' virt-handlers (ControlPlane).
	handlers map[string]client.Client

	dataVolumeEvents chan event.GenericEvent
	vmiEvents        chan event.GenericEvent
	// podEvents prompt the kubelet for the launcher pods of the instance
	// they name (ControlPlane).
	podEvents chan event.GenericEvent

	guests  guests
	network podNetwork
	// volumes are what the simulated disks hold (volumecontent.go).
	volumes volumeContents
	// crons is the DataImportCrons' polling state (dataimportcron_poll.go).
	crons dataImportCrons
}

// New returns a Simulator that reads and writes objects through c. The
// client's scheme must know the KubeVirt and CDI types (see AddToScheme).
func New(c client.Client, opts Options) *Simulator {
	opts = opts.withDefaults()
	j := newJitter(opts.Jitter, opts.Seed)
	return &Simulator{
		client:           c,
		reader:           c,
		opts:             opts,
		pacer:            newPacer(j),
		jitter:           j,
		timing:           newTiming(),
		faults:           map[Fault]struct{}{},
		nodes:            append([]string(nil), opts.Nodes...),
		dataVolumeEvents: make(chan event.GenericEvent, faultEventBuffer),
		vmiEvents:        make(chan event.GenericEvent, faultEventBuffer),
		podEvents:        make(chan event.GenericEvent, faultEventBuffer),
	}
}

// AddToScheme registers the KubeVirt, CDI and CSI snapshot API types the
// simulator works with.
func AddToScheme(s *runtime.Scheme) error {
	if err := kubevirtv1.AddToScheme(s); err != nil {
		return fmt.Errorf("adding KubeVirt types to scheme: %w", err)
	}
	if err := cdiv1.AddToScheme(s); err != nil {
		return fmt.Errorf("adding CDI types to scheme: %w", err)
	}
	if err := snapshotv1.AddToScheme(s); err != nil {
		return fmt.Errorf("adding VolumeSnapshot types to scheme: %w", err)
	}
	return nil
}

// SetupWithManager registers the simulated CDI, storage and node
// controllers with mgr. Their names start with "sim-" and skip the
// uniqueness check, so several simulators may run in one process. From
// then on the simulator reads through the manager's uncached API reader.
func (s *Simulator) SetupWithManager(mgr ctrl.Manager) error {
	if s.opts.ControlPlane == nil {
		return errors.New("the simulator needs Options.ControlPlane: a cluster running KubeVirt's own virt-api and virt-controller (cluster.StartWithKubeVirt)")
	}
	s.mu.Lock()
	s.reader = mgr.GetAPIReader()
	s.mu.Unlock()
	admission, err := s.startDataVolumeAdmission(context.Background())
	if err != nil {
		return err
	}
	if err := mgr.Add(admission); err != nil {
		return err
	}
	if err := (&dataVolumeReconciler{sim: s}).setup(mgr); err != nil {
		return err
	}
	if err := (&dataSourceReconciler{sim: s}).setup(mgr); err != nil {
		return err
	}
	if err := (&dataImportCronReconciler{sim: s}).setup(mgr); err != nil {
		return err
	}
	if err := s.setupStorage(mgr); err != nil {
		return err
	}
	if err := mgr.Add(guestRunnable{sim: s}); err != nil {
		return err
	}
	if s.opts.GarbageCollector {
		if err := mgr.Add(garbageCollector{sim: s, mapper: mgr.GetRESTMapper()}); err != nil {
			return err
		}
	}
	if err := mgr.Add(nodesRunnable{sim: s}); err != nil {
		return err
	}
	if s.opts.Network {
		if err := (&serviceProxy{sim: s}).setup(mgr); err != nil {
			return err
		}
	}
	if err := (&launcherReconciler{sim: s}).setup(mgr); err != nil {
		return err
	}
	return (&handlerReconciler{sim: s}).setup(mgr)
}
