package panics

import (
	"errors"
	"strings"
	"testing"
)

// TestValue: a runtime error keeps its text; any other value, whatever it
// holds, is named by its type only.
func TestValue(t *testing.T) {
	runtimeErr := func() (v any) {
		defer func() { v = recover() }()
		var s []int
		_ = s[len(s)+3]
		return nil
	}()
	for _, tc := range []struct {
		v    any
		want string
	}{
		{runtimeErr, "runtime error: index out of range [3] with length 0"},
		{nilDeref(), "runtime error: invalid memory address or nil pointer dereference"},
		{"Bearer eyJhbGciOi.secret", "panic(string)"},
		{errors.New("token eyJhbGciOi.secret refused"), "panic(*errors.errorString)"},
		{42, "panic(int)"},
		{fakeRuntimeError("token eyJhbGciOi.secret"), "panic(panics.fakeRuntimeError)"},
		{nil, "panic(<nil>)"},
	} {
		if got := Value(tc.v); got != tc.want {
			t.Errorf("Value(%T) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

// fakeRuntimeError claims to be a runtime error; its text is its own.
type fakeRuntimeError string

func (e fakeRuntimeError) Error() string { return string(e) }
func (fakeRuntimeError) RuntimeError()   {}

// TestCleanCutsArguments: every frame's argument words are cut, methods
// and closures included; the function names, files and lines stay.
func TestCleanCutsArguments(t *testing.T) {
	const in = "goroutine 7 [running]:\n" +
		"runtime/debug.Stack()\n" +
		"\t/usr/local/go/src/runtime/debug/stack.go:26 +0x5e\n" +
		"github.com/pdmcp/pdmcp/server.(*Server).save(0xc000123456, {0x1ddaadb86068?, 0x2a?}, 0x5)\n" +
		"\t/src/server/saves.go:10 +0x13\n" +
		"main.main.func1(...)\n" +
		"\t/tmp/st.go:12\n" +
		"panic({0x4bb840?, 0x1ddaadba6000?})\n" +
		"\t/usr/local/go/src/runtime/panic.go:860 +0x13a\n" +
		"created by net/http.(*Server).Serve in goroutine 1\n" +
		"\t/usr/local/go/src/net/http/server.go:3454 +0x485\n"
	want := "goroutine 7 [running]:\n" +
		"runtime/debug.Stack()\n" +
		"\t/usr/local/go/src/runtime/debug/stack.go:26 +0x5e\n" +
		"github.com/pdmcp/pdmcp/server.(*Server).save(...)\n" +
		"\t/src/server/saves.go:10 +0x13\n" +
		"main.main.func1(...)\n" +
		"\t/tmp/st.go:12\n" +
		"panic(...)\n" +
		"\t/usr/local/go/src/runtime/panic.go:860 +0x13a\n" +
		"created by net/http.(*Server).Serve in goroutine 1\n" +
		"\t/usr/local/go/src/net/http/server.go:3454 +0x485\n"
	if got := Clean(in); got != want {
		t.Errorf("Clean:\n%s\nwant:\n%s", got, want)
	}
}

// TestStackOfARecoveredPanic: taken in a deferred recover, the stack names
// the function that panicked and none of its arguments.
func TestStackOfARecoveredPanic(t *testing.T) {
	var stack string
	func() {
		defer func() {
			_ = recover()
			stack = Stack()
		}()
		panicsWith(0x5ec2e7)
	}()
	if !strings.Contains(stack, "panics.panicsWith(...)") || !strings.Contains(stack, "panics_test.go:") {
		t.Fatalf("the stack does not name the panicking frame:\n%s", stack)
	}
	if strings.Contains(stack, "0x5ec2e7") {
		t.Fatalf("the stack holds an argument word:\n%s", stack)
	}
}

//go:noinline
func panicsWith(secret int) {
	panic(secret)
}

func nilDeref() (v any) {
	defer func() { v = recover() }()
	var p *struct{ n int }
	return p.n
}
