package gitlab

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/ssh"
)

// keyring gives each instance a key pair of its own, derived from a secret
// that lives only in this process's memory: a claim carries the public
// half, the runner gets the private half from ConnectInfo, and nothing
// stores it. A restarted plugin cannot log in to its predecessor's Macs and
// releases them.
type keyring struct {
	secret []byte
	// static is the runner's own key (connector_config key_path with
	// use_static_credentials): every claim gets its public half instead.
	static ssh.Signer
	id     string
}

func newKeyring(static []byte) (*keyring, error) {
	k := &keyring{secret: make([]byte, 32)}
	if _, err := rand.Read(k.secret); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(k.secret)
	k.id = hex.EncodeToString(sum[:8])
	if len(static) > 0 {
		s, err := ssh.ParsePrivateKey(static)
		if err != nil {
			return nil, fmt.Errorf("connector_config key: %w (give an unencrypted OpenSSH or PEM private key)", err)
		}
		k.static = s
		k.id = strings.TrimPrefix(ssh.FingerprintSHA256(s.PublicKey()), "SHA256:")
	}
	return k, nil
}

// private is the instance's private key, derived from the secret and the
// claim's name.
func (k *keyring) private(instance string) ed25519.PrivateKey {
	mac := hmac.New(sha256.New, k.secret)
	_, _ = mac.Write([]byte("macvirt fleeting instance key\x00" + instance))
	return ed25519.NewKeyFromSeed(mac.Sum(nil))
}

// authorizedKey is the line the claim carries for the instance.
func (k *keyring) authorizedKey(instance string) (string, error) {
	if k.static != nil {
		return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k.static.PublicKey()))) + " gitlab-runner", nil
	}
	pub, err := ssh.NewPublicKey(k.private(instance).Public())
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub))) + " gitlab-runner-" + instance, nil
}

// privatePEM is the instance's private key as the runner's SSH connector
// reads it (OpenSSH format).
func (k *keyring) privatePEM(instance string) ([]byte, error) {
	if k.static != nil {
		return nil, errors.New("the runner holds its own key (use_static_credentials)")
	}
	block, err := ssh.MarshalPrivateKey(k.private(instance), "gitlab-runner-"+instance)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(block), nil
}
