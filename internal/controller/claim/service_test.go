package claim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

func TestServiceNameIsTheClaimsWhenItCanBe(t *testing.T) {
	for name, want := range map[string]string{
		"build":                      "build",
		"ios-ci-7":                   "ios-ci-7",
		"7up":                        "",
		"team.build":                 "",
		strings.Repeat("a", 64):      "",
		"a-name-that-ends-in-dash-x": "a-name-that-ends-in-dash-x",
	} {
		got := serviceName(&macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: name}})
		if errs := validation.IsDNS1035Label(got); len(errs) > 0 {
			t.Errorf("serviceName(%q) = %q, not a Service name: %v", name, got, errs)
		}
		if want != "" && got != want {
			t.Errorf("serviceName(%q) = %q, want the claim's own name", name, got)
		}
		if want == "" && !strings.HasPrefix(got, "mac-") {
			t.Errorf("serviceName(%q) = %q, want mac-<hash>", name, got)
		}
	}
}

func TestDesiredServiceAndSlice(t *testing.T) {
	claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: "team", UID: "c1"},
		Spec: macvirtv1alpha1.MacClaimSpec{Access: macvirtv1alpha1.ClaimAccess{Type: macvirtv1alpha1.AccessLoadBalancer}}}
	class := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "sonoma"}}
	svc := desiredService(claim, class)
	if svc.Spec.Type != corev1.ServiceTypeClusterIP || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 22 || len(svc.Spec.Selector) != 0 {
		t.Errorf("a class allowing ClusterIP only, without Screen Sharing: %+v", svc.Spec)
	}
	class.Spec.Tenancy.AllowedAccessTypes = []macvirtv1alpha1.AccessType{macvirtv1alpha1.AccessLoadBalancer}
	class.Spec.Access.ScreenSharing = true
	svc = desiredService(claim, class)
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || len(svc.Spec.Ports) != 2 || svc.Spec.Ports[1].Port != 5900 {
		t.Errorf("LoadBalancer with Screen Sharing: %+v", svc.Spec)
	}
	if svc.Labels[macvirtv1alpha1.LabelClaim] != "build" || !metav1.IsControlledBy(svc, claim) {
		t.Errorf("the Service is not labelled and controlled by its claim: %+v", svc.ObjectMeta)
	}

	m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "m"}, Status: macvirtv1alpha1.MacMachineStatus{
		Phase: macvirtv1alpha1.MachineReady, Addresses: []string{"10.244.1.9"}, NodeName: "apple-1",
		Guest: &macvirtv1alpha1.GuestStatus{IPAddresses: []string{"10.0.2.2"}},
		Conditions: []metav1.Condition{{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "AsExpected"},
			{Type: macvirtv1alpha1.ConditionVMRunning, Status: metav1.ConditionTrue, Reason: "AsExpected"}}}}
	slice := desiredSlice(claim, svc, m)
	if slice.Labels[discoveryv1.LabelServiceName] != "build" || slice.AddressType != discoveryv1.AddressTypeIPv4 || len(slice.Ports) != 2 {
		t.Errorf("slice %+v", slice)
	}
	if len(slice.Endpoints) != 1 || slice.Endpoints[0].Addresses[0] != "10.244.1.9" || *slice.Endpoints[0].NodeName != "apple-1" ||
		!*slice.Endpoints[0].Conditions.Ready {
		t.Errorf("endpoints %+v, want KubeVirt's address (not the guest's 10.0.2.2), its node, ready", slice.Endpoints)
	}
	m.Status.Addresses = []string{"fd00::9"}
	if slice := desiredSlice(claim, svc, m); slice.AddressType != discoveryv1.AddressTypeIPv6 {
		t.Errorf("an IPv6 address in an %s slice", slice.AddressType)
	}
	m.Status.Addresses = nil
	if slice := desiredSlice(claim, svc, m); len(slice.Endpoints) != 0 {
		t.Errorf("endpoints %+v for a machine without an address", slice.Endpoints)
	}
}

func TestExternalAccess(t *testing.T) {
	np := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{
		{Name: "ssh", Port: 22, NodePort: 30022}, {Name: "vnc", Port: 5900, NodePort: 30590}}}}
	if ext := externalAccess(np, "192.0.2.7"); ext == nil || ext.Address != "192.0.2.7" || ext.SSHPort != 30022 || ext.VNCPort != 30590 {
		t.Errorf("NodePort: %+v", ext)
	}
	lb := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Name: "ssh", Port: 22}}}}
	if ext := externalAccess(lb, "192.0.2.7"); ext == nil || ext.Address != "" || ext.SSHPort != 22 {
		t.Errorf("a LoadBalancer still being provisioned: %+v", ext)
	}
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{Hostname: "mac.example.com"}}
	if ext := externalAccess(lb, "192.0.2.7"); ext == nil || ext.Address != "mac.example.com" {
		t.Errorf("a LoadBalancer with a host name: %+v", ext)
	}
	if ext := externalAccess(&corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}}, "192.0.2.7"); ext != nil {
		t.Errorf("ClusterIP: %+v", ext)
	}
}

func TestKnownHostsNameTheMacEveryWayTheConnectionDoes(t *testing.T) {
	conn := &macvirtv1alpha1.ClaimConnection{Host: "build.team.svc", Address: "10.244.1.9", SSHPort: 22, HostKeys: []string{"ssh-ed25519 AAAA"},
		External: &macvirtv1alpha1.ExternalAccess{Address: "203.0.113.7", SSHPort: 30022}}
	if got, want := knownHosts(conn), "build.team.svc,10.244.1.9,[203.0.113.7]:30022 ssh-ed25519 AAAA\n"; got != want {
		t.Errorf("knownHosts = %q, want %q", got, want)
	}
}

func TestNodeAddress(t *testing.T) {
	addr := func(t corev1.NodeAddressType, a string) corev1.NodeAddress {
		return corev1.NodeAddress{Type: t, Address: a}
	}
	for name, tc := range map[string]struct {
		addrs []corev1.NodeAddress
		want  string
	}{
		"external first":       {[]corev1.NodeAddress{addr(corev1.NodeHostName, "mac-1"), addr(corev1.NodeInternalIP, "10.1.0.4"), addr(corev1.NodeExternalIP, "192.0.2.4")}, "192.0.2.4"},
		"internal without one": {[]corev1.NodeAddress{addr(corev1.NodeHostName, "mac-1"), addr(corev1.NodeInternalIP, "10.1.0.4")}, "10.1.0.4"},
		"a host name at worst": {[]corev1.NodeAddress{addr(corev1.NodeHostName, "mac-1")}, "mac-1"},
		"none":                 {nil, ""},
	} {
		if got := nodeAddress(&corev1.Node{Status: corev1.NodeStatus{Addresses: tc.addrs}}); got != tc.want {
			t.Errorf("%s: nodeAddress = %q, want %q", name, got, tc.want)
		}
	}
}

// A NodePort claim whose machine's Node cannot be read keeps its Service
// and EndpointSlice, says in the API server's words why its external
// address is unknown, and returns the error for a retry.
func TestAnUnreadableNodeShowsOnTheClaim(t *testing.T) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{macvirtv1alpha1.AddToScheme, corev1.AddToScheme, discoveryv1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	class := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "sonoma"}}
	class.Spec.Tenancy.AllowedAccessTypes = []macvirtv1alpha1.AccessType{macvirtv1alpha1.AccessNodePort}
	class.Spec.Access.DefaultType = macvirtv1alpha1.AccessNodePort
	claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: "team", UID: "c1"}}
	m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "pools"}, Spec: macvirtv1alpha1.MacMachineSpec{ClassName: "sonoma"},
		Status: macvirtv1alpha1.MacMachineStatus{Phase: macvirtv1alpha1.MachineReady, Addresses: []string{"10.244.1.9"}, NodeName: "mac-mini-1",
			Conditions: []metav1.Condition{{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "AsExpected"}}}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(class).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.Node); ok {
				return apierrors.NewForbidden(corev1.Resource("nodes"), key.Name, errors.New("no RBAC for it"))
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	r := &Reconciler{Client: c}
	scope := &claimScope{claim: claim, machine: m}
	proceed, err := r.ensureService(context.Background(), scope)
	if err == nil || !proceed || !scope.endpointsReady {
		t.Fatalf("ensureService = %v, %v (endpoints ready %v); want the Service and slice written and the error returned", proceed, err, scope.endpointsReady)
	}
	st := computeClaimStatus(scope, metav1.Now())
	cond := meta.FindStatusCondition(st.Conditions, macvirtv1alpha1.ConditionServiceReady)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != macvirtv1alpha1.ReasonNodeUnreadable ||
		!strings.Contains(cond.Message, `nodes "mac-mini-1" is forbidden: no RBAC for it`) {
		t.Errorf("ServiceReady = %+v, want NodeUnreadable in the API server's words", cond)
	}
}

// A claim's host name under the namespace Service is one DNS label: its
// own name when that is one, else a readable head and a hash of the whole
// name, so dotted or long names that differ never share a label.
func TestDNSLabel(t *testing.T) {
	long := strings.Repeat("a", 70)
	for name, want := range map[string]string{
		"build":                        "build",
		strings.Repeat("b", 63):        strings.Repeat("b", 63),
		"team.build":                   "team-build-",
		"team-build":                   "team-build",
		long:                           strings.Repeat("a", 46) + "-",
		"ci.1.sonoma":                  "ci-1-sonoma-",
		"x." + strings.Repeat("y", 70): "x-" + strings.Repeat("y", 44) + "-",
	} {
		c := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: name}}
		got := dnsLabel(c)
		if errs := validation.IsDNS1123Label(got); len(errs) != 0 {
			t.Errorf("dnsLabel(%q) = %q, not a DNS label: %v", name, got, errs)
		}
		if !strings.HasPrefix(got, want) || (strings.HasSuffix(want, "-") && len(got) != len(want)+16) {
			t.Errorf("dnsLabel(%q) = %q; want %q followed by the hash when the name is not a label", name, got, want)
		}
	}
	a := dnsLabel(&macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "team.build"}})
	b := dnsLabel(&macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "team-build."}})
	if a == b || a == "team-build" {
		t.Errorf("team.build and team-build. share %q, or team.build took team-build's label", a)
	}
}

// An endpoint is ready while its address takes connections: the Mac's VM
// runs with that address. A stale guest-agent heartbeat makes the machine
// not Ready, but does not take a running Mac off its Service; the claim
// says what is wrong.
func TestAStaleHeartbeatKeepsARunningMacOnItsService(t *testing.T) {
	claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: "team", UID: "u"},
		Status: macvirtv1alpha1.MacClaimStatus{MachineRef: &macvirtv1alpha1.ObjectRef{Namespace: "pools", Name: "m", UID: "m-uid"}}}
	svc := desiredService(claim, &macvirtv1alpha1.MacClass{})
	m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "pools", UID: "m-uid"}, Status: macvirtv1alpha1.MacMachineStatus{
		Phase: macvirtv1alpha1.MachineReady, Addresses: []string{"10.244.1.9"}, NodeName: "apple-1",
		Guest: &macvirtv1alpha1.GuestStatus{AgentVersion: "1.0.0"},
		Conditions: []metav1.Condition{
			{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "GuestAgentNotReady", Message: "no heartbeat for 3m0s"},
			{Type: macvirtv1alpha1.ConditionGuestAgentReady, Status: metav1.ConditionFalse, Reason: "HeartbeatTimeout", Message: "no heartbeat for 3m0s"},
			{Type: macvirtv1alpha1.ConditionVMRunning, Status: metav1.ConditionTrue, Reason: "AsExpected"}}}}
	slice := desiredSlice(claim, svc, m)
	if len(slice.Endpoints) != 1 || slice.Endpoints[0].Conditions.Ready == nil || !*slice.Endpoints[0].Conditions.Ready {
		t.Errorf("endpoints %+v; want the running Mac's address ready, whatever its heartbeat", slice.Endpoints)
	}
	st := computeClaimStatus(&claimScope{claim: claim, machine: m, class: &macvirtv1alpha1.MacClass{}}, metav1.Now())
	ready := meta.FindStatusCondition(st.Conditions, macvirtv1alpha1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionFalse || !strings.Contains(ready.Message, "its VM runs and 10.244.1.9 still takes connections") ||
		!strings.Contains(ready.Message, "the guest agent") {
		t.Errorf("Ready %+v; want it to say the Mac still takes connections and the guest agent is what is wrong", ready)
	}

	meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionVMRunning, Status: metav1.ConditionFalse, Reason: "Stopped"})
	if slice := desiredSlice(claim, svc, m); len(slice.Endpoints) != 1 || *slice.Endpoints[0].Conditions.Ready {
		t.Errorf("endpoints %+v; want a stopped Mac's address not ready", slice.Endpoints)
	}
}

// sliceEndpoints is the endpoints of the claim's EndpointSlice of name,
// nil when there is none.
func sliceEndpoints(t *testing.T, c client.Client, name string) []discoveryv1.Endpoint {
	t.Helper()
	slice := &discoveryv1.EndpointSlice{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "team", Name: name}, slice); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		t.Fatal(err)
	}
	return slice.Endpoints
}

// nodePortFixture is a Ready NodePort claim with its Service and slice.
func nodePortFixture(t *testing.T) (client.Client, *Reconciler, ctrl.Request, *macvirtv1alpha1.MacMachine) {
	t.Helper()
	c, _, _, r, req, m := claimFixture(t, macvirtv1alpha1.MacClaimSpec{Access: macvirtv1alpha1.ClaimAccess{Type: macvirtv1alpha1.AccessNodePort}})
	class := &macvirtv1alpha1.MacClass{}
	if err := c.Get(context.Background(), types.NamespacedName{Name: "sonoma"}, class); err != nil {
		t.Fatal(err)
	}
	class.Spec.Tenancy.AllowedAccessTypes = []macvirtv1alpha1.AccessType{macvirtv1alpha1.AccessClusterIP, macvirtv1alpha1.AccessNodePort}
	if err := c.Update(context.Background(), class); err != nil {
		t.Fatal(err)
	}
	readyClaim(t, c, r, req, m)
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if eps := sliceEndpoints(t, c, "build"); len(eps) != 1 || eps[0].Addresses[0] != "10.128.0.7" {
		t.Fatalf("the NodePort claim's slice: %+v; want its machine's address", eps)
	}
	return c, r, req, m
}

// A Lost claim's NodePort Service stays (its port is the tenant's) but
// routes nowhere: the pod network may give the address to another pod.
func TestALostClaimsServiceRoutesNowhere(t *testing.T) {
	c, r, req, m := nodePortFixture(t)
	if err := c.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := r.Reconcile(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	got := &macvirtv1alpha1.MacClaim{}
	if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != macvirtv1alpha1.ClaimLost {
		t.Fatalf("phase %s; want Lost", got.Status.Phase)
	}
	if eps := sliceEndpoints(t, c, "build"); len(eps) != 0 {
		t.Errorf("a Lost claim's slice: %+v; want no endpoint", eps)
	}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "team", Name: "build"}, &corev1.Service{}); err != nil {
		t.Errorf("its Service: %v; want it kept", err)
	}
}

// A machine whose address changes family (its instance came back with an
// IPv6 address) leaves no slice routing to the address it no longer has.
func TestAnAddressOfAnotherFamilyLeavesNoStaleSlice(t *testing.T) {
	c, r, req, m := nodePortFixture(t)
	moved := &macvirtv1alpha1.MacMachine{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(m), moved); err != nil {
		t.Fatal(err)
	}
	moved.Status.Addresses = []string{"fd00::7"}
	if err := c.Status().Update(context.Background(), moved); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	var all discoveryv1.EndpointSliceList
	if err := c.List(context.Background(), &all, client.InNamespace("team"), client.MatchingLabels{discoveryv1.LabelServiceName: "build"}); err != nil {
		t.Fatal(err)
	}
	var routed []string
	for _, sl := range all.Items {
		for _, ep := range sl.Endpoints {
			routed = append(routed, fmt.Sprintf("%s %s %v", sl.Name, sl.AddressType, ep.Addresses))
		}
	}
	if len(routed) != 1 || !strings.Contains(routed[0], "IPv6 [fd00::7]") {
		t.Errorf("the Service's slices route to %q; want the IPv6 address only", routed)
	}
}

// A bound claim's access follows its machine's revision of the class, less
// what the live class no longer allows; a deleted class takes nothing away.
func TestAccessFollowsTheMachinesRevisionLessWhatTheClassTookAway(t *testing.T) {
	class := func(types ...macvirtv1alpha1.AccessType) *macvirtv1alpha1.MacClass {
		c := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "sonoma"}}
		c.Spec.Tenancy.AllowedAccessTypes = types
		c.Spec.Access.ScreenSharing = true
		return c
	}
	made := class(macvirtv1alpha1.AccessClusterIP, macvirtv1alpha1.AccessLoadBalancer)
	for _, tc := range []struct {
		name string
		live *macvirtv1alpha1.MacClass
		kept bool
		want []macvirtv1alpha1.AccessType
	}{
		{"the class is at the machine's revision", made, false, []macvirtv1alpha1.AccessType{macvirtv1alpha1.AccessClusterIP, macvirtv1alpha1.AccessLoadBalancer}},
		{"the class is deleted", nil, true, []macvirtv1alpha1.AccessType{macvirtv1alpha1.AccessClusterIP, macvirtv1alpha1.AccessLoadBalancer}},
		{"the class changed, LoadBalancer still allowed", class(macvirtv1alpha1.AccessLoadBalancer, macvirtv1alpha1.AccessNodePort), true,
			[]macvirtv1alpha1.AccessType{macvirtv1alpha1.AccessLoadBalancer}},
		{"the class took LoadBalancer away", class(macvirtv1alpha1.AccessClusterIP), true, []macvirtv1alpha1.AccessType{macvirtv1alpha1.AccessClusterIP}},
		{"the class allows nothing of the machine's", class(macvirtv1alpha1.AccessNodePort), true, []macvirtv1alpha1.AccessType{macvirtv1alpha1.AccessClusterIP}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := accessOf(made, tc.live, tc.kept)
			if !slices.Equal(got.Spec.Tenancy.AllowedAccessTypes, tc.want) || !got.Spec.Access.ScreenSharing {
				t.Errorf("allowed %v, screen sharing %v; want %v, and the machine's screen sharing", got.Spec.Tenancy.AllowedAccessTypes, got.Spec.Access.ScreenSharing, tc.want)
			}
		})
	}
	if !slices.Equal(made.Spec.Tenancy.AllowedAccessTypes, []macvirtv1alpha1.AccessType{macvirtv1alpha1.AccessClusterIP, macvirtv1alpha1.AccessLoadBalancer}) {
		t.Errorf("the machine's revision was changed in place: %v", made.Spec.Tenancy.AllowedAccessTypes)
	}
}

// A claim's own Service that someone changed is put back as the claim's
// access says, by an update (the node ports kept).
func TestAClaimsServiceIsPutBackWhenChanged(t *testing.T) {
	c, r, req, _ := nodePortFixture(t)
	svc := &corev1.Service{}
	key := types.NamespacedName{Namespace: "team", Name: "build"}
	if err := c.Get(context.Background(), key, svc); err != nil {
		t.Fatal(err)
	}
	svc.Spec.Ports = svc.Spec.Ports[:0]
	svc.Spec.Type = corev1.ServiceTypeClusterIP
	if err := c.Update(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), key, svc); err != nil || svc.Spec.Type != corev1.ServiceTypeNodePort || len(svc.Spec.Ports) != 1 {
		t.Errorf("Service %v %+v; want it NodePort with its SSH port again", err, svc.Spec)
	}
}
