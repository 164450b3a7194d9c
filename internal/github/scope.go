// Package github is macvirt's side of GitHub Actions: a runner set's scope
// and credentials, and a client over GitHub's own Go clients (the scale-set
// client for the Actions service, go-github for the REST API, ghinstallation
// for GitHub App tokens) that says GitHub's errors in GitHub's words.
package github

import (
	"fmt"
	"net/url"
	"strings"
)

// Scope is an organisation or a repository on GitHub.com or a GitHub
// Enterprise Server.
type Scope struct {
	// URL is the scope's address as given, without a trailing slash.
	URL string
	// Host is the server: github.com, a GHE.com tenant or a GHES host.
	Host string
	// Owner is the organisation (or the repository's owner).
	Owner string
	// Repo is the repository's name, empty for an organisation.
	Repo string
	// APIBase is the REST API's base address, ending in a slash.
	APIBase string
}

// ParseScope reads a runner set's github.url. It refuses an enterprise
// (runner sets register with an organisation or a repository) and anything
// that is not an http(s) address of one or two path elements.
func ParseScope(raw string) (Scope, error) {
	const want = "want https://<host>/<organisation> or https://<host>/<organisation>/<repository>"
	u, err := url.Parse(strings.TrimRight(strings.TrimSpace(raw), "/"))
	if err != nil {
		return Scope{}, fmt.Errorf("%q is not an address: %v; %s", raw, err, want)
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return Scope{}, fmt.Errorf("%q: %s", raw, want)
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	s := Scope{URL: u.String(), Host: u.Host}
	switch {
	case len(parts) == 1 && parts[0] != "":
		s.Owner = parts[0]
	case len(parts) == 2 && strings.EqualFold(parts[0], "enterprises"):
		return Scope{}, fmt.Errorf("%q is an enterprise; a runner set registers with an organisation or a repository: %s", raw, want)
	case len(parts) == 2 && parts[0] != "" && parts[1] != "":
		s.Owner, s.Repo = parts[0], parts[1]
	default:
		return Scope{}, fmt.Errorf("%q: %s", raw, want)
	}
	switch host := strings.ToLower(u.Hostname()); {
	case host == "github.com" || host == "www.github.com":
		s.APIBase = "https://api.github.com/"
	case strings.HasSuffix(host, ".ghe.com"):
		s.APIBase = u.Scheme + "://api." + u.Host + "/"
	default:
		s.APIBase = u.Scheme + "://" + u.Host + "/api/v3/"
	}
	return s, nil
}

// Hosted reports whether the scope is on GitHub.com or a GHE.com tenant,
// where go-github's default addresses apply.
func (s Scope) Hosted() bool {
	h := strings.ToLower(s.Host)
	return h == "github.com" || h == "www.github.com" || strings.HasSuffix(h, ".ghe.com")
}
