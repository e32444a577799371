// Package panics writes up a recovered panic for the log without what it
// may carry: a value given to panic may be built from anything the program
// held (a token, a handle, document text), and a stack trace prints each
// frame's argument words. Value keeps only what the runtime wrote or the
// value's type; Stack keeps the frames and drops their arguments.
//
// It decides nothing about what to do after a panic: the server, the
// serving edge and the background work that recover each do their own.
package panics

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Value describes v, a recovered value, for a log line. A runtime error's
// text is the runtime's own (made from types, indices and lengths, never
// from the program's data: "index out of range [5] with length 3",
// "invalid memory address or nil pointer dereference"), so it is kept:
// only for the runtime package's own types, as any type may claim to be a
// runtime.Error. Anything else, an error or a string included, is named
// by its type only.
func Value(v any) string {
	typ := fmt.Sprintf("%T", v)
	if re, ok := v.(runtime.Error); ok && strings.HasPrefix(strings.TrimPrefix(typ, "*"), "runtime.") {
		return re.Error()
	}
	return "panic(" + typ + ")"
}

// Stack is the calling goroutine's stack, as debug.Stack writes it, with
// every frame's arguments cut to "(...)": the words there may be
// scalars from the program's data. Function names, files, lines and the
// goroutine header are kept. Called in a deferred recover, it shows where
// the panic happened, below the frame of panic itself.
func Stack() string {
	return Clean(string(debug.Stack()))
}

// Clean cuts each frame's argument list in a stack trace as debug.Stack
// writes it: lines that name a function (not the tab-indented file lines,
// nor the goroutine and "created by" lines) end with their arguments in
// parentheses.
func Clean(stack string) string {
	lines := strings.Split(stack, "\n")
	for i, l := range lines {
		if l == "" || strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "goroutine ") ||
			strings.HasPrefix(l, "created by ") || !strings.HasSuffix(l, ")") {
			continue
		}
		if open := argsStart(l); open >= 0 && open < len(l)-2 {
			lines[i] = l[:open] + "(...)"
		}
	}
	return strings.Join(lines, "\n")
}

// argsStart is the index of the parenthesis that opens the argument list
// ending line l: the one matching its last character. A method's receiver,
// as in pkg.(*T).m(0x1), has its own parentheses before it.
func argsStart(l string) int {
	depth := 0
	for i := len(l) - 1; i >= 0; i-- {
		switch l[i] {
		case ')':
			depth++
		case '(':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}
