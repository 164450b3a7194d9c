package bootstrap

import (
	"context"
	"fmt"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// Unavailable is a Secret or ConfigMap a part names that the operator
// could not read or use; the message names it and the fix. The part
// waits, and is handed over once it can be read.
type Unavailable struct{ Message string }

func (u *Unavailable) Error() string { return u.Message }

// Task is the part b as the agent runs it, with id: the script, the
// environment and the files, their values read from the Secrets and
// ConfigMaps in namespace that b names, with reader (the API server
// itself: the operator watches no Secret). A source it cannot read or use
// is an *Unavailable; other errors are the API server's.
func Task(ctx context.Context, reader client.Reader, namespace, id string, b *macvirtv1alpha1.Bootstrap) (guestprotocol.Task, error) {
	r := &sources{ctx: ctx, reader: reader, namespace: namespace}
	user := b.User
	if user == "" {
		user = guestprotocol.DefaultSSHUser
	}
	t := guestprotocol.Task{ID: id, User: user, TimeoutSeconds: int(b.TimeoutOrDefault().Seconds())}
	if s := b.Script; s != nil {
		switch {
		case s.SecretKeyRef != nil:
			v, err := r.value(secretKind, *s.SecretKeyRef, "script.secretKeyRef")
			if err != nil {
				return t, err
			}
			t.Script, t.Mask = string(v), maskText(t.Mask, string(v))
		case s.ConfigMapKeyRef != nil:
			v, err := r.value(configMapKind, *s.ConfigMapKeyRef, "script.configMapKeyRef")
			if err != nil {
				return t, err
			}
			t.Script = string(v)
		default:
			t.Script = s.Inline
		}
		if len(t.Script) > macvirtv1alpha1.MaxBootstrapScriptBytes {
			return t, &Unavailable{fmt.Sprintf("the script is %d bytes, more than the limit of %d", len(t.Script), macvirtv1alpha1.MaxBootstrapScriptBytes)}
		}
	}
	envBytes := 0
	for i, e := range b.Env {
		v := e.Value
		if e.SecretKeyRef != nil {
			raw, err := r.value(secretKind, *e.SecretKeyRef, fmt.Sprintf("env[%d].secretKeyRef", i))
			if err != nil {
				return t, err
			}
			v = string(raw)
			t.Mask = maskText(t.Mask, v)
		}
		envBytes += len(e.Name) + len(v)
		t.Env = append(t.Env, guestprotocol.EnvVar{Name: e.Name, Value: v})
	}
	if envBytes > macvirtv1alpha1.MaxBootstrapEnvBytes {
		return t, &Unavailable{fmt.Sprintf("the environment is %d bytes, more than the limit of %d", envBytes, macvirtv1alpha1.MaxBootstrapEnvBytes)}
	}
	fileBytes := 0
	for i, f := range b.Files {
		var content []byte
		var err error
		if f.SecretKeyRef != nil {
			content, err = r.value(secretKind, *f.SecretKeyRef, fmt.Sprintf("files[%d].secretKeyRef", i))
			t.Mask = maskText(t.Mask, string(content))
		} else if f.ConfigMapKeyRef != nil {
			content, err = r.value(configMapKind, *f.ConfigMapKeyRef, fmt.Sprintf("files[%d].configMapKeyRef", i))
		}
		if err != nil {
			return t, err
		}
		fileBytes += len(content)
		owner := f.Owner
		if owner == "" {
			owner = user
		}
		t.Files = append(t.Files, guestprotocol.File{Path: f.Path, Mode: uint32(f.ModeOrDefault()) & 0o777, Owner: owner, Content: content}) //nolint:gosec // 0 to 0777 by the schema.
	}
	if fileBytes > macvirtv1alpha1.MaxBootstrapFileBytes {
		return t, &Unavailable{fmt.Sprintf("the files hold %d bytes, more than the limit of %d", fileBytes, macvirtv1alpha1.MaxBootstrapFileBytes)}
	}
	return t, nil
}

// maskText adds v to the values masked in the output: text only (output
// is text; a binary value never shows whole in it).
func maskText(mask []string, v string) []string {
	if !utf8.ValidString(v) {
		return mask
	}
	return append(mask, v)
}

const (
	secretKind    = "Secret"
	configMapKind = "ConfigMap"
)

// sources reads the Secrets and ConfigMaps of one namespace, each once.
type sources struct {
	ctx       context.Context
	reader    client.Reader
	namespace string
	secrets   map[string]*corev1.Secret
	maps      map[string]*corev1.ConfigMap
}

// value is one key of a Secret or ConfigMap; field names what asks for it.
func (r *sources) value(kind string, ref macvirtv1alpha1.LocalKeyRef, field string) ([]byte, error) {
	key := types.NamespacedName{Namespace: r.namespace, Name: ref.Name}
	var data map[string][]byte
	switch kind {
	case secretKind:
		if r.secrets == nil {
			r.secrets = map[string]*corev1.Secret{}
		}
		s, ok := r.secrets[ref.Name]
		if !ok {
			s = &corev1.Secret{}
			if err := r.reader.Get(r.ctx, key, s); err != nil {
				return nil, r.unreadable(kind, ref, field, err)
			}
			r.secrets[ref.Name] = s
		}
		data = s.Data
	default:
		if r.maps == nil {
			r.maps = map[string]*corev1.ConfigMap{}
		}
		m, ok := r.maps[ref.Name]
		if !ok {
			m = &corev1.ConfigMap{}
			if err := r.reader.Get(r.ctx, key, m); err != nil {
				return nil, r.unreadable(kind, ref, field, err)
			}
			r.maps[ref.Name] = m
		}
		data = map[string][]byte{}
		for k, v := range m.Data {
			data[k] = []byte(v)
		}
		for k, v := range m.BinaryData {
			data[k] = v
		}
	}
	v, ok := data[ref.Key]
	if !ok {
		return nil, &Unavailable{fmt.Sprintf("%s: %s %s/%s has no key %q", field, kind, r.namespace, ref.Name, ref.Key)}
	}
	return v, nil
}

func (r *sources) unreadable(kind string, ref macvirtv1alpha1.LocalKeyRef, field string, err error) error {
	switch {
	case apierrors.IsNotFound(err):
		return &Unavailable{fmt.Sprintf("%s: %s %s/%s does not exist", field, kind, r.namespace, ref.Name)}
	case apierrors.IsForbidden(err):
		return &Unavailable{fmt.Sprintf("%s: the operator may not read %ss in namespace %s; "+
			"an admin of the namespace grants it with the RoleBinding in docs/bootstrap.md (the API server: %s)", field, kind, r.namespace, err.Error())}
	}
	return fmt.Errorf("reading %s %s/%s for %s: %w", kind, r.namespace, ref.Name, field, err)
}
