package machine

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/index"
	"github.com/macvirt/macvirt/internal/controller/state"
)

// +kubebuilder:rbac:groups=macvirt.io,resources=machosts,verbs=list;watch

// hostCandidate is one MacHost as placement weighs it.
type hostCandidate struct {
	Name string
	// Slots is how many VMs the host may run; Placed how many of them
	// are taken: by the machines placed on it (those the cache shows, and
	// those this operator placed that it does not show yet), or by the
	// VMs its agent sees running, when more.
	Slots, Placed int
	// Refused says why the host takes no machine whatever its slots
	// (not Ready, cordoned, disk pressure); empty when it may.
	Refused string
	// Cached: the host already holds the class's image.
	Cached bool
	// Machines is every machine placed on the host, suspended ones too.
	Machines int
}

// choosePlacement picks the host for a machine: among the hosts the class
// selects that take machines and have a free slot, one that has cached the
// image first, then the one with the most free slots, then the one with the
// fewest machines (suspended ones hold no slot, and are spread so), then
// by name, so the choice is deterministic. With none, the problem says why each host was
// passed over.
func choosePlacement(hosts []hostCandidate) (string, *base.Problem) {
	var fit []hostCandidate
	var why []string
	for _, h := range hosts {
		switch {
		case h.Refused != "":
			why = append(why, fmt.Sprintf("%s: %s", h.Name, h.Refused))
		case h.Placed >= h.Slots:
			why = append(why, fmt.Sprintf("%s: full (%d of %d slots taken)", h.Name, h.Placed, h.Slots))
		default:
			fit = append(fit, h)
		}
	}
	if len(fit) == 0 {
		msg := "no MacHost matches the class's placement.hostSelector; register a Mac's host agent (docs/apple-silicon-hosts.md) or change the selector"
		if len(hosts) > 0 {
			sort.Strings(why)
			msg = fmt.Sprintf("no MacHost can take the machine; it waits for a free slot: %s", strings.Join(why, "; "))
		}
		return "", &base.Problem{Reason: macvirtv1alpha1.ReasonNoHostAvailable, Message: msg}
	}
	sort.Slice(fit, func(i, j int) bool {
		a, b := fit[i], fit[j]
		if a.Cached != b.Cached {
			return a.Cached
		}
		if fa, fb := a.Slots-a.Placed, b.Slots-b.Placed; fa != fb {
			return fa > fb
		}
		if a.Machines != b.Machines {
			// Suspended machines hold no slot: spread them, so claims
			// find one to resume on every Mac with a free slot.
			return a.Machines < b.Machines
		}
		return a.Name < b.Name
	})
	return fit[0].Name, nil
}

// hostRefusal says why a host takes no new machine, from the conditions
// the host controller set: it must be Ready, and Schedulable or only full
// (fullness is counted afresh here, with the placements in flight).
func hostRefusal(h *macvirtv1alpha1.MacHost) string {
	if h.Spec.Unschedulable {
		// Read here too: a cordon counts from the moment it is written.
		return "cordoned (spec.unschedulable)"
	}
	ready := meta.FindStatusCondition(h.Status.Conditions, macvirtv1alpha1.ConditionReady)
	if ready == nil {
		return "not looked at by the operator yet"
	}
	if ready.Status != metav1.ConditionTrue {
		return fmt.Sprintf("not Ready (%s: %s)", ready.Reason, ready.Message)
	}
	s := meta.FindStatusCondition(h.Status.Conditions, macvirtv1alpha1.HostConditionSchedulable)
	switch {
	case s == nil:
		return "not looked at by the operator yet"
	case s.ObservedGeneration != h.Generation:
		return "not looked at by the operator since its last change"
	case s.Status != metav1.ConditionTrue && s.Reason != macvirtv1alpha1.ReasonHostFull:
		return fmt.Sprintf("not schedulable (%s: %s)", s.Reason, s.Message)
	}
	return ""
}

// ensurePlacement answers: is the machine of a Virtualization class placed
// on a host? It places it once, writing spec.hostName guarded by the
// machine's resourceVersion; CEL keeps it from ever changing. Placements
// are made one at a time, counting those the cache does not show yet.
func (r *Reconciler) ensurePlacement(ctx context.Context, o *machineObservation) (bool, error) {
	m := o.Machine
	if m.Spec.HostName != "" {
		return true, nil
	}
	r.placing.Lock()
	defer r.placing.Unlock()
	candidates, err := r.hostCandidates(ctx, o.Class, o.Now)
	if err != nil {
		return false, err
	}
	host, problem := choosePlacement(candidates)
	if problem != nil {
		o.Unplaced = problem
		return false, nil
	}
	patch := client.MergeFromWithOptions(m.DeepCopy(), client.MergeFromWithOptimisticLock{})
	m.Spec.HostName = host
	if err := r.Patch(ctx, m, patch); err != nil {
		m.Spec.HostName = ""
		return false, r.updateFailed(o, fmt.Errorf("placing the machine on MacHost %s: %w", host, err))
	}
	r.placed.Assume(m.UID, placement{key: client.ObjectKeyFromObject(m), host: host}, o.Now, base.UntilForgotten)
	ctrl.LoggerFrom(ctx).Info("machine placed", "host", host)
	return true, nil
}

// hostCandidates reads the hosts the class selects and counts the machines
// placed on each. Called with the placement lock held.
func (r *Reconciler) hostCandidates(ctx context.Context, class *macvirtv1alpha1.MacClass, now time.Time) ([]hostCandidate, error) {
	selector := labels.Everything()
	if s := class.Spec.Placement.HostSelector; s != nil {
		var err error
		if selector, err = metav1.LabelSelectorAsSelector(s); err != nil {
			return nil, fmt.Errorf("MacClass %s: placement.hostSelector: %w", class.Name, err)
		}
	}
	if err := r.pruneInFlight(ctx, now); err != nil {
		return nil, err
	}
	hosts := &macvirtv1alpha1.MacHostList{}
	if err := r.List(ctx, hosts, client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return nil, fmt.Errorf("listing MacHosts: %w", err)
	}
	image := class.Spec.VMImage()
	var out []hostCandidate
	for i := range hosts.Items {
		h := &hosts.Items[i]
		placed, machines, err := r.placedOn(ctx, h.Name, now)
		if err != nil {
			return nil, err
		}
		c := hostCandidate{Name: h.Name, Placed: placed, Machines: machines, Refused: hostRefusal(h)}
		if a := h.Status.Agent; a != nil {
			// VMs no machine accounts for (a user's, one left while the
			// Mac was lost) hold slots too.
			c.Slots, c.Cached, c.Placed = int(a.Slots), slices.Contains(a.CachedImages, image), max(placed, int(a.RunningVMs))
		}
		out = append(out, c)
	}
	return out, nil
}

// pruneInFlight forgets the placements the cache shows now (the machine
// has its hostName there, or is gone). Called with the placement lock held.
func (r *Reconciler) pruneInFlight(ctx context.Context, now time.Time) error {
	for uid, p := range r.placed.All(now) {
		m := &macvirtv1alpha1.MacMachine{}
		err := r.Get(ctx, p.key, m)
		switch {
		case apierrors.IsNotFound(err):
			r.placed.Forget(uid)
		case err != nil:
			return fmt.Errorf("reading machine %s, placed on MacHost %s: %w", p.key, p.host, err)
		case m.UID != uid || m.Spec.HostName != "":
			r.placed.Forget(uid)
		}
	}
	return nil
}

// placedOn counts the machines placed on a host, those that hold a slot
// (all but the idle suspended ones) and all: those the cache shows, and
// those placed here that it does not show yet.
func (r *Reconciler) placedOn(ctx context.Context, host string, now time.Time) (holding, all int, err error) {
	list := &macvirtv1alpha1.MacMachineList{}
	if err := r.List(ctx, list, client.MatchingFields{index.MachineHost: host}); err != nil {
		return 0, 0, fmt.Errorf("listing the machines on MacHost %s: %w", host, err)
	}
	all = len(list.Items)
	for i := range list.Items {
		if state.HoldsSlot(&list.Items[i]) {
			holding++
		}
	}
	for _, p := range r.placed.All(now) {
		if p.host == host {
			holding++
			all++
		}
	}
	return holding, all, nil
}

// observeHost reads the host a machine is placed on (nil once it is gone).
func (r *Reconciler) observeHost(ctx context.Context, o *machineObservation) (bool, error) {
	if o.Machine.Spec.HostName == "" {
		return true, nil
	}
	h := &macvirtv1alpha1.MacHost{}
	if err := base.GetOptional(ctx, r.Client, types.NamespacedName{Name: o.Machine.Spec.HostName}, h); err != nil {
		return false, err
	}
	if h.UID != "" {
		o.Host = h
	}
	o.HostObserved = true
	return true, nil
}
