package apiserver

// handlerStack is how much stack a request's goroutine is given before its
// handler runs. The HTTP/2 server starts each request on a goroutine of its
// own with a small stack, and a Lease update runs deeper than that: the
// stack grew twice per renewal, each time copying every frame and adjusting
// its pointers, which took 6.6 % of the server's CPU under a stream of
// renewals. Growing once, while the stack is a few frames deep, took 1.4 %.
// Its 16 KiB (the stack doubles to fit) come from the runtime's per-P stack
// caches, which a larger stack would not.
const handlerStack = 8 << 10

// stackIndex is read by growStack so that the compiler keeps its frame.
var stackIndex int

// growStack grows the calling goroutine's stack to fit handlerStack more
// bytes: the runtime grows a stack to fit the frame of the function being
// called, and the stack keeps that size for the rest of the goroutine's
// life (a garbage collection halves only a stack less than a quarter used).
//
//go:noinline
func growStack() byte {
	var frame [handlerStack]byte
	return frame[stackIndex]
}
