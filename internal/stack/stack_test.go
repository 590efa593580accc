package stack

import (
	"fmt"
	"testing"
)

// deep runs n frames of about 256 bytes each, as a request's handler runs
// through authentication, decoding and the store.
//
//go:noinline
func deep(n int) byte {
	var pad [224]byte
	pad[n%len(pad)] = byte(n)
	if n == 0 {
		return pad[0]
	}
	return deep(n-1) + pad[n%len(pad)]
}

// BenchmarkDeepGoroutine starts a goroutine that runs about 12 KiB deep,
// with and without growing its stack first.
func BenchmarkDeepGoroutine(b *testing.B) {
	for _, grow := range []bool{false, true} {
		b.Run(fmt.Sprintf("grow=%v", grow), func(b *testing.B) {
			b.ReportAllocs()
			done := make(chan byte)
			for b.Loop() {
				go func() {
					if grow {
						Grow()
					}
					done <- deep(48)
				}()
				<-done
			}
		})
	}
}
