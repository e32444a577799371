package server

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/audit"
	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/internal/testutil"
	"github.com/pdmcp/pdmcp/server/files"
	"github.com/pdmcp/pdmcp/server/journal"
)

type panicCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (p *panicCounts) ToolCall(audit.ToolCall, []gateway.Request) {}
func (p *panicCounts) Panicked(where string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n[where]++
}

// bareServer is a Server with only what recovering needs: a log and the
// metrics.
func bareServer() (*Server, *panicCounts, *testutil.LogBuffer) {
	logs, counts := &testutil.LogBuffer{}, &panicCounts{n: map[string]int{}}
	return &Server{cfg: Config{Now: time.Now, Metrics: counts}, log: slog.New(slog.NewTextHandler(logs, nil))}, counts, logs
}

// TestPanicInAStagingGoroutineIsAStagingFailure: a panic on the goroutine
// that stages an encrypt's envelope (here: no placer) no longer ends the
// process: it comes back as the staging's failure, which makes the call
// write the envelope the ordinary way, and is logged and counted.
func TestPanicInAStagingGoroutineIsAStagingFailure(t *testing.T) {
	s, counts, logs := bareServer()
	var st *stagedEnvelope
	select {
	case st = <-s.stageInBackground(nil, "a.txt.pisoft", journal.FileKey{}, files.Envelope{TTag: "ttag-1"}):
	case <-time.After(time.Minute):
		t.Fatal("the staging goroutine never answered")
	}
	var p *panicked
	if !errors.As(st.err, &p) || st.ttag != "ttag-1" || st.out != nil {
		t.Fatalf("staged %+v, want the panic as its failure", st)
	}
	st.discard() // as the call does, with nothing staged
	if counts.n[PanicBackground] != 1 || !strings.Contains(logs.String(), "nil pointer dereference") {
		t.Fatalf("counted %v; log:\n%s", counts.n, logs)
	}
}

// TestPanicInAnotherMethodIsAnInternalError: a panic handling a request
// other than tools/call is answered with the JSON-RPC internal error,
// saying nothing of the panic; the method's name is logged only when it
// reads as one.
func TestPanicInAnotherMethodIsAnInternalError(t *testing.T) {
	s, counts, logs := bareServer()
	h := s.recoverPanics(func(context.Context, string, mcp.Request) (mcp.Result, error) {
		panic("secret-value")
	})
	for _, method := range []string{"tools/list", "Evil\nMETHOD"} {
		res, err := h(context.Background(), method, nil)
		var rpc *jsonrpc.Error
		if res != nil || !errors.As(err, &rpc) || rpc.Code != jsonrpc.CodeInternalError || strings.Contains(rpc.Message, "secret") {
			t.Fatalf("%q: got %v, %v; want the internal error", method, res, err)
		}
	}
	if counts.n[PanicMethod] != 2 {
		t.Fatalf("counted %v, want 2 at method", counts.n)
	}
	l := logs.String()
	if strings.Contains(l, "secret-value") || strings.Contains(l, "Evil") || !strings.Contains(l, "in=tools/list") ||
		!strings.Contains(l, "in=unknown") {
		t.Fatalf("log:\n%s", l)
	}
}

// TestGrantSessionsLockSurvivesAPanic: a revoke that panics while a stdio
// task's session is widened (a session with no client behind it) leaves
// the task's lock free, so the next call is served instead of waiting for
// ever.
func TestGrantSessionsLockSurvivesAPanic(t *testing.T) {
	g := NewGrantSessions(nil, "agent", []string{"ttag-1"}, time.Now().Add(time.Hour), nil, nil)
	g.cur = &gateway.Session{}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the revoke did not panic")
			}
		}()
		_, _ = g.widen(context.Background(), Caller{}, "ttag-2")
	}()
	done := make(chan int)
	go func() { done <- g.Len() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the task's session lock is still held after the panic")
	}
}
