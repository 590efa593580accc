package feed

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// BenchmarkFirstList is a feed's first list of 100 000 Nodes, each a copy
// made for this reader (as from etcd, for Nodes served without a watch
// cache), handed to a handler that keeps nothing of them. "pages": the
// source pages as asked (500 a page); "one-list": it answers with every
// Node at once, as a source that ignores limits does. peak-heap-MB is the
// largest heap (live objects and garbage not yet collected) seen while the
// list was read.
func BenchmarkFirstList(b *testing.B) {
	const nodes = 100_000
	template := benchNode()
	for _, tc := range []struct {
		name  string
		pages bool
	}{{"pages", true}, {"one-list", false}} {
		b.Run(tc.name, func(b *testing.B) {
			watching := make(chan struct{}, 1)
			var peak uint64
			var ms runtime.MemStats
			sample := func() {
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapAlloc)
			}
			lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
				ListWithContextFunc: func(_ context.Context, o metav1.ListOptions) (kruntime.Object, error) {
					from := 0
					if o.Continue != "" {
						from, _ = strconv.Atoi(o.Continue)
					}
					to := nodes
					if tc.pages && o.Limit > 0 {
						to = min(from+int(o.Limit), nodes)
					}
					list := &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}}
					list.Items = make([]corev1.Node, 0, to-from)
					for i := from; i < to; i++ {
						n := template.DeepCopy()
						n.Name = fmt.Sprintf("node-%06d", i)
						n.UID = types.UID(fmt.Sprintf("uid-%06d", i))
						list.Items = append(list.Items, *n)
					}
					if to < nodes {
						list.Continue = strconv.Itoa(to)
					}
					sample()
					return list, nil
				},
				// The Reflector watches once the list is handed over.
				WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
					watching <- struct{}{}
					return watch.NewFake(), nil
				},
			}, listThenWatch{})
			b.ReportAllocs()
			for b.Loop() {
				// Start from the live heap alone, without the last
				// list's garbage.
				b.StopTimer()
				runtime.GC()
				b.StartTimer()
				seen := 0
				f, err := New(Config{ListerWatcher: lw, Logger: slog.New(slog.DiscardHandler), Handler: Handler{
					Seen: func(kruntime.Object, bool) {
						if seen++; seen%5000 == 0 {
							sample()
						}
					},
					Gone:     func(kruntime.Object) {},
					Relisted: func(func(types.UID) bool) {},
				}})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- f.Run(ctx) }()
				<-watching
				cancel()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				if seen != nodes {
					b.Fatalf("the handler saw %d nodes, want %d", seen, nodes)
				}
			}
			b.ReportMetric(float64(peak)/1e6, "peak-heap-MB")
		})
	}
}

// benchNode is a Node as an agent registers it and reports its status.
func benchNode() *corev1.Node {
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "the agent is posting ready status", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{ResourceVersion: "9", CreationTimestamp: metav1.Now(),
			Labels: map[string]string{"kubernetes.io/hostname": "node", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{ready},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeHostName, Address: "node"}},
			Capacity:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")},
			NodeInfo: corev1.NodeSystemInfo{MachineID: "0123456789abcdef", SystemUUID: "01234567-89ab-cdef-0123-456789abcdef",
				BootID: "fedcba98-7654-3210-fedc-ba9876543210", KernelVersion: "6.1.0", OSImage: "Debian GNU/Linux 12",
				OperatingSystem: "linux", Architecture: "amd64", KubeletVersion: "v1.37.2"},
		},
	}
}
