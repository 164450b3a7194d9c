package tunnel

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The ConfigMap in which the API server publishes how it vouches for the
// users of requests it proxies to aggregated APIs.
const (
	authConfigNamespace = "kube-system"
	authConfigName      = "extension-apiserver-authentication"
)

// frontProxyTTL is how long the front proxy's trust is used before it is
// read again (the API server rewrites it when its CA rotates).
const frontProxyTTL = time.Minute

// User is who a proxied request is for, as the API server vouches.
type User struct {
	Name   string
	Groups []string
	Extra  map[string][]string
}

// FrontProxy authenticates requests the API server proxies: they come with
// a client certificate its request-header CA signed, whose common name it
// allows, and name the user in headers. It reads all of that from
// kube-system/extension-apiserver-authentication (the built-in Role
// extension-apiserver-authentication-reader grants that ConfigMap's get).
type FrontProxy struct {
	// Reader reads the ConfigMap: an uncached reader, since the operator
	// watches no ConfigMaps in kube-system.
	Reader client.Reader
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	mu      sync.Mutex
	trust   *frontProxyTrust
	fetched time.Time
}

// frontProxyTrust is the ConfigMap's request-header half.
type frontProxyTrust struct {
	pool                      *x509.CertPool
	allowedNames              []string
	userHeaders, groupHeaders []string
	extraPrefixes             []string
}

// current returns the trust, reading it again after frontProxyTTL.
func (f *FrontProxy) current(ctx context.Context) (*frontProxyTrust, error) {
	now := time.Now
	if f.Now != nil {
		now = f.Now
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.trust != nil && now().Sub(f.fetched) < frontProxyTTL {
		return f.trust, nil
	}
	cm := &corev1.ConfigMap{}
	if err := f.Reader.Get(ctx, client.ObjectKey{Namespace: authConfigNamespace, Name: authConfigName}, cm); err != nil {
		if f.trust != nil {
			return f.trust, nil // keep the last one while the API server is away
		}
		return nil, fmt.Errorf("reading %s/%s: %w", authConfigNamespace, authConfigName, err)
	}
	t, err := parseTrust(cm.Data)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", authConfigNamespace, authConfigName, err)
	}
	f.trust, f.fetched = t, now()
	return t, nil
}

// parseTrust reads the ConfigMap's request-header keys: a PEM bundle and
// JSON lists of names and headers.
func parseTrust(data map[string]string) (*frontProxyTrust, error) {
	ca := data["requestheader-client-ca-file"]
	if ca == "" {
		return nil, errors.New("no requestheader-client-ca-file: the API server is not configured for API aggregation (--requestheader-client-ca-file)")
	}
	t := &frontProxyTrust{pool: x509.NewCertPool()}
	if !t.pool.AppendCertsFromPEM([]byte(ca)) {
		return nil, errors.New("requestheader-client-ca-file holds no PEM certificate")
	}
	lists := map[string]*[]string{
		"requestheader-allowed-names":        &t.allowedNames,
		"requestheader-username-headers":     &t.userHeaders,
		"requestheader-group-headers":        &t.groupHeaders,
		"requestheader-extra-headers-prefix": &t.extraPrefixes,
	}
	for key, into := range lists {
		if v := data[key]; v != "" {
			if err := json.Unmarshal([]byte(v), into); err != nil {
				return nil, fmt.Errorf("%s: %w", key, err)
			}
		}
	}
	if len(t.userHeaders) == 0 {
		return nil, errors.New("no requestheader-username-headers")
	}
	return t, nil
}

// authenticate returns the user the API server vouches for in r, or an
// error when r did not come from the API server.
func (t *frontProxyTrust) authenticate(r *http.Request) (*User, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return nil, errors.New("no client certificate: only the API server's front proxy may call the tunnel")
	}
	leaf := r.TLS.PeerCertificates[0]
	opts := x509.VerifyOptions{Roots: t.pool, Intermediates: x509.NewCertPool(),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	for _, c := range r.TLS.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := leaf.Verify(opts); err != nil {
		return nil, fmt.Errorf("the client certificate is not the API server's front proxy's: %w", err)
	}
	if len(t.allowedNames) > 0 && !slices.Contains(t.allowedNames, leaf.Subject.CommonName) {
		return nil, fmt.Errorf("client certificate %q is not one the API server's front proxy uses", leaf.Subject.CommonName)
	}
	u := &User{}
	for _, h := range t.userHeaders {
		if u.Name = r.Header.Get(h); u.Name != "" {
			break
		}
	}
	if u.Name == "" {
		return nil, errors.New("the request names no user")
	}
	for _, h := range t.groupHeaders {
		u.Groups = append(u.Groups, r.Header.Values(h)...)
	}
	for _, prefix := range t.extraPrefixes {
		for h, values := range r.Header {
			if key, ok := cutPrefixFold(h, prefix); ok && key != "" {
				if u.Extra == nil {
					u.Extra = map[string][]string{}
				}
				u.Extra[unescapeExtraKey(key)] = append(u.Extra[unescapeExtraKey(key)], values...)
			}
		}
	}
	return u, nil
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return "", false
	}
	return s[len(prefix):], true
}

// unescapeExtraKey reverses the API server's escaping of extra keys in
// header names (lower case, %-escaped), as the request-header
// authenticator does.
func unescapeExtraKey(k string) string {
	if u, err := url.PathUnescape(strings.ToLower(k)); err == nil {
		return u
	}
	return strings.ToLower(k)
}
