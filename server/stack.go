package server

// toolCallStack is how much stack a tool call's deepest path needs (the
// Gateway request: its proof's ECDSA signature under the HTTP client, and
// the SDK's and pdmcp's frames above it).
const toolCallStack = 16 << 10

// growStack grows the calling goroutine's stack to hold toolCallStack
// more at once. The SDK runs each request on a goroutine of its own, which
// starts with a small stack: left to itself it doubles it, copying every
// frame each time, at the deepest points of the call (argument decoding,
// the proof's signature), which cost more than the call's own work there.
// One growth here, with few frames on the stack, replaces them.
//
//go:noinline
func growStack() {
	var b [toolCallStack]byte
	keep(b[:])
}

// keep is growStack's use of its frame, so that the compiler keeps it.
//
//go:noinline
func keep([]byte) {}
