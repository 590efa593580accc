package apiserver

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/leasehold/leasehold/internal/registry"
	"github.com/leasehold/leasehold/internal/store"
)

// objectStore is what the handlers need of a resource's storage. A
// *store.Kind is one; a converted is one for a resource served from another
// resource's storage in a different group or version.
type objectStore interface {
	Key(namespace, name string) string
	Get(ctx context.Context, key string) (runtime.Object, error)
	Cached(ctx context.Context, key string) (runtime.Object, error)
	GetNotOlderThan(ctx context.Context, key string, minRV int64) (runtime.Object, error)
	Create(ctx context.Context, key string, obj runtime.Object, dryRun bool) (runtime.Object, error)
	Update(ctx context.Context, key string, opts store.UpdateOptions, fn store.UpdateFunc) (runtime.Object, error)
	Delete(ctx context.Context, key string, dryRun bool, check store.DeleteFunc) (runtime.Object, error)
	List(ctx context.Context, opts store.ListOptions) (*store.ListResult, error)
	Watch(ctx context.Context, opts store.WatchOptions) (*store.Watch, error)
	WaitFilled(ctx context.Context) error
}

var _ objectStore = (*store.Kind)(nil)

// converted serves a resource from the storage of r.Storage, converting
// every object on the way in (ToStorage) and out (FromStorage).
type converted struct {
	*store.Kind
	r *registry.Resource
}

func (c converted) from(obj runtime.Object, err error) (runtime.Object, error) {
	if err != nil || obj == nil {
		return obj, err
	}
	return c.r.FromStorage(obj)
}

func (c converted) to(obj runtime.Object) (runtime.Object, error) {
	if obj == nil {
		return nil, nil
	}
	return c.r.ToStorage(obj)
}

func (c converted) Get(ctx context.Context, key string) (runtime.Object, error) {
	return c.from(c.Kind.Get(ctx, key))
}

func (c converted) Cached(ctx context.Context, key string) (runtime.Object, error) {
	return c.from(c.Kind.Cached(ctx, key))
}

func (c converted) GetNotOlderThan(ctx context.Context, key string, minRV int64) (runtime.Object, error) {
	return c.from(c.Kind.GetNotOlderThan(ctx, key, minRV))
}

func (c converted) Create(ctx context.Context, key string, obj runtime.Object, dryRun bool) (runtime.Object, error) {
	s, err := c.to(obj)
	if err != nil {
		return nil, err
	}
	return c.from(c.Kind.Create(ctx, key, s, dryRun))
}

func (c converted) Update(ctx context.Context, key string, opts store.UpdateOptions, fn store.UpdateFunc) (runtime.Object, error) {
	var err error
	if opts.Guess, err = c.to(opts.Guess); err != nil {
		return nil, err
	}
	return c.from(c.Kind.Update(ctx, key, opts, func(cur runtime.Object) (runtime.Object, error) {
		served, err := c.from(cur, nil)
		if err != nil {
			return nil, err
		}
		out, err := fn(served)
		if err != nil {
			return nil, err
		}
		return c.to(out)
	}))
}

func (c converted) Delete(ctx context.Context, key string, dryRun bool, check store.DeleteFunc) (runtime.Object, error) {
	return c.from(c.Kind.Delete(ctx, key, dryRun, func(cur runtime.Object) error {
		if check == nil {
			return nil
		}
		served, err := c.from(cur, nil)
		if err != nil {
			return err
		}
		return check(served)
	}))
}

func (c converted) filter(f func(runtime.Object) bool) func(runtime.Object) bool {
	if f == nil {
		return nil
	}
	return func(obj runtime.Object) bool {
		served, err := c.from(obj, nil)
		return err == nil && f(served)
	}
}

func (c converted) List(ctx context.Context, opts store.ListOptions) (*store.ListResult, error) {
	opts.Filter = c.filter(opts.Filter)
	res, err := c.Kind.List(ctx, opts)
	if err != nil {
		return nil, err
	}
	for i, obj := range res.Items {
		if res.Items[i], err = c.from(obj, nil); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func (c converted) Watch(ctx context.Context, opts store.WatchOptions) (*store.Watch, error) {
	opts.Filter = c.filter(opts.Filter)
	w, err := c.Kind.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	convert := func(e *store.Event) *store.Event {
		obj, err := c.from(e.Object, nil)
		if err != nil {
			return nil
		}
		return &store.Event{Type: e.Type, Object: obj, RV: e.RV}
	}
	out := &store.Watch{InitialRV: w.InitialRV}
	for _, e := range w.Initial {
		if ce := convert(e); ce != nil {
			out.Initial = append(out.Initial, ce)
		}
	}
	events := make(chan *store.Event)
	done := make(chan struct{})
	go func() {
		defer close(events)
		for e := range w.Events {
			ce := convert(e)
			if ce == nil {
				continue
			}
			select {
			case events <- ce:
			case <-done:
				return
			}
		}
	}()
	out.Events = events
	out.SetStop(func() {
		close(done)
		w.Stop()
	})
	return out, nil
}
