package github

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseScope(t *testing.T) {
	cases := []struct {
		in, owner, repo, api, err string
	}{
		{in: "https://github.com/acme", owner: "acme", api: "https://api.github.com/"},
		{in: "https://github.com/acme/ios-app/", owner: "acme", repo: "ios-app", api: "https://api.github.com/"},
		{in: "https://octo.ghe.com/acme", owner: "acme", api: "https://api.octo.ghe.com/"},
		{in: "https://ghe.example:8443/acme/app", owner: "acme", repo: "app", api: "https://ghe.example:8443/api/v3/"},
		{in: "https://github.com/enterprises/big", err: "is an enterprise"},
		{in: "https://github.com/", err: "want https://"},
		{in: "https://github.com/a/b/c", err: "want https://"},
		{in: "ftp://github.com/acme", err: "want https://"},
		{in: "https://user:pw@github.com/acme", err: "want https://"}, //nolint:gosec // a test address, not a credential.
		{in: "github.com/acme", err: "want https://"},
	}
	for _, tc := range cases {
		s, err := ParseScope(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || s.Owner != tc.owner || s.Repo != tc.repo || s.APIBase != tc.api {
			t.Errorf("%s: %+v %v", tc.in, s, err)
		}
	}
}

func TestCredentialsFromSecret(t *testing.T) {
	sec := func(data map[string]string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ci", Name: "gh"}, Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	key := "-----BEGIN RSA PRIVATE KEY-----\nx\n-----END RSA PRIVATE KEY-----\n" //nolint:gosec // not a key: the PEM markers only.
	cases := []struct {
		data map[string]string
		err  string
		desc string
	}{
		{data: map[string]string{"token": "github_pat_x"}, desc: "the token in Secret ci/gh (key token)"}, //nolint:gosec // a test value.
		{data: map[string]string{"app-id": "12", "installation-id": "34", "private-key": key}, desc: "GitHub App 12, installation 34, from Secret ci/gh"},
		{data: map[string]string{"app-id": "12"}, err: "has no installation-id, private-key"},
		{data: map[string]string{}, err: "has no app-id, installation-id, private-key"},
		{data: map[string]string{"app-id": "x", "installation-id": "34", "private-key": key}, err: "app-id must be the GitHub App's numeric id"},
		{data: map[string]string{"app-id": "12", "installation-id": "34", "private-key": "nope"}, err: "private-key must be the App's private key in PEM"},
		{data: map[string]string{"app-id": "12", "token": "t"}, err: "not both"},
	}
	for _, tc := range cases {
		c, err := CredentialsFromSecret(sec(tc.data))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "ci/gh") {
				t.Errorf("%v: error %v, want %q", tc.data, err, tc.err)
			}
			continue
		}
		if err != nil || c.Describe() != tc.desc {
			t.Errorf("%v: %q %v", tc.data, c.Describe(), err)
		}
		if strings.Contains(c.Describe(), "github_pat_x") {
			t.Errorf("Describe shows the token")
		}
	}
}
