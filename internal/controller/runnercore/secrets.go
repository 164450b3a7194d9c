package runnercore

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/internal/controller/base"
)

// SecretReread is how long a credentials Secret read is used before it is
// read again: a busy set reconciles many times a second, and a rotated key
// or a removed Secret shows within this.
const SecretReread = 30 * time.Second

// Secrets are the credentials Secrets a reconciler last read, by Secret,
// each for SecretReread: the operator has no cache of Secrets to read
// them from.
type Secrets struct {
	read base.Assumed[types.NamespacedName, *corev1.Secret]
}

// Get reads a credentials Secret from the API server (the operator may not
// cache Secrets), or gives the copy read less than SecretReread ago.
func (c *Secrets) Get(ctx context.Context, api client.Reader, now time.Time, key types.NamespacedName) (*corev1.Secret, error) {
	if sec, _, ok := c.read.Get(key, now); ok {
		return sec, nil
	}
	sec := &corev1.Secret{}
	if err := api.Get(ctx, key, sec); err != nil {
		c.read.Forget(key)
		return nil, err
	}
	c.read.Assume(key, sec, now, SecretReread)
	return sec, nil
}
