package kubectlmac

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// follower follows one object by a watch (no polling), as kubectl wait
// does: it lists the object by name, watches from the list's version, and
// calls settle with each version it sees until settle says done. A watch
// that ends is watched again from the last version seen; one whose
// version is too old (410 Gone) starts over with a fresh list.
type follower struct {
	env             *Env
	namespace, name string
	// kind names the object in messages (macclaim, macimage).
	kind    string
	newList func() client.ObjectList
	// settle is given the object, or nil when there is none: absent from
	// a list, or deleted (then deleted is true).
	settle func(obj client.Object, deleted bool) (code int, done bool, err error)
}

// errRelist says the watch's version is too old: list again.
var errRelist = errors.New("relist")

// run follows until settle is done or an error, or ctx, ends it.
func (f *follower) run(ctx context.Context) (code int, done bool, err error) {
	rv := ""
	for {
		if rv == "" {
			code, done, listed, err := f.list(ctx)
			if done || err != nil {
				return code, done, err
			}
			rv = listed
		}
		code, done, next, err := f.watch(ctx, rv)
		switch {
		case errors.Is(err, errRelist):
			rv = ""
			continue
		case done || err != nil:
			return code, done, err
		case next == rv:
			// The watch ended with nothing, not even a bookmark: pause before
			// watching again, so a server that ends watches at once is not
			// hammered.
			select {
			case <-ctx.Done():
				return 1, false, ctx.Err()
			case <-time.After(f.env.pollInterval()):
			}
		}
		if next != "" {
			rv = next
		}
	}
}

func (f *follower) selector(raw *metav1.ListOptions) *client.ListOptions {
	return &client.ListOptions{Namespace: f.namespace, FieldSelector: fields.OneTermEqualSelector("metadata.name", f.name), Raw: raw}
}

// list reads the object and the version to watch from.
func (f *follower) list(ctx context.Context) (code int, done bool, rv string, err error) {
	list := f.newList()
	if err := f.env.Client.List(ctx, list, f.selector(nil)); err != nil {
		return 1, false, "", err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return 1, false, "", err
	}
	for _, item := range items {
		if obj, ok := item.(client.Object); ok && obj.GetName() == f.name {
			if code, done, err := f.settle(obj, false); done {
				return code, true, "", err
			}
			return 0, false, list.GetResourceVersion(), nil
		}
	}
	code, done, err = f.settle(nil, false)
	return code, done, list.GetResourceVersion(), err
}

// watch follows the object from version rv until the watch ends, and says
// the last version it saw (rv when none).
func (f *follower) watch(ctx context.Context, rv string) (code int, done bool, last string, err error) {
	last = rv
	wi, err := f.env.Client.Watch(ctx, f.newList(), f.selector(&metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}))
	switch {
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
		return 0, false, last, errRelist
	case err != nil:
		return 1, false, last, err
	}
	defer wi.Stop()
	for {
		var ev watch.Event
		var open bool
		select {
		case <-ctx.Done():
			return 1, false, last, ctx.Err()
		case ev, open = <-wi.ResultChan():
		}
		if !open {
			return 0, false, last, nil
		}
		if ev.Type == watch.Error {
			err := apierrors.FromObject(ev.Object)
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return 0, false, last, errRelist
			}
			return 1, false, last, fmt.Errorf("watching %s %s: %w", f.kind, f.key(), err)
		}
		obj, ok := ev.Object.(client.Object)
		if !ok {
			return 1, false, last, fmt.Errorf("watching %s %s: a %s event of a %T", f.kind, f.key(), ev.Type, ev.Object)
		}
		if obj.GetResourceVersion() != "" {
			last = obj.GetResourceVersion()
		}
		if ev.Type == watch.Bookmark || obj.GetName() != f.name || obj.GetNamespace() != f.namespace {
			continue
		}
		if ev.Type == watch.Deleted {
			obj = nil
		}
		if code, done, err := f.settle(obj, ev.Type == watch.Deleted); done {
			return code, true, last, err
		}
	}
}

func (f *follower) key() string {
	if f.namespace == "" {
		return f.name
	}
	return f.namespace + "/" + f.name
}
