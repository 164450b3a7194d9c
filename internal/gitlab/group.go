package gitlab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"gitlab.com/gitlab-org/fleeting/fleeting/provider"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/tunnel"
)

// Routes from the runner to a Mac.
const (
	// ViaDirect: the runner dials the Mac's pod address (it runs in the
	// claims' namespace, whose pods the Mac's NetworkPolicy admits), or its
	// external address for NodePort and LoadBalancer claims.
	ViaDirect = "direct"
	// ViaTunnel: the plugin listens on a loopback port per instance and
	// carries each connection through macvirt's tunnel in the API server;
	// the runner runs wherever its kubeconfig works.
	ViaTunnel = "tunnel"
)

// DefaultMaxSize is max_size when the plugin_config does not give it.
const DefaultMaxSize = 100

// Config is the runner's [runners.autoscaler.plugin_config], which
// GitLab's plugin host fills from JSON.
type Config struct {
	// Name names the group: the claims carry it as a label, and their
	// names start with it. Unique per runner in a namespace.
	Name string `json:"name"`
	// Namespace is where the claims are made; the kubeconfig's namespace
	// (or the pod's, in the cluster) when empty.
	Namespace string `json:"namespace"`
	// Kubeconfig is a kubeconfig file; empty: in-cluster, or $KUBECONFIG.
	Kubeconfig string `json:"kubeconfig"`
	// Class and Pool are the claims' spec.className and spec.poolName (at
	// least one).
	Class string `json:"class"`
	Pool  string `json:"pool"`
	// Via is "direct" (the default) or "tunnel".
	Via string `json:"via"`
	// MaxSize caps the instances; the runner's max_instances may not
	// exceed it.
	MaxSize int `json:"max_size"`
	// Lifetime is the claims' spec.lifetime (a Go duration), a backstop
	// for a runner that dies without releasing its Macs.
	Lifetime string `json:"lifetime"`
}

// InstanceGroup is the plugin.
type InstanceGroup struct {
	Config

	log      hclog.Logger
	settings provider.Settings
	cfg      *rest.Config
	client   client.Client
	keys     *keyring
	self     process
	started  time.Time
	lifetime *metav1.Duration
	// leases: the process keeps a Lease (lease.go); false when its
	// identity may not. leaseDone is closed once the Lease is given up.
	leases    bool
	leaseDone chan struct{}

	mu       sync.Mutex
	forwards map[string]*forward
	said     map[string]string   // the last reason logged per claim
	seen     map[string]sighting // other processes' Leases, by process id
	ctx      context.Context     // ends at Shutdown; the forwards live in it
	stop     context.CancelFunc
}

var _ provider.InstanceGroup = (*InstanceGroup)(nil)

// Init checks the settings, connects to the API server, and releases the
// claims an earlier process of this name left.
func (g *InstanceGroup) Init(ctx context.Context, log hclog.Logger, settings provider.Settings) (provider.ProviderInfo, error) {
	g.log, g.settings, g.started = log, settings, time.Now()
	if err := g.validate(); err != nil {
		return provider.ProviderInfo{}, err
	}
	if settings.Protocol != "" && settings.Protocol != provider.ProtocolSSH {
		return provider.ProviderInfo{}, fmt.Errorf("connector_config protocol %q: a Mac is reached over ssh; set protocol = \"ssh\" or leave it out", settings.Protocol)
	}
	var static []byte
	if settings.UseStaticCredentials {
		if len(settings.Key) == 0 {
			return provider.ProviderInfo{}, errors.New("connector_config use_static_credentials is set without a key: give key_path, or leave use_static_credentials out and the plugin makes a key pair per Mac")
		}
		static = settings.Key
	}
	keys, err := newKeyring(static)
	if err != nil {
		return provider.ProviderInfo{}, err
	}
	g.keys = keys
	id := make([]byte, 8)
	if _, err := rand.Read(id); err != nil {
		return provider.ProviderInfo{}, err
	}
	g.self = process{id: hex.EncodeToString(id), keyID: keys.id}
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: g.Kubeconfig, Precedence: clientcmd.NewDefaultClientConfigLoadingRules().Precedence},
		&clientcmd.ConfigOverrides{})
	if g.cfg, err = loader.ClientConfig(); err != nil {
		return provider.ProviderInfo{}, fmt.Errorf("kubeconfig: %w (set plugin_config kubeconfig, or run in the cluster)", err)
	}
	if g.Namespace == "" {
		if g.Namespace, _, err = loader.Namespace(); err != nil {
			return provider.ProviderInfo{}, fmt.Errorf("the kubeconfig's namespace: %w", err)
		}
	}
	g.cfg.UserAgent = "fleeting-plugin-macvirt"
	s := runtime.NewScheme()
	if err := macvirtv1alpha1.AddToScheme(s); err != nil {
		return provider.ProviderInfo{}, err
	}
	if err := coordinationv1.AddToScheme(s); err != nil {
		return provider.ProviderInfo{}, err
	}
	if g.client, err = client.New(g.cfg, client.Options{Scheme: s}); err != nil {
		return provider.ProviderInfo{}, err
	}
	g.ctx, g.stop = context.WithCancel(context.Background())
	g.forwards, g.said, g.seen = map[string]*forward{}, map[string]string{}, map[string]sighting{}
	// Listing now proves the kubeconfig's rights before the first job.
	if err := g.client.List(ctx, &macvirtv1alpha1.MacClaimList{}, client.InNamespace(g.Namespace), client.MatchingLabels{LabelGroup: g.Name}); err != nil {
		return provider.ProviderInfo{}, fmt.Errorf("listing the MacClaims of %s: %w (bind macvirt-fleeting-plugin to the plugin's user in that namespace, docs/gitlab.md)", g.Namespace, err)
	}
	if g.leases, err = g.renewLease(ctx, time.Now()); err != nil {
		return provider.ProviderInfo{}, fmt.Errorf("the plugin process's Lease in %s: %w", g.Namespace, err)
	}
	if g.leases {
		g.leaseDone = make(chan struct{})
		go func() { defer close(g.leaseDone); g.keepLease(g.ctx) }()
	} else {
		log.Warn("the plugin's identity may not keep a Lease (bind macvirt-fleeting-plugin, docs/gitlab.md): a plugin process that starts while an earlier one still runs jobs will release that one's Macs, jobs and all")
	}
	log.Info("macvirt instance group ready", "namespace", g.Namespace, "name", g.Name, "class", g.Class, "pool", g.Pool, "via", g.Via, "key_id", keys.id, "process", g.self.id)
	return provider.ProviderInfo{
		ID:      "macvirt/" + g.Namespace + "/" + g.Name,
		MaxSize: g.MaxSize,
		Version: Version,
	}, nil
}

// Version is the plugin's version, set at build time.
var Version = "dev"

// validate checks and defaults the plugin_config, naming the field.
func (g *InstanceGroup) validate() error {
	if g.Via == "" {
		g.Via = ViaDirect
	}
	if g.MaxSize == 0 {
		g.MaxSize = DefaultMaxSize
	}
	var errs []error
	if msgs := validation.IsDNS1123Label(g.Name); g.Name == "" || len(msgs) > 0 || len(g.Name) > 40 {
		errs = append(errs, fmt.Errorf("plugin_config name %q: give a lower-case DNS label of at most 40 characters, unique per runner (it starts the claims' names)", g.Name))
	}
	if g.Class == "" && g.Pool == "" {
		errs = append(errs, errors.New("plugin_config class: give the MacClass of the Macs (or pool, a MacPool)"))
	}
	if g.Via != ViaDirect && g.Via != ViaTunnel {
		errs = append(errs, fmt.Errorf("plugin_config via %q: give %q (the runner reaches the Macs on the pod network) or %q (through the API server)", g.Via, ViaDirect, ViaTunnel))
	}
	if g.MaxSize < 0 {
		errs = append(errs, fmt.Errorf("plugin_config max_size %d: give a positive number (default %d)", g.MaxSize, DefaultMaxSize))
	}
	if g.Lifetime != "" {
		d, err := time.ParseDuration(g.Lifetime)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("plugin_config lifetime %q: give a Go duration such as \"3h\"", g.Lifetime))
		} else {
			g.lifetime = &metav1.Duration{Duration: d}
		}
	}
	return errors.Join(errs...)
}

// Update reports each claim of the group, and releases those that can
// never serve a job.
func (g *InstanceGroup) Update(ctx context.Context, fn func(instance string, state provider.State)) error {
	list := &macvirtv1alpha1.MacClaimList{}
	if err := g.client.List(ctx, list, client.InNamespace(g.Namespace), client.MatchingLabels{LabelGroup: g.Name}); err != nil {
		return fmt.Errorf("listing the MacClaims of %s: %w", g.Namespace, err)
	}
	running, err := g.running(ctx, time.Now())
	if err != nil {
		return fmt.Errorf("listing the plugin processes' Leases in %s: %w", g.Namespace, err)
	}
	seen, listed := map[string]bool{}, map[string]bool{}
	for i := range list.Items {
		c := &list.Items[i]
		v := judge(c, g.self, g.started, running)
		g.say(c.Name, v)
		listed[c.Name] = true
		if v.foreign {
			continue
		}
		if v.release {
			if err := g.client.Delete(ctx, c); err != nil && !apierrors.IsNotFound(err) {
				g.log.Error("releasing a claim that cannot serve a job", "claim", c.Name, "err", err)
			}
		}
		seen[c.Name] = true
		fn(c.Name, v.state)
	}
	g.mu.Lock()
	for name := range g.said {
		if !listed[name] {
			// Said once per claim and reason, foreign claims included.
			delete(g.said, name)
		}
	}
	g.mu.Unlock()
	for name := range g.forwardNames() {
		if !seen[name] {
			g.closeForward(name)
		}
	}
	return nil
}

// say logs a claim's reason when it changes.
func (g *InstanceGroup) say(name string, v verdict) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if v.why == "" || g.said[name] == v.why {
		return
	}
	g.said[name] = v.why
	switch {
	case v.foreign || v.release:
		g.log.Warn("claim", "claim", name, "state", v.state, "why", v.why)
	default:
		g.log.Info("claim", "claim", name, "state", v.state, "why", v.why)
	}
}

// Increase makes n claims; it returns how many the API server took.
func (g *InstanceGroup) Increase(ctx context.Context, n int) (int, error) {
	var errs []error
	made := 0
	for range n {
		if err := g.claim(ctx); err != nil {
			errs = append(errs, err)
			continue
		}
		made++
	}
	return made, errors.Join(errs...)
}

// claim makes one claim under a fresh name (the key pair is derived from
// the name, so the name is chosen before the claim is made).
func (g *InstanceGroup) claim(ctx context.Context) error {
	for range 3 {
		suffix := make([]byte, 4)
		if _, err := rand.Read(suffix); err != nil {
			return err
		}
		name := g.Name + "-" + hex.EncodeToString(suffix)
		key, err := g.keys.authorizedKey(name)
		if err != nil {
			return err
		}
		c := &macvirtv1alpha1.MacClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: g.Namespace, Name: name,
				Labels:      map[string]string{LabelGroup: g.Name},
				Annotations: map[string]string{AnnotationKey: g.keys.id, AnnotationProcess: g.self.id}},
			Spec: macvirtv1alpha1.MacClaimSpec{ClassName: g.Class, PoolName: g.Pool, SSHAuthorizedKeys: []string{key}, Lifetime: g.lifetime},
		}
		err = g.client.Create(ctx, c)
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("making MacClaim %s/%s: %w", g.Namespace, name, err)
		}
		return nil
	}
	return errors.New("three fresh claim names were taken; retrying on the next increase")
}

// Decrease releases the claims: each Mac stops gracefully and goes.
func (g *InstanceGroup) Decrease(ctx context.Context, instances []string) ([]string, error) {
	var done []string
	var errs []error
	for _, name := range instances {
		g.closeForward(name)
		c := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Namespace: g.Namespace, Name: name}}
		if err := g.client.Delete(ctx, c); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("releasing MacClaim %s/%s: %w", g.Namespace, name, err))
			continue
		}
		done = append(done, name)
	}
	return done, errors.Join(errs...)
}

// ConnectInfo says how the runner reaches the instance's Mac and logs in.
func (g *InstanceGroup) ConnectInfo(ctx context.Context, instance string) (provider.ConnectInfo, error) {
	c := &macvirtv1alpha1.MacClaim{}
	if err := g.client.Get(ctx, client.ObjectKey{Namespace: g.Namespace, Name: instance}, c); err != nil {
		return provider.ConnectInfo{}, fmt.Errorf("MacClaim %s/%s: %w", g.Namespace, instance, err)
	}
	info, err := connectInfo(g.settings.ConnectorConfig, c)
	if err != nil {
		return provider.ConnectInfo{}, err
	}
	if !g.settings.UseStaticCredentials {
		if info.Key, err = g.keys.privatePEM(instance); err != nil {
			return provider.ConnectInfo{}, err
		}
	}
	if g.Via == ViaTunnel {
		addr, err := g.openForward(instance, int32(info.ProtocolPort)) //nolint:gosec // a port, from the claim or bounded by fleeting.
		if err != nil {
			return provider.ConnectInfo{}, err
		}
		info.InternalAddr, info.ExternalAddr = addr, addr
	}
	return info, nil
}

// connectInfo is how to reach a Ready claim's Mac directly, starting from
// the runner's connector_config (its user wins over the claim's).
func connectInfo(base provider.ConnectorConfig, c *macvirtv1alpha1.MacClaim) (provider.ConnectInfo, error) {
	conn := c.Status.Connection
	if c.Status.Phase != macvirtv1alpha1.ClaimReady || conn == nil || conn.Address == "" {
		return provider.ConnectInfo{}, fmt.Errorf("MacClaim %s/%s is not Ready (phase %q): no address to connect to yet", c.Namespace, c.Name, c.Status.Phase)
	}
	info := provider.ConnectInfo{ConnectorConfig: base, ID: c.Name}
	info.Protocol = provider.ProtocolSSH
	if info.OS == "" {
		info.OS = "darwin"
	}
	if info.Arch == "" {
		info.Arch = "amd64"
	}
	if info.Username == "" {
		info.Username = conn.User
	}
	port := conn.SSHPort
	if port == 0 {
		port = 22
	}
	if base.ProtocolPort != 0 {
		port = int32(base.ProtocolPort) //nolint:gosec // fleeting bounds it to a port.
	}
	info.ProtocolPort = int(port)
	info.InternalAddr = net.JoinHostPort(conn.Address, strconv.Itoa(int(port)))
	if ext := conn.External; ext != nil && ext.Address != "" && ext.SSHPort != 0 {
		info.ExternalAddr = net.JoinHostPort(ext.Address, strconv.Itoa(int(ext.SSHPort)))
	}
	return info, nil
}

// Heartbeat fails once the claim's Mac cannot serve a job.
func (g *InstanceGroup) Heartbeat(ctx context.Context, instance string) error {
	c := &macvirtv1alpha1.MacClaim{}
	if err := g.client.Get(ctx, client.ObjectKey{Namespace: g.Namespace, Name: instance}, c); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: MacClaim %s/%s is gone", provider.ErrInstanceUnhealthy, g.Namespace, instance)
		}
		return err
	}
	if v := judge(c, g.self, g.started, nil); v.state != provider.StateRunning {
		return fmt.Errorf("%w: MacClaim %s/%s: %s", provider.ErrInstanceUnhealthy, g.Namespace, instance, v.why)
	}
	return nil
}

// Shutdown closes the forwards and gives up the process's Lease; the
// claims stay for the runner to reuse or release (gitlab-runner's
// delete_instances_on_shutdown).
func (g *InstanceGroup) Shutdown(ctx context.Context) error {
	if g.stop != nil {
		g.stop()
	}
	if g.leaseDone != nil {
		// Its Lease deleted, the next process releases what this one
		// leaves at once.
		select {
		case <-g.leaseDone:
		case <-ctx.Done():
		}
	}
	for name := range g.forwardNames() {
		g.closeForward(name)
	}
	return nil
}

// forward is one instance's loopback listener into the tunnel.
type forward struct {
	l    net.Listener
	port int32
	wg   sync.WaitGroup
}

func (g *InstanceGroup) openForward(instance string, port int32) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f, ok := g.forwards[instance]; ok && f.port == port {
		return f.l.Addr().String(), nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("listening for %s's tunnel: %w", instance, err)
	}
	f := &forward{l: l, port: port}
	g.forwards[instance] = f
	f.wg.Go(func() {
		for {
			local, err := l.Accept()
			if err != nil {
				return
			}
			f.wg.Go(func() {
				dctx, cancel := context.WithTimeout(g.ctx, 30*time.Second)
				mac, err := tunnel.Dial(dctx, g.cfg, g.Namespace, instance, port)
				cancel()
				if err != nil {
					g.log.Error("tunnel", "claim", instance, "err", err)
					_ = local.Close()
					return
				}
				tunnel.Splice(g.ctx, local, mac)
			})
		}
	})
	return l.Addr().String(), nil
}

func (g *InstanceGroup) forwardNames() map[string]bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	names := map[string]bool{}
	for n := range g.forwards {
		names[n] = true
	}
	return names
}

// closeForward stops taking connections for the instance; those open end
// with the Mac.
func (g *InstanceGroup) closeForward(instance string) {
	g.mu.Lock()
	f, ok := g.forwards[instance]
	delete(g.forwards, instance)
	g.mu.Unlock()
	if ok {
		_ = f.l.Close()
	}
}
