package hostagent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestprotocol"
	"github.com/macvirt/macvirt/internal/hostagent/vz"
)

// Endpoint is the operator's agent endpoint, where the agent fetches each
// VM's configuration right before it starts the VM, with the host's
// ServiceAccount token.
type Endpoint struct {
	// URL is the endpoint, https://host:port, as this Mac reaches it.
	URL string
	// CABundle is the PEM bundle its certificate chains to; ServerName,
	// when set, the name the certificate is checked against.
	CABundle   []byte
	ServerName string
	// Token returns the host's ServiceAccount token; it is called for
	// every request, so a renewed token counts at once.
	Token func() (string, error)
}

// configsDir, under the state directory, holds a directory per VM with
// the configuration shared into it.
const configsDir = "configs"

// newEndpointClient is the HTTP client the agent fetches configurations
// with: TLS to the endpoint's CA only.
func newEndpointClient(e *Endpoint) (*http.Client, error) {
	if e == nil || e.URL == "" || e.Token == nil {
		return nil, errors.New("the operator's agent endpoint (its URL and the host's token) is required: a VM started without it gets no configuration and never reports")
	}
	if !strings.HasPrefix(e.URL, "https://") {
		return nil, fmt.Errorf("the agent endpoint %q: give its https:// URL", e.URL)
	}
	cfg, err := endpointTLS(e)
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: cfg,
		Proxy:           http.ProxyFromEnvironment,
	}}, nil
}

// endpointTLS trusts the endpoint's CA only.
func endpointTLS(e *Endpoint) (*tls.Config, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(e.CABundle) {
		return nil, errors.New("the agent endpoint's CA bundle holds no PEM certificate")
	}
	return &tls.Config{RootCAs: roots, ServerName: e.ServerName, MinVersion: tls.VersionTLS12}, nil
}

// configure fetches machine m's configuration from the operator and
// writes it, a file per key, into the directory the VM's share names;
// it returns that directory.
func (a *Agent) configure(ctx context.Context, m *macvirtv1alpha1.MacMachine, vm string) (string, error) {
	token, err := a.opts.Endpoint.Token()
	if err != nil {
		return "", fmt.Errorf("reading the host's ServiceAccount token: %w", err)
	}
	body, err := json.Marshal(guestprotocol.HostConfigRequest{
		Machine: guestprotocol.MachineRef{Namespace: m.Namespace, Name: m.Name}, UID: string(m.UID)})
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(a.opts.Endpoint.URL, "/")+guestprotocol.HostConfigPath, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := a.endpoint.Do(req)
	if err != nil {
		return "", fmt.Errorf("fetching the VM's configuration from the operator's endpoint: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("reading the VM's configuration: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e guestprotocol.Error
		if json.Unmarshal(raw, &e) == nil && e.Message != "" {
			return "", fmt.Errorf("the operator's endpoint refused the VM's configuration (%d %s): %s", resp.StatusCode, e.Reason, e.Message)
		}
		return "", fmt.Errorf("the operator's endpoint answered %s", resp.Status)
	}
	var cfg guestprotocol.HostConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return "", fmt.Errorf("the operator's endpoint sent a configuration that does not decode: %w", err)
	}
	for _, k := range []string{guestprotocol.KeyEndpoint, guestprotocol.KeyToken, guestprotocol.KeyNamespace, guestprotocol.KeyMachine} {
		if cfg.Files[k] == "" {
			return "", fmt.Errorf("the operator's endpoint sent a configuration without %s", k)
		}
	}
	return a.writeConfig(vm, cfg.Files)
}

// writeConfig replaces the VM's shared directory with files, whole: they
// are written beside it and renamed into place, so a VM never sees half.
func (a *Agent) writeConfig(vm string, files map[string]string) (string, error) {
	parent := filepath.Join(a.opts.StateDir, configsDir, vm)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return "", fmt.Errorf("making the VM's configuration directory: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".new-")
	if err != nil {
		return "", fmt.Errorf("making the VM's configuration directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	for k, v := range files {
		if !guestprotocol.ValidConfigFile(k, v) {
			return "", fmt.Errorf("the operator's endpoint sent a configuration file %q the agent does not write", k)
		}
		if err := os.WriteFile(filepath.Join(tmp, k), []byte(v), 0o600); err != nil {
			return "", fmt.Errorf("writing the VM's configuration: %w", err)
		}
	}
	// The share's last element is its name in the guest (lume names a
	// share after it; tart is given the name).
	dir := filepath.Join(parent, guestprotocol.ConfigShareName)
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("replacing the VM's configuration: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", fmt.Errorf("replacing the VM's configuration: %w", err)
	}
	return dir, nil
}

// forgetConfig removes the VM's configuration once the VM is gone.
func (a *Agent) forgetConfig(vm string) {
	_ = os.RemoveAll(filepath.Join(a.opts.StateDir, configsDir, vm))
}

// askShutdown writes the shutdown request into the VM's share, which its
// guest agent watches (macOS answers the framework's own request, the power
// button, with a dialog). It says whether the VM has a share to ask
// through. The next start writes the share anew, without the request.
func (a *Agent) askShutdown(vm string) (bool, error) {
	dir := filepath.Join(a.opts.StateDir, configsDir, vm, guestprotocol.ConfigShareName)
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	a.mu.Lock()
	delete(a.unused, vm)
	a.mu.Unlock()
	asked := []byte(a.clock.Now().UTC().Format(time.RFC3339) + "\n")
	if err := os.WriteFile(filepath.Join(dir, guestprotocol.ShutdownFile), asked, 0o600); err != nil {
		return false, fmt.Errorf("asking the guest agent to shut macOS down through %s: %w (free the agent's --state-dir's disk, or check its rights)",
			filepath.Join(dir, guestprotocol.ShutdownFile), err)
	}
	return true, nil
}

// requestStop asks macOS in the VM to shut down both ways there are: the
// request in its share, for the guest agent, and the tool's own (the power
// button, or lume shutdown over SSH). One of them asked is enough; the
// caller waits for the VM to end. When the share asked and the tool
// failed (a wrong guest password, Remote Login off), the tool's words are
// kept for stopWarning: if the guest agent does not answer either, they
// say what to mend.
func (a *Agent) requestStop(ctx context.Context, vm string) error {
	shared, shareErr := a.askShutdown(vm)
	err := a.driver.RequestStop(ctx, vm)
	warning := ""
	if shared && err != nil && !errors.Is(err, vz.ErrNotRunning) && !errors.Is(err, vz.ErrNoGracefulStop) {
		warning = "asked the guest agent to shut macOS down; the tool's own request failed: " + err.Error()
	}
	a.mu.Lock()
	if warning != "" {
		a.stopWarnings[vm] = warning
	} else {
		delete(a.stopWarnings, vm)
	}
	a.mu.Unlock()
	switch {
	case errors.Is(err, vz.ErrNotRunning):
		return err
	case shareErr != nil:
		return shareErr
	case shared, err == nil:
		// Asked; the caller waits, and past the grace period says so.
		return nil
	case errors.Is(err, vz.ErrNoGracefulStop):
		return fmt.Errorf("%w, and the VM has no share to ask its guest agent through (it was started before its host agent "+
			"shared one); macvirt never forces macOS off: shut macOS down from inside the VM", err)
	}
	return err
}

// stopWarning is what the tool said when it failed to ask the VM to stop
// while the share asked; empty when it did not fail.
func (a *Agent) stopWarning(vm string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stopWarnings[vm]
}

// forgetStopWarning drops it once the VM stopped.
func (a *Agent) forgetStopWarning(vm string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.stopWarnings, vm)
}

// waitingProblem is status.host.error while a VM asked to stop is waited
// for: the decision's problem (past the grace period), and what the tool
// said when its own request failed.
func waitingProblem(problem, warning string) string {
	switch {
	case warning == "":
		return problem
	case problem == "":
		return warning
	}
	return problem + "; " + warning
}

// ProbeEndpoint asks the operator's agent endpoint for nothing in
// particular: any HTTP answer shows the Mac reaches it and its certificate
// chains to the CA (the doctor's check).
func ProbeEndpoint(ctx context.Context, url string, caBundle []byte, serverName string) error {
	c, err := newEndpointClient(&Endpoint{URL: url, CABundle: caBundle, ServerName: serverName,
		Token: func() (string, error) { return "", nil }})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(url, "/")+"/", nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}
