package bench

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestStackTracingExportsToTheSink: a stack started with Tracing exports
// a read's spans over OTLP/HTTP to its sink by the time it is closed; one
// without exports nothing.
func TestStackTracingExportsToTheSink(t *testing.T) {
	for _, tracing := range []bool{true, false} {
		ctx := context.Background()
		st, err := StartStack(ctx, StackOptions{Dir: t.TempDir(), Users: 1, MaxCallers: 2, Tracing: tracing})
		if err != nil {
			t.Fatal(err)
		}
		cs, err := st.ConnectUser(ctx, 0, "")
		if err != nil {
			st.Close()
			t.Fatal(err)
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read_protected_document", Arguments: map[string]any{"documentId": DocumentID}})
		if err != nil || res.IsError {
			st.Close()
			t.Fatalf("read: %v %+v", err, res)
		}
		cs.Close()
		st.Close()
		if got := st.TraceBytes.Load(); (got > 0) != tracing {
			t.Errorf("tracing %v: the sink read %d bytes", tracing, got)
		}
	}
}
