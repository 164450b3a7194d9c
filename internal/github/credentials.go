package github

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// Credentials are a GitHub App's (app id, installation id, private key) or
// a fine-grained token.
type Credentials struct {
	AppID          int64
	InstallationID int64
	PrivateKey     []byte
	Token          string
	// Secret is namespace/name of the Secret they came from.
	Secret string
}

// CredentialsFromSecret reads a runner set's credentials Secret, saying
// which key is missing or wrong.
func CredentialsFromSecret(s *corev1.Secret) (Credentials, error) {
	c := Credentials{Secret: s.Namespace + "/" + s.Name}
	get := func(k string) string { return strings.TrimSpace(string(s.Data[k])) }
	if tok := get(macvirtv1alpha1.GitHubTokenKey); tok != "" {
		if get(macvirtv1alpha1.GitHubAppIDKey) != "" {
			return c, fmt.Errorf("the Secret %s holds both %s and %s: keep the GitHub App's keys or the token, not both",
				c.Secret, macvirtv1alpha1.GitHubTokenKey, macvirtv1alpha1.GitHubAppIDKey)
		}
		c.Token = tok
		return c, nil
	}
	var missing []string
	for _, k := range []string{macvirtv1alpha1.GitHubAppIDKey, macvirtv1alpha1.GitHubInstallationIDKey, macvirtv1alpha1.GitHubPrivateKeyKey} {
		if get(k) == "" {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return c, fmt.Errorf("the Secret %s has no %s: give a GitHub App's %s, %s and %s, or a fine-grained token under %s",
			c.Secret, strings.Join(missing, ", "), macvirtv1alpha1.GitHubAppIDKey, macvirtv1alpha1.GitHubInstallationIDKey,
			macvirtv1alpha1.GitHubPrivateKeyKey, macvirtv1alpha1.GitHubTokenKey)
	}
	var err error
	if c.AppID, err = strconv.ParseInt(get(macvirtv1alpha1.GitHubAppIDKey), 10, 64); err != nil || c.AppID <= 0 {
		return c, fmt.Errorf("the Secret %s: %s must be the GitHub App's numeric id (its settings page shows it)", c.Secret, macvirtv1alpha1.GitHubAppIDKey)
	}
	if c.InstallationID, err = strconv.ParseInt(get(macvirtv1alpha1.GitHubInstallationIDKey), 10, 64); err != nil || c.InstallationID <= 0 {
		return c, fmt.Errorf("the Secret %s: %s must be the numeric id of the App's installation (the number at the end of the installation's settings address)",
			c.Secret, macvirtv1alpha1.GitHubInstallationIDKey)
	}
	c.PrivateKey = s.Data[macvirtv1alpha1.GitHubPrivateKeyKey]
	if !strings.Contains(string(c.PrivateKey), "PRIVATE KEY-----") {
		return c, fmt.Errorf("the Secret %s: %s must be the App's private key in PEM, as GitHub downloads it", c.Secret, macvirtv1alpha1.GitHubPrivateKeyKey)
	}
	return c, nil
}

// Describe names the credential, never its value: what a 401 refers to.
func (c Credentials) Describe() string {
	if c.Token != "" {
		return fmt.Sprintf("the token in Secret %s (key %s)", c.Secret, macvirtv1alpha1.GitHubTokenKey)
	}
	return fmt.Sprintf("GitHub App %d, installation %d, from Secret %s", c.AppID, c.InstallationID, c.Secret)
}
