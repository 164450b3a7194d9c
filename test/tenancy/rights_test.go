package tenancy_test

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	. "github.com/onsi/gomega"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// The roles config/rbac ships for the operator (operatorRoleFiles) are
// compared with the calls the operator makes while this suite plays with
// it, recorded at its transport: every call must be allowed by them (none
// refused, each covered by one of their rules, evaluated here as RBAC
// does), and every right they grant must be used, here or, if listed in
// exercisedElsewhere, by another test. A call is what RBAC authorizes for
// a request: its own attributes, and what the API server asks besides
// (list for a streaming watch, create for a patch that creates, what
// OwnerReferencesPermissionEnforcement asks). A right nobody uses is one an
// attacker who takes the operator's token gets for nothing; a call no rule
// covers breaks in a cluster.

// exercisedElsewhere are the rights of the operator's roles that this
// suite's operator does not use, each with why, and the test that runs the
// code that uses it (file, and the name of the test or the text of the
// spec, which must be in the file). The suite fails on a right neither used
// nor listed here, and on one listed here that it used after all, so the
// list cannot rot; but for the few marked sometimes, which this suite uses
// on some runs and not on others, as its specs race the operator.
var exercisedElsewhere = map[string]elsewhere{
	"ClusterRole manager-role: create tokenreviews.authentication.k8s.io": {
		why:  "the agent endpoint reviews a Mac's host-agent token before it hands over a VM's configuration; no Mac runs here",
		file: "test/hosts/hosts_test.go", test: "makes the bound claim of a lost host Lost"},
	"ClusterRole manager-role: patch macimages/status.macvirt.io": {
		why:  "the images here are refused at admission or deleted at once; whether the operator writes a status first is a race",
		file: "test/images/capture_test.go", test: "Capturing a Mac as a golden image", sometimes: true},
	"ClusterRole manager-role: update dataimportcrons.cdi.kubevirt.io": {
		why:  "a refreshed class's cron follows its schedule; no class here is refreshed",
		file: "internal/controller/class/import_cron_test.go", test: "TestARefreshedClassKeepsItsCronAndDeletesItWhenRefreshIsOff"},
	"ClusterRole manager-role: delete dataimportcrons.cdi.kubevirt.io": {
		why:  "a class whose refresh is turned off loses its cron; no class here is refreshed",
		file: "internal/controller/class/import_cron_test.go", test: "TestARefreshedClassKeepsItsCronAndDeletesItWhenRefreshIsOff"},
	"ClusterRole manager-role: update datasources.cdi.kubevirt.io": {
		why:  "a captured image's DataSource moves from its copy's PVC to its snapshot; no Mac is captured here",
		file: "internal/controller/image/publish_test.go", test: "TestAnImagesDataSourceFollowsItsSnapshot"},
	"ClusterRole manager-role: update services": {
		why:  "a claim's own Service someone changed is put back; no claim here has a Service of its own that drifts",
		file: "internal/controller/claim/service_test.go", test: "TestAClaimsServiceIsPutBackWhenChanged"},
	"ClusterRole manager-role: get namespaces": {
		why:  "admission reads a namespace the cache has not seen yet from the API server; here every namespace is older than its objects",
		file: "internal/webhook/v1alpha1/lookup_test.go", test: "TestLookupReadsTheAPIServerWhenTheCacheHasNotSeenIt"},
	"ClusterRole manager-role: get macclasses.macvirt.io": {
		why: "admission reads a class the cache has not seen yet from the API server; here only a machine made right after " +
			"its class may be looked up before the cache has the class",
		file: "internal/webhook/v1alpha1/lookup_test.go", test: "TestLookupReadsTheAPIServerWhenTheCacheHasNotSeenIt", sometimes: true},
	"ClusterRole manager-role: create dataimportcrons.cdi.kubevirt.io": {
		why:  "a class refreshed from a registry gets a DataImportCron; no class here is refreshed",
		file: "test/images/refresh_test.go", test: "A class refreshed from a registry"},
	"ClusterRole manager-role: create datasources.cdi.kubevirt.io": {
		why:  "a captured image is published as a DataSource; no Mac is captured here",
		file: "test/images/capture_test.go", test: "Capturing a Mac as a golden image"},
	"ClusterRole manager-role: create volumesnapshots.snapshot.storage.k8s.io": {
		why:  "a captured image's copy is snapshotted where its storage class can; no Mac is captured here",
		file: "test/images/capture_test.go", test: "Capturing a Mac as a golden image"},
	"ClusterRole manager-role: list volumesnapshotclasses.snapshot.storage.k8s.io": {
		why:  "the snapshot class of a captured image's copy is looked up; no Mac is captured here",
		file: "test/images/capture_test.go", test: "Capturing a Mac as a golden image"},
	"ClusterRole manager-role: watch volumesnapshotclasses.snapshot.storage.k8s.io": {
		why:  "the snapshot class of a captured image's copy is looked up; no Mac is captured here",
		file: "test/images/capture_test.go", test: "Capturing a Mac as a golden image"},
	"ClusterRole manager-role: update macimages/finalizers.macvirt.io": {
		why: "a captured image's copies name it as owner with blockOwnerDeletion, which OwnerReferencesPermissionEnforcement " +
			"authorizes (see ownerChecks); no Mac is captured here",
		file: "test/images/capture_test.go", test: "Capturing a Mac as a golden image"},
	"ClusterRole manager-role: create datavolumes/source.cdi.kubevirt.io": {
		why: "CDI asks it, by SubjectAccessReview, of the creator of a DataVolume that clones a PVC of another namespace; " +
			"the operator never calls it, and the simulated CDI does not ask",
		file: "test/controllers/rbac_test.go", test: "may clone across namespaces (create datavolumes/source)"},
	"ClusterRole manager-role: patch virtualmachines.kubevirt.io": {
		why:  "a halted VM of a machine that should run is started by a patch of its run strategy; no Mac here shuts down",
		file: "test/controllers/power_test.go", test: "a shutdown from the macOS menu on a claimed machine keeps the claim bound"},
	"ClusterRole manager-role: update plugins.plugin.kubevirt.io macvirt-macos": {
		why:  "the Plugin of the plugin transports; the sandbox's KubeVirt runs without the Plugins gate, so its operator uses the sidecar",
		file: "internal/domainhook/install/objects_test.go", test: "TestDomainHookTransportsAgainstAnAPIServer"},
	"ClusterRole manager-role: delete plugins.plugin.kubevirt.io macvirt-macos": {
		why:  "the Plugin goes when another transport is chosen; the sandbox's operator never made one (its KubeVirt runs without the Plugins gate)",
		file: "internal/domainhook/install/objects_test.go", test: "TestDomainHookTransportsAgainstAnAPIServer"},
	"ClusterRole manager-role: delete mutatingadmissionpolicies.admissionregistration.k8s.io macvirt-domain-hook-sidecar": {
		why:  "the plugin-sidecar transport's policy goes when another transport is chosen; the sandbox's operator never made one",
		file: "internal/domainhook/install/objects_test.go", test: "TestDomainHookTransportsAgainstAnAPIServer"},
	"ClusterRole manager-role: delete mutatingadmissionpolicybindings.admissionregistration.k8s.io macvirt-domain-hook-sidecar": {
		why:  "the plugin-sidecar transport's policy goes when another transport is chosen; the sandbox's operator never made one",
		file: "internal/domainhook/install/objects_test.go", test: "TestDomainHookTransportsAgainstAnAPIServer"},
	"ClusterRole domain-hook-sidecar-writer: create mutatingadmissionpolicies.admissionregistration.k8s.io": {
		why:  "only with --domain-hook=plugin-sidecar; the sandbox's operator uses the sidecar transport",
		file: "internal/domainhook/install/objects_test.go", test: "TestDomainHookTransportsAgainstAnAPIServer"},
	"ClusterRole domain-hook-sidecar-writer: create mutatingadmissionpolicybindings.admissionregistration.k8s.io": {
		why:  "only with --domain-hook=plugin-sidecar; the sandbox's operator uses the sidecar transport",
		file: "internal/domainhook/install/objects_test.go", test: "TestDomainHookTransportsAgainstAnAPIServer"},
	"ClusterRole domain-hook-sidecar-writer: update mutatingadmissionpolicies.admissionregistration.k8s.io macvirt-domain-hook-sidecar": {
		why:  "only with --domain-hook=plugin-sidecar; the sandbox's operator uses the sidecar transport",
		file: "internal/domainhook/install/objects_test.go", test: "TestDomainHookTransportsAgainstAnAPIServer"},
	"ClusterRole domain-hook-sidecar-writer: update mutatingadmissionpolicybindings.admissionregistration.k8s.io macvirt-domain-hook-sidecar": {
		why:  "only with --domain-hook=plugin-sidecar; the sandbox's operator uses the sidecar transport",
		file: "internal/domainhook/install/objects_test.go", test: "TestDomainHookTransportsAgainstAnAPIServer"},
	"ClusterRole manager-role: create macclaims.macvirt.io": {
		why:  "a runner set claims a Mac per job; the runner set here is deleted before it has a job",
		file: "test/github/runners_test.go", test: "runs a burst of 20 jobs on fresh Macs"},
	"ClusterRole manager-role: patch macclaims.macvirt.io": {
		why:  "a runner set records a runner's job on its claim; the runner set here is deleted before it has a job",
		file: "test/github/runners_test.go", test: "runs a burst of 20 jobs on fresh Macs"},
	"ClusterRole manager-role: delete macclaims.macvirt.io": {
		why:  "a runner set releases a finished runner's claim; the runner set here is deleted before it has a job",
		file: "test/github/runners_test.go", test: "runs a burst of 20 jobs on fresh Macs"},
	"ClusterRole manager-role: create macpools.macvirt.io": {
		why:  "a runner set keeps a warm pool; the runner set here is deleted before it has one",
		file: "test/github/runners_test.go", test: "the set's warm pool keeps minIdle Macs"},
	"ClusterRole manager-role: patch macpools.macvirt.io": {
		why:  "a runner set moves its warm pool's idle target; the runner set here is deleted before it has one",
		file: "test/github/runners_test.go", test: "the set's warm pool keeps minIdle Macs"},
	"ClusterRole manager-role: delete macpools.macvirt.io": {
		why:  "a deleted runner set's warm pool goes; the runner set here is deleted before it has one",
		file: "test/github/runners_test.go", test: "the set's warm pool keeps minIdle Macs"},
	"ClusterRole manager-role: patch macrunnersets/status.macvirt.io": {
		why:  "the runner set here is deleted at once; whether its status is written first is a race",
		file: "test/github/runners_test.go", test: "runs a burst of 20 jobs on fresh Macs",
		sometimes: true},
	"ClusterRole manager-role: get services": {
		why:  "read uncached only when a Service of the name is there and not the operator's; no tenant here makes one",
		file: "test/controllers/access_test.go", test: "leaves a tenant's own Service named like the namespace Service alone"},
	"ClusterRole manager-role: update endpointslices.discovery.k8s.io": {
		why:  "a claim's name follows its Mac to another address; whether the address changes here is a race",
		file: "test/controllers/access_test.go", test: "publishes a ClusterIP claim's name under the namespace Service",
		sometimes: true},
	"ClusterRole manager-role: get endpointslices.discovery.k8s.io": {
		why:  "read uncached only when a create finds one of the name made by another reconcile first; a race here",
		file: "test/controllers/binding_test.go", test: "stays one to one with two operators running at once",
		sometimes: true},
	"ClusterRole manager-role: get networkpolicies.networking.k8s.io": {
		why:  "read uncached only when a create finds one of the name made by another reconcile first; a race here",
		file: "test/controllers/binding_test.go", test: "stays one to one with two operators running at once",
		sometimes: true},
	"ClusterRole manager-role: get macmachines.macvirt.io": {
		why:  "read uncached only when the cache lags a bind; whether it lags here is a race",
		file: "test/controllers/binding_test.go", test: "stays one to one with two operators running at once",
		sometimes: true},
	"ClusterRole manager-role: patch events.events.k8s.io": {
		why: "client-go's event recorder patches an event's series when the event recurs within minutes; " +
			"whether one recurs here is a race (this suite, on most runs)",
		file: "test/tenancy/suite_test.go", test: "Tenancy Suite",
		sometimes: true},
	"Role macvirt-system/manager-role: create prometheusrules.monitoring.coreos.com": {
		why:  "written (server-side apply) only with MonitoringObjects, which the sandbox's operator does not set",
		file: "internal/operator/monitoring_test.go", test: "TestMonitoringObjectsAgainstAnAPIServer"},
	"Role macvirt-system/manager-role: patch prometheusrules.monitoring.coreos.com": {
		why:  "written (server-side apply) only with MonitoringObjects, which the sandbox's operator does not set",
		file: "internal/operator/monitoring_test.go", test: "TestMonitoringObjectsAgainstAnAPIServer"},
	"Role macvirt-system/manager-role: create servicemonitors.monitoring.coreos.com": {
		why:  "written (server-side apply) only with MonitoringObjects, which the sandbox's operator does not set",
		file: "internal/operator/monitoring_test.go", test: "TestMonitoringObjectsAgainstAnAPIServer"},
	"Role macvirt-system/manager-role: patch servicemonitors.monitoring.coreos.com": {
		why:  "written (server-side apply) only with MonitoringObjects, which the sandbox's operator does not set",
		file: "internal/operator/monitoring_test.go", test: "TestMonitoringObjectsAgainstAnAPIServer"},
}

// elsewhere says why this suite does not use a right, and which test does.
type elsewhere struct {
	why, file, test string
	sometimes       bool
}

// apiCall is one request the operator made, in the attributes RBAC
// authorizes it by, and the status it got (0: no response); or one more
// authorization the API server asks for such a request (By).
type apiCall struct {
	Verb, Group, Resource, Subresource, Namespace, Name string
	// By is the request (verb and resource, in the same namespace) the
	// API server asks this authorization for besides the request's own:
	// an admission plugin's, or create for a patch that creates. Empty for
	// a request.
	By string
	// InitialEvents is a watch that streams the list first (KEP-3157,
	// client-go's informers by default): where the API server does not
	// serve that, client-go lists instead, so the call needs list as well.
	InitialEvents bool
	Status        int
}

// asAuthorized are the requests RBAC must allow for the call to work on
// any API server.
func (c apiCall) asAuthorized() []apiCall {
	if !c.InitialEvents {
		return []apiCall{c}
	}
	list := c
	list.Verb = "list"
	return []apiCall{c, list}
}

func (c apiCall) String() string { return fmt.Sprintf("%s: %d", c.describe(), c.Status) }

// describe is the call without its status.
func (c apiCall) describe() string {
	s := c.Verb + " " + resourceName(c.Group, c.Resource, c.Subresource)
	if c.Name != "" {
		s += " " + c.Name
	}
	if c.Namespace != "" {
		s += " in " + c.Namespace
	}
	if c.InitialEvents {
		s += " (and list)"
	}
	if c.By != "" {
		s += " [for " + c.By + "]"
	}
	return s
}

// resourceName is resource[/subresource][.group], as kubectl names it.
func resourceName(group, resource, sub string) string {
	if sub != "" {
		resource += "/" + sub
	}
	if group != "" {
		resource += "." + group
	}
	return resource
}

// callRecorder holds the operator's requests: those RBAC authorizes as
// resource requests, and the rest (discovery, /version), which the
// comparison leaves out.
type callRecorder struct {
	mu          sync.Mutex
	calls       map[apiCall]int
	nonResource map[string]int
	// unresolved are request bodies, or owner references in them, the
	// recorder could not read or map, so what admission asks is unknown.
	unresolved map[string]int
	mapper     meta.RESTMapper
}

// operatorCalls is everything the operator asked of the API server.
var operatorCalls = &callRecorder{calls: map[apiCall]int{}, nonResource: map[string]int{}, unresolved: map[string]int{}}

// recordCalls has every request made through cfg recorded in
// operatorCalls. The recorder wraps whatever transport cfg already wraps,
// and sits under client-go's impersonation, so it sees each request as the
// API server gets it.
func recordCalls(cfg *rest.Config) {
	// The mapper's discovery goes through cfg as it is before the recorder:
	// those requests are the test's, not the operator's.
	httpClient, err := rest.HTTPClientFor(cfg)
	Expect(err).NotTo(HaveOccurred())
	operatorCalls.mapper, err = apiutil.NewDynamicRESTMapper(cfg, httpClient)
	Expect(err).NotTo(HaveOccurred())
	cfg.WrapTransport = transport.Wrappers(cfg.WrapTransport, func(rt http.RoundTripper) http.RoundTripper {
		return &recordingTransport{next: rt, into: operatorCalls}
	})
}

type recordingTransport struct {
	next http.RoundTripper
	into *callRecorder
}

func (t *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Method == http.MethodPost || req.Method == http.MethodPatch {
		body = peekBody(req)
	}
	resp, err := t.next.RoundTrip(req)
	status := 0
	if err == nil {
		status = resp.StatusCode
	}
	call, ok := parseCall(req.Method, req.URL.Path, req.URL.Query())
	var checks []apiCall
	var unresolved []string
	if ok {
		call.Status = status
		checks, unresolved = ownerChecks(t.into.mapper, call, req.Header.Get("Content-Type"), body)
		if c, ok := createdByPatch(call); ok {
			checks = append(checks, c)
		}
	}
	t.into.mu.Lock()
	defer t.into.mu.Unlock()
	if !ok {
		t.into.nonResource[fmt.Sprintf("%s %s: %d", req.Method, req.URL.Path, status)]++
		return resp, err
	}
	t.into.calls[call]++
	for _, c := range checks {
		t.into.calls[c]++
	}
	for _, u := range unresolved {
		t.into.unresolved[u]++
	}
	return resp, err
}

// createdByPatch is the create a patch that created its object (a
// server-side apply, 201) was authorized for as well (k8s.io/apiserver's
// endpoints/handlers/patch.go).
func createdByPatch(c apiCall) (apiCall, bool) {
	if c.Verb != "patch" || c.Subresource != "" || c.Status != http.StatusCreated {
		return apiCall{}, false
	}
	create := c
	create.Verb, create.By = "create", "patch "+resourceName(c.Group, c.Resource, "")
	return create, true
}

// protobufMagic starts a body in Kubernetes' protobuf encoding, which
// controller-runtime's client sends for built-in kinds.
var protobufMagic = []byte("k8s\x00")

// ownerRefs are the owner references in an object or a merge patch.
func ownerRefs(body []byte) ([]metav1.OwnerReference, error) {
	if bytes.HasPrefix(body, protobufMagic) {
		obj, _, err := protobuf.NewSerializer(clientgoscheme.Scheme, clientgoscheme.Scheme).Decode(body, nil, nil)
		if err != nil {
			return nil, err
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, err
		}
		return m.GetOwnerReferences(), nil
	}
	var obj struct {
		Metadata struct {
			OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(body, &obj); err != nil {
		return nil, err
	}
	return obj.Metadata.OwnerReferences, nil
}

// peekBody is a copy of the request's body, which is left to be sent.
func peekBody(req *http.Request) []byte {
	if req.Body == nil || req.Body == http.NoBody {
		return nil
	}
	if req.GetBody != nil {
		if rc, err := req.GetBody(); err == nil {
			defer func() { _ = rc.Close() }()
			if b, err := io.ReadAll(rc); err == nil {
				return b
			}
		}
	}
	b, _ := io.ReadAll(req.Body)
	_ = req.Body.Close()
	req.Body = io.NopCloser(bytes.NewReader(b))
	return b
}

// ownerChecks are the authorizations the OwnerReferencesPermissionEnforcement
// admission plugin asks for a request (kubernetes'
// plugin/pkg/admission/gc/gc_admission.go). OpenShift turns it on, envtest
// does not: the roles must allow what it asks though no request here is
// refused by it. Changing an object's owner references (but on create)
// needs delete on the object; each reference with blockOwnerDeletion needs
// update on the owner's finalizers. Creates are checked, and merge patches:
// one that carries owner references changes them, and as it replaces the
// whole list, its blocking references count as new (at worst this asks
// more than the plugin). Updates (PUT) and server-side applies are not:
// whether they change the references depends on the stored object, which
// the recorder does not see. The operator sets owner references when it
// creates.
func ownerChecks(mapper meta.RESTMapper, c apiCall, contentType string, body []byte) (checks []apiCall, unresolved []string) {
	mergePatch := c.Verb == "patch" && (strings.HasPrefix(contentType, "application/merge-patch+json") ||
		strings.HasPrefix(contentType, "application/strategic-merge-patch+json"))
	if c.Subresource != "" || (c.Verb != "create" && !mergePatch) || len(body) == 0 {
		return nil, nil
	}
	by := c.Verb + " " + resourceName(c.Group, c.Resource, "")
	refs, err := ownerRefs(body)
	if err != nil {
		return nil, []string{fmt.Sprintf("the body of %s: %v", by, err)}
	}
	if len(refs) == 0 {
		return nil, nil
	}
	if c.Verb == "patch" {
		del := c
		del.Verb, del.By = "delete", by
		checks = append(checks, del)
	}
	for _, ref := range refs {
		if ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
			continue
		}
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil {
			unresolved = append(unresolved, fmt.Sprintf("%s %s in %s: %v", ref.APIVersion, ref.Kind, by, err))
			continue
		}
		mappings, err := mapper.RESTMappings(schema.GroupKind{Group: gv.Group, Kind: ref.Kind}, gv.Version)
		if err != nil {
			unresolved = append(unresolved, fmt.Sprintf("%s %s in %s: %v", ref.APIVersion, ref.Kind, by, err))
			continue
		}
		for _, m := range mappings {
			fin := apiCall{Verb: "update", Group: m.Resource.Group, Resource: m.Resource.Resource, Subresource: "finalizers",
				Name: ref.Name, By: by, Status: c.Status}
			if m.Scope.Name() == meta.RESTScopeNameNamespace {
				fin.Namespace = c.Namespace
			}
			checks = append(checks, fin)
		}
	}
	return checks, unresolved
}

// namespaceSubresources are the subresources of a Namespace itself, not
// resources in it (k8s.io/apiserver's RequestInfoFactory).
var namespaceSubresources = []string{"status", "finalize"}

// parseCall is what the API server's RequestInfoFactory makes of a
// request, which is what RBAC authorizes: false for a non-resource URL.
// k8s.io/apiserver is only an indirect dependency of the module, so its
// resolver is rewritten here rather than imported.
func parseCall(method, path string, query map[string][]string) (apiCall, bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var c apiCall
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:] // api, version
	case len(parts) >= 4 && parts[0] == "apis":
		c.Group, parts = parts[1], parts[3:] // apis, group, version
	default:
		return apiCall{}, false // discovery, /version, /healthz...
	}
	switch method {
	case http.MethodPost:
		c.Verb = "create"
	case http.MethodGet, http.MethodHead:
		c.Verb = "get"
	case http.MethodPut:
		c.Verb = "update"
	case http.MethodPatch:
		c.Verb = "patch"
	case http.MethodDelete:
		c.Verb = "delete"
	default:
		c.Verb = strings.ToLower(method)
	}
	// The deprecated /watch/ prefix, which client-go no longer uses.
	if parts[0] == "watch" && len(parts) > 1 {
		c.Verb, parts = "watch", parts[1:]
	}
	if parts[0] == "namespaces" && len(parts) > 1 {
		c.Namespace = parts[1]
		if len(parts) > 2 && !slices.Contains(namespaceSubresources, parts[2]) {
			parts = parts[2:]
		}
	}
	c.Resource = parts[0]
	if len(parts) > 1 {
		c.Name = parts[1]
	}
	if len(parts) > 2 {
		c.Subresource = parts[2]
	}
	first := func(key string) string {
		if v := query[key]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	if c.Name == "" && c.Verb == "get" {
		c.Verb = "list"
		if w := first("watch"); w != "" && w != "false" && w != "0" {
			c.Verb = "watch"
			c.InitialEvents = first("sendInitialEvents") == "true"
		}
		// A list or watch of one name is authorized as for that name.
		if sel, err := fields.ParseSelector(first("fieldSelector")); err == nil {
			if name, ok := sel.RequiresExactMatch("metadata.name"); ok {
				c.Name = name
			}
		}
	}
	if c.Name == "" && c.Verb == "delete" {
		c.Verb = "deletecollection"
	}
	return c, true
}

// shippedRule is a rule of a role config/rbac ships for the operator, with
// where it applies.
type shippedRule struct {
	role string // "ClusterRole manager-role", "Role macvirt-system/manager-role"
	// namespace is a Role's; "" for a ClusterRole.
	namespace string
	binding   binding
	rule      rbacv1.PolicyRule
}

// binding is how a role of the operator's is bound.
type binding int

const (
	// always: by the install (role_binding.yaml, secret_reader_role_binding.yaml,
	// config/tunnel's auth_reader_role_binding.yaml).
	always binding = iota
	// perNamespace: by the namespaces that choose to, with RoleBindings;
	// it applies to namespaced calls only.
	perNamespace
	// optIn: by an admin who chooses what needs it, cluster-wide.
	optIn
)

// operatorRoleFiles are the files of config/rbac whose roles the operator
// holds, or may be given, and how they are bound. A call allowed only by a
// role not always bound may be refused where it is not: by design, as the
// code says so (a claim's BootstrapSourceUnavailable). The leader-election
// Role is left out: the operator of this suite (the sandbox's) does not
// elect a leader, and no test runs one that does.
var operatorRoleFiles = []struct {
	file    string
	binding binding
	// namespace is where the install puts the role, when not where the
	// file says.
	namespace string
}{
	{"role.yaml", always, ""},
	// The tunnel's right to read the API server's front-proxy trust
	// (docs/access.md), in kube-system.
	{tunnelTrustReader, always, trustNamespace},
	// Namespaces that want bootstraps with Secrets or ConfigMaps
	// (docs/bootstrap.md).
	{"bootstrap_source_reader_role.yaml", perNamespace, ""},
	// Admins who choose --domain-hook=plugin-sidecar (docs/domain-hook.md).
	{"domain_hook_sidecar_role.yaml", optIn, ""},
}

// operatorRules are the rules of operatorRoleFiles.
func operatorRules() []shippedRule {
	var rules []shippedRule
	for _, f := range operatorRoleFiles {
		objs := shipped(f.file)
		Expect(objs).NotTo(BeEmpty(), "config/rbac/%s holds no role", f.file)
		for _, obj := range objs {
			switch role := obj.(type) {
			case *rbacv1.ClusterRole:
				for _, r := range role.Rules {
					rules = append(rules, shippedRule{role: "ClusterRole " + role.Name, binding: f.binding, rule: r})
				}
			case *rbacv1.Role:
				if f.namespace != "" {
					role.Namespace = f.namespace
				}
				for _, r := range role.Rules {
					rules = append(rules, shippedRule{role: "Role " + role.Namespace + "/" + role.Name, namespace: role.Namespace,
						binding: f.binding, rule: r})
				}
			}
		}
	}
	return rules
}

// rightName names a right as exercisedElsewhere does: the role, the verb,
// the resource and, if the rule has any, its resource names.
func (r shippedRule) rightName(verb, group, resource string) string {
	s := fmt.Sprintf("%s: %s %s", r.role, verb, resourceName(group, resource, ""))
	if len(r.rule.ResourceNames) > 0 {
		s += " " + strings.Join(r.rule.ResourceNames, ",")
	}
	return s
}

// rights are the rights the rule grants, one per API group, resource and
// verb.
func (r shippedRule) rights() []string {
	var out []string
	for _, g := range r.rule.APIGroups {
		for _, res := range r.rule.Resources {
			for _, v := range r.rule.Verbs {
				out = append(out, r.rightName(v, g, res))
			}
		}
	}
	return out
}

// grants is which of the rule's rights allow c, evaluated as RBAC does
// (k8s.io/component-helpers/auth/rbac/validation): none when the rule does
// not apply.
func (r shippedRule) grants(c apiCall) []string {
	switch {
	case r.namespace != "" && r.namespace != c.Namespace,
		r.binding == perNamespace && c.Namespace == "",
		len(r.rule.ResourceNames) > 0 && !slices.Contains(r.rule.ResourceNames, c.Name):
		return nil
	}
	requested := c.Resource
	if c.Subresource != "" {
		requested += "/" + c.Subresource
	}
	var out []string
	for _, g := range r.rule.APIGroups {
		if g != rbacv1.APIGroupAll && g != c.Group {
			continue
		}
		for _, res := range r.rule.Resources {
			if res != rbacv1.ResourceAll && res != requested && (c.Subresource == "" || res != "*/"+c.Subresource) {
				continue
			}
			for _, v := range r.rule.Verbs {
				if v == rbacv1.VerbAll || v == c.Verb {
					out = append(out, r.rightName(v, g, res))
				}
			}
		}
	}
	return out
}

// The comparison runs in a ReportAfterSuite: ginkgo runs it after every
// spec and after AfterSuite, whatever order the randomized top-level
// containers ran in (no spec, Serial or in an Ordered container, is sure
// to run last), so the operator has stopped and made its last call; and,
// like any node, it fails the suite when it fails. Its report also tells
// whether the whole suite ran and passed, which the check for unused rights
// needs: a focused or failed run uses fewer.
var _ = ReportAfterSuite("the operator's calls against its shipped roles", func(report Report) {
	operatorCalls.mu.Lock()
	calls := maps.Clone(operatorCalls.calls)
	nonResource := slices.Sorted(maps.Keys(operatorCalls.nonResource))
	unresolved := slices.Sorted(maps.Keys(operatorCalls.unresolved))
	operatorCalls.mu.Unlock()
	if len(calls) == 0 {
		return // the operator never started
	}
	rules := operatorRules()
	used := map[string]int{}
	var denied, refusedByDesign, uncovered []string
	for c, n := range calls {
		// covered: a rule allows each request RBAC must allow for the call;
		// byOwnRoles: one of the roles always bound does.
		covered, byOwnRoles := true, true
		for _, a := range c.asAuthorized() {
			granted, own := false, false
			for _, r := range rules {
				rights := r.grants(a)
				for _, right := range rights {
					used[right] += n
				}
				granted = granted || len(rights) > 0
				own = own || len(rights) > 0 && r.binding == always
			}
			covered, byOwnRoles = covered && granted, byOwnRoles && own
		}
		switch {
		case !covered:
			uncovered = append(uncovered, c.String())
		case c.Status == http.StatusForbidden && !byOwnRoles:
			refusedByDesign = append(refusedByDesign, c.String())
		}
		if c.Status == http.StatusForbidden && (!covered || byOwnRoles) {
			denied = append(denied, c.String())
		}
	}

	// What the operator did, for whoever reads a run's output.
	seen := map[string]int{}
	for c, n := range calls {
		where := "cluster-wide"
		if c.Namespace != "" {
			where = "in " + c.Namespace
		}
		verb := c.Verb
		if c.InitialEvents {
			verb = "watch (and list)"
		}
		what := fmt.Sprintf("%s %s %s", verb, resourceName(c.Group, c.Resource, c.Subresource), where)
		if c.By != "" {
			what += " [for " + c.By + "]"
		}
		seen[fmt.Sprintf("%s: %d", what, c.Status)] += n
	}
	var summary []string
	for s, n := range seen {
		summary = append(summary, fmt.Sprintf("%s (×%d)", s, n))
	}
	sort.Strings(summary)
	GinkgoWriter.Printf("The operator's resource calls:\n  %s\n", strings.Join(summary, "\n  "))
	GinkgoWriter.Printf("Its non-resource calls (not compared):\n  %s\n", strings.Join(nonResource, "\n  "))
	if len(refusedByDesign) > 0 {
		sort.Strings(refusedByDesign)
		GinkgoWriter.Printf("Refused, as designed, where a role bound by choice was not bound:\n  %s\n", strings.Join(refusedByDesign, "\n  "))
	}

	var shippedRights []string
	for _, r := range rules {
		shippedRights = append(shippedRights, r.rights()...)
	}
	slices.Sort(shippedRights)
	shippedRights = slices.Compact(shippedRights)
	var listedButNotShipped, testsNotThere, unused, usedAfterAll []string
	for right, e := range exercisedElsewhere {
		if !slices.Contains(shippedRights, right) {
			listedButNotShipped = append(listedButNotShipped, right)
		}
		src, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), e.file))
		if err != nil || !strings.Contains(string(src), e.test) {
			testsNotThere = append(testsNotThere, fmt.Sprintf("%s: %q in %s", right, e.test, e.file))
		}
	}
	for _, right := range shippedRights {
		e, listed := exercisedElsewhere[right]
		switch {
		case used[right] == 0 && !listed:
			unused = append(unused, right)
		case used[right] > 0 && listed && !e.sometimes:
			usedAfterAll = append(usedAfterAll, fmt.Sprintf("%s (×%d; listed as: %s)", right, used[right], e.why))
		}
	}

	// Every problem at once: whoever changes the roles or the code fixes
	// them in one go.
	var problems []string
	problem := func(what string, items []string) {
		if len(items) > 0 {
			sort.Strings(items)
			problems = append(problems, what+":\n  "+strings.Join(items, "\n  "))
		}
	}
	problem("The API server refused these calls of the operator's under the shipped roles", denied)
	problem("No rule of the operator's roles (operatorRoleFiles) covers these calls of the operator's", uncovered)
	problem("exercisedElsewhere lists rights the shipped roles do not grant", listedButNotShipped)
	problem("exercisedElsewhere names tests that are not in their files", testsNotThere)
	problem("These owner references' kinds did not map to resources, so what admission asks for them is unknown", unresolved)
	if why := partialRun(report); why != "" {
		// Reported, not failed: a partial run uses fewer rights.
		GinkgoWriter.Printf("Not checked, as %s:\nrights unused here and not in exercisedElsewhere:\n  %s\n"+
			"rights in exercisedElsewhere used here:\n  %s\n", why, strings.Join(unused, "\n  "), strings.Join(usedAfterAll, "\n  "))
	} else {
		problem("The operator never used these rights of the shipped roles, and exercisedElsewhere does not list them", unused)
		problem("exercisedElsewhere lists these rights, which this suite's operator used: strike them from it", usedAfterAll)
	}
	if len(problems) > 0 {
		Fail(strings.Join(problems, "\n\n"))
	}
})

// partialRun says why report is not of a whole, successful, serial run of
// the suite, after which alone an unused right means something; "" when it
// is.
func partialRun(report Report) string {
	switch {
	case report.SuiteConfig.ParallelTotal > 1:
		return "the specs ran on several processes, each with an operator of its own"
	case report.PreRunStats.SpecsThatWillRun < report.PreRunStats.TotalSpecs:
		return fmt.Sprintf("only %d of the suite's %d specs ran", report.PreRunStats.SpecsThatWillRun, report.PreRunStats.TotalSpecs)
	}
	for _, s := range report.SpecReports {
		if s.State.Is(types.SpecStateFailureStates) || s.LeafNodeType == types.NodeTypeIt && s.State != types.SpecStatePassed {
			return fmt.Sprintf("%s %q %s", s.LeafNodeType, s.FullText(), s.State)
		}
	}
	return ""
}

// TestParseCall checks the request parser against what the API server's
// RequestInfoFactory makes of the requests client-go sends; it needs no API
// server.
func TestParseCall(t *testing.T) {
	for _, tc := range []struct {
		method, url string
		want        apiCall
		resource    bool
	}{
		{"GET", "/api", apiCall{}, false},
		{"GET", "/apis/kubevirt.io/v1", apiCall{}, false},
		{"GET", "/version", apiCall{}, false},
		{"GET", "/api/v1/nodes?watch=true&resourceVersion=1", apiCall{Verb: "watch", Resource: "nodes"}, true},
		{"GET", "/api/v1/nodes?allowWatchBookmarks=true&sendInitialEvents=true&watch=true", apiCall{Verb: "watch", Resource: "nodes", InitialEvents: true}, true},
		{"GET", "/api/v1/nodes?watch=false", apiCall{Verb: "list", Resource: "nodes"}, true},
		{"GET", "/api/v1/namespaces/team-a/secrets/runner", apiCall{Verb: "get", Resource: "secrets", Namespace: "team-a", Name: "runner"}, true},
		{"GET", "/api/v1/namespaces/team-a", apiCall{Verb: "get", Resource: "namespaces", Namespace: "team-a", Name: "team-a"}, true},
		{"PUT", "/api/v1/namespaces/team-a/finalize", apiCall{Verb: "update", Resource: "namespaces", Subresource: "finalize", Namespace: "team-a", Name: "team-a"}, true},
		{"PATCH", "/api/v1/nodes/n1/status", apiCall{Verb: "patch", Resource: "nodes", Subresource: "status", Name: "n1"}, true},
		{"GET", "/apis/apps/v1/namespaces/macvirt-system/controllerrevisions?labelSelector=a", apiCall{Verb: "list", Group: "apps", Resource: "controllerrevisions", Namespace: "macvirt-system"}, true},
		{"GET", "/apis/apps/v1/namespaces/ns/controllerrevisions?fieldSelector=metadata.name%3Dx&watch=1", apiCall{Verb: "watch", Group: "apps", Resource: "controllerrevisions", Namespace: "ns", Name: "x"}, true},
		{"POST", "/apis/macvirt.io/v1alpha1/namespaces/ns/macclaims", apiCall{Verb: "create", Group: "macvirt.io", Resource: "macclaims", Namespace: "ns"}, true},
		{"PUT", "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachines/vm/stop", apiCall{Verb: "update", Group: "subresources.kubevirt.io", Resource: "virtualmachines", Subresource: "stop", Namespace: "ns", Name: "vm"}, true},
		{"DELETE", "/apis/cdi.kubevirt.io/v1beta1/namespaces/ns/datavolumes/dv", apiCall{Verb: "delete", Group: "cdi.kubevirt.io", Resource: "datavolumes", Namespace: "ns", Name: "dv"}, true},
		{"DELETE", "/apis/cdi.kubevirt.io/v1beta1/namespaces/ns/datavolumes", apiCall{Verb: "deletecollection", Group: "cdi.kubevirt.io", Resource: "datavolumes", Namespace: "ns"}, true},
		{"GET", "/apis/macvirt.io/v1alpha1/macpools/p", apiCall{Verb: "get", Group: "macvirt.io", Resource: "macpools", Name: "p"}, true},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		got, resource := parseCall(tc.method, u.Path, u.Query())
		if got != tc.want || resource != tc.resource {
			t.Errorf("%s %s: got %+v, %v; want %+v, %v", tc.method, tc.url, got, resource, tc.want, tc.resource)
		}
	}
}

// TestOwnerChecks checks what the recorder derives from owner references
// for the OwnerReferencesPermissionEnforcement admission plugin, in the
// encodings the operator's clients send, and from a patch that creates;
// it needs no API server.
func TestOwnerChecks(t *testing.T) {
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Group: "macvirt.io", Version: "v1alpha1", Kind: "MacMachine"}, meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Group: "macvirt.io", Version: "v1alpha1", Kind: "MacImage"}, meta.RESTScopeRoot)
	blocks := true
	np := &networkingv1.NetworkPolicy{TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: "np", Namespace: "ns", OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "macvirt.io/v1alpha1", Kind: "MacMachine", Name: "m", UID: "u", BlockOwnerDeletion: &blocks}}}}
	var proto bytes.Buffer
	if err := protobuf.NewSerializer(clientgoscheme.Scheme, clientgoscheme.Scheme).Encode(np, &proto); err != nil {
		t.Fatal(err)
	}
	finalizers := func(ns, resource, by string) apiCall {
		return apiCall{Verb: "update", Group: "macvirt.io", Resource: resource, Subresource: "finalizers", Namespace: ns, Name: "m", By: by, Status: 201}
	}
	machinePatch := apiCall{Verb: "patch", Group: "macvirt.io", Resource: "macmachines", Namespace: "ns", Name: "x", Status: 200}
	const (
		merge    = "application/merge-patch+json"
		poolRefs = `{"metadata":{"ownerReferences":[{"apiVersion":"macvirt.io/v1alpha1","kind":"MacPool","name":"p","uid":"u","controller":true}]}}`
	)
	for _, tc := range []struct {
		name, contentType string
		call              apiCall
		body              string
		want              []apiCall
	}{
		{"protobuf create", "application/vnd.kubernetes.protobuf",
			apiCall{Verb: "create", Group: "networking.k8s.io", Resource: "networkpolicies", Namespace: "ns", Status: 201}, proto.String(),
			[]apiCall{finalizers("ns", "macmachines", "create networkpolicies.networking.k8s.io")}},
		{"JSON create, a cluster-scoped owner", "application/json",
			apiCall{Verb: "create", Group: "cdi.kubevirt.io", Resource: "datavolumes", Namespace: "ns", Status: 201},
			`{"metadata":{"name":"dv","ownerReferences":[{"apiVersion":"macvirt.io/v1alpha1","kind":"MacImage","name":"m","uid":"u","blockOwnerDeletion":true}]}}`,
			[]apiCall{finalizers("", "macimages", "create datavolumes.cdi.kubevirt.io")}},
		{"JSON create, not blocking", "application/json", apiCall{Verb: "create", Resource: "secrets", Namespace: "ns", Status: 201},
			`{"metadata":{"name":"s","ownerReferences":[{"apiVersion":"macvirt.io/v1alpha1","kind":"MacMachine","name":"m","uid":"u"}]}}`, nil},
		{"merge patch of owners", merge, machinePatch, poolRefs,
			[]apiCall{{Verb: "delete", Group: "macvirt.io", Resource: "macmachines", Namespace: "ns", Name: "x", By: "patch macmachines.macvirt.io", Status: 200}}},
		{"merge patch of other fields", merge, machinePatch, `{"spec":{"running":true}}`, nil},
		{"server-side apply", "application/apply-patch+yaml", machinePatch, poolRefs, nil},
		{"JSON patch", "application/json-patch+json", machinePatch, `[{"op":"remove","path":"/metadata/finalizers/0"}]`, nil},
		{"a status patch", merge,
			apiCall{Verb: "patch", Group: "macvirt.io", Resource: "macmachines", Subresource: "status", Namespace: "ns", Name: "x", Status: 200},
			poolRefs, nil},
	} {
		got, unresolved := ownerChecks(mapper, tc.call, tc.contentType, []byte(tc.body))
		if !slices.Equal(got, tc.want) || len(unresolved) > 0 {
			t.Errorf("%s: got %+v (unresolved %v), want %+v", tc.name, got, unresolved, tc.want)
		}
	}

	applied := apiCall{Verb: "patch", Group: "monitoring.coreos.com", Resource: "servicemonitors", Namespace: "ns", Name: "s", Status: 201}
	want := applied
	want.Verb, want.By = "create", "patch servicemonitors.monitoring.coreos.com"
	if got, ok := createdByPatch(applied); !ok || got != want {
		t.Errorf("a patch that created: %+v, %v; want %+v", got, ok, want)
	}
	applied.Status = 200
	if got, ok := createdByPatch(applied); ok {
		t.Errorf("a patch that did not create: %+v", got)
	}
}
