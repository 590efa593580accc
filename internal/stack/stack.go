// Package stack grows a goroutine's stack before deep work, once, while
// the stack is still shallow.
//
// A goroutine starts with a small stack; when a call needs more, the
// runtime allocates a stack twice the size and copies the old one into
// it, adjusting every pointer into it frame by frame, so the cost grows
// with the depth at which it happens. The HTTP/2 server starts each
// request on a goroutine of its own, and a Lease update grew that stack
// twice, deep in authentication and in comparing metadata: under a stream
// of renewals, runtime.newstack took 6.6 % of the server's CPU. Growing it
// at the top of the handler left 1.4 %.
package stack

// Reserve is how much stack Grow makes room for. The stack doubles until
// it fits: from the usual starting size, to 16 KiB, which the runtime
// takes from its per-P caches (a 32 KiB stack comes from the heap, and its
// one copy cost more in the same profile).
const Reserve = 8 << 10

// index is read by Grow so that the compiler keeps its frame.
var index int

// Grow grows the calling goroutine's stack to fit Reserve more bytes. The
// stack keeps that size for the rest of the goroutine's life (a garbage
// collection halves only a stack less than a quarter used), so Grow is for
// goroutines that are about to run deep, as a request's handler does.
//
//go:noinline
func Grow() byte {
	var frame [Reserve]byte
	return frame[index]
}
