package feed_test

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/leasehold/leasehold/internal/controller/feed"
)

// listThenWatch is a server that serves no watch-list streams (as
// leasehold's watch cache, in process), so the feed lists, then watches.
type listThenWatch struct{}

func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }

// A controller that keeps the holder of every lease, and nothing else.
func Example() {
	lease := func(name, holder, rv string) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", UID: types.UID(name), ResourceVersion: rv},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder},
		}
	}
	changes := watch.NewRaceFreeFake()
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: "10"},
				Items: []coordinationv1.Lease{*lease("scheduler", "replica-a", "9")}}, nil
		},
		WatchFuncWithContext: func(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
			fmt.Println("watching from", o.ResourceVersion)
			return changes, nil
		},
	}, listThenWatch{})

	ctx, cancel := context.WithCancel(context.Background())
	holders := map[string]string{} // the controller's own table
	f, err := feed.New(feed.Config{
		ListerWatcher: lw,
		Handler: feed.Handler{
			Seen: func(obj runtime.Object, initial bool) {
				l := obj.(*coordinationv1.Lease)
				holders[l.Name] = *l.Spec.HolderIdentity
				fmt.Printf("%s held by %s (initial list: %v)\n", l.Name, holders[l.Name], initial)
				if !initial {
					cancel()
				}
			},
			Gone: func(obj runtime.Object) { delete(holders, obj.(*coordinationv1.Lease).Name) },
			Relisted: func(listed func(types.UID) bool) {
				for name := range holders {
					if !listed(types.UID(name)) {
						delete(holders, name)
					}
				}
			},
		},
	})
	if err != nil {
		panic(err)
	}
	changes.Modify(lease("scheduler", "replica-b", "11")) // buffered: read once the feed watches
	if err := f.Run(ctx); err != nil {
		panic(err)
	}
	// Output:
	// scheduler held by replica-a (initial list: true)
	// watching from 10
	// scheduler held by replica-b (initial list: false)
}
