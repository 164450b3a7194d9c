package runnercore

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SecretReread is how long a credentials Secret read is used before it is
// read again: a busy set reconciles many times a second, and a rotated key
// or a removed Secret shows within this.
const SecretReread = 30 * time.Second

// Secrets are the credentials Secrets a reconciler last read, by Secret.
type Secrets struct {
	mu   sync.Mutex
	read map[types.NamespacedName]secretRead
}

type secretRead struct {
	secret *corev1.Secret
	at     time.Time
}

// Get reads a credentials Secret from the API server (the operator may not
// cache Secrets), or gives the copy read less than SecretReread ago.
func (c *Secrets) Get(ctx context.Context, api client.Reader, now time.Time, key types.NamespacedName) (*corev1.Secret, error) {
	c.mu.Lock()
	read, ok := c.read[key]
	c.mu.Unlock()
	if ok && now.Sub(read.at) < SecretReread {
		return read.secret, nil
	}
	sec := &corev1.Secret{}
	if err := api.Get(ctx, key, sec); err != nil {
		c.mu.Lock()
		delete(c.read, key)
		c.mu.Unlock()
		return nil, err
	}
	c.mu.Lock()
	if c.read == nil {
		c.read = map[types.NamespacedName]secretRead{}
	}
	c.read[key] = secretRead{secret: sec, at: now}
	c.mu.Unlock()
	return sec, nil
}
