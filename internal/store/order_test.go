package store

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
)

// TestOrder: after any sequence of additions, changes and removals (keys
// removed and added again before a merge, changes of keys not yet merged,
// merges when due), a cache's order merged is its map in key order, each
// key with its latest object.
func TestOrder(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 1))
		items := map[string]runtime.Object{}
		var o order
		adds := 0 // since the last merge
		merge := func() {
			t.Helper()
			// What a merge relies on: the count of removed entries, and
			// added holding additions alone.
			removed := 0
			for _, e := range o.entries {
				if e.obj == nil {
					removed++
				}
			}
			if removed != o.removed || len(o.added) > adds {
				t.Fatalf("seed %d: %d entries removed, counted %d; %d keys added, %d listed", seed, removed, o.removed, adds, len(o.added))
			}
			o.merge(items)
			adds = 0
		}
		keys := 10 + rng.IntN(3000)
		for step := range 20000 {
			key := fmt.Sprintf("/registry/leases/ns/k%d", rng.IntN(keys))
			_, had := items[key]
			switch op := rng.IntN(10); {
			case op < 6: // a put: added or changed
				obj := sampleLease()
				obj.Name = key
				obj.ResourceVersion = fmt.Sprint(step)
				items[key] = obj
				o.put(key, obj, !had)
				if !had {
					adds++
				}
			case had: // a removal
				delete(items, key)
				o.remove(key)
			}
			if o.due() {
				merge()
			}
			if rng.IntN(500) == 0 || step == 19999 {
				merge()
				if o.fallbacks != 0 {
					t.Fatalf("seed %d step %d: a merge disagreed with the map", seed, step)
				}
				if !o.current() {
					t.Fatalf("seed %d step %d: changes left after a merge", seed, step)
				}
				want := slices.Sorted(maps.Keys(items))
				if len(o.entries) != len(want) {
					t.Fatalf("seed %d step %d: %d entries, want %d", seed, step, len(o.entries), len(want))
				}
				for i, e := range o.entries {
					if e.key != want[i] || e.obj != items[e.key] {
						t.Fatalf("seed %d step %d: entry %d is %s (%p), want %s (%p)", seed, step, i, e.key, e.obj, want[i], items[want[i]])
					}
				}
			}
		}
	}
}
