package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/internal/stack"
)

// answerTypes records the Content-Type of every answer to a tools/call.
type answerTypes struct {
	base http.RoundTripper
	mu   sync.Mutex
	seen []string
}

func (a *answerTypes) RoundTrip(r *http.Request) (*http.Response, error) {
	call := false
	if r.Body != nil {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		call = bytes.Contains(b, []byte(`"tools/call"`))
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	resp, err := a.base.RoundTrip(r)
	if err == nil && call {
		a.mu.Lock()
		ct, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
		a.seen = append(a.seen, ct)
		a.mu.Unlock()
	}
	return resp, err
}

// TestBareResultFloorCarriesWhatAReadCarries: the floor (b') takes the
// read's input schema and arguments and answers the read's result, in
// the same framing pdmcp answers a call (one JSON body, never an SSE
// stream), in both session modes.
func TestBareResultFloorCarriesWhatAReadCarries(t *testing.T) {
	ctx := context.Background()
	st, err := StartStack(ctx, StackOptions{Dir: t.TempDir(), Users: 1, MaxCallers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tok, err := st.Token(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{SessionProtocol, StatelessProtocol} {
		t.Run(mode, func(t *testing.T) {
			types := map[string]*answerTypes{}
			connect := func(name, url, token string) *mcp.ClientSession {
				a := &answerTypes{base: st.HC.Transport}
				types[name] = a
				cs, err := stack.Connect(ctx, &http.Client{Transport: a}, url, token, "floor-test", &mcp.ClientSessionOptions{ProtocolVersion: mode})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { cs.Close() })
				return cs
			}
			p := connect("pdmcp", st.MCPURL, tok)
			if err := setBareResult(ctx, st, p); err != nil {
				t.Fatal(err)
			}
			bare := connect("bare", st.BareURL, st.BareToken)
			read, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "read_protected_document", Arguments: readArgs()})
			if err != nil || read.IsError {
				t.Fatalf("read: %v %+v", err, read)
			}
			floor, err := bare.CallTool(ctx, &mcp.CallToolParams{Name: BareResultTool, Arguments: readArgs()})
			if err != nil || floor.IsError {
				t.Fatalf("floor: %v %+v", err, floor)
			}
			// Alike but for _meta, where each server names itself.
			read.Meta, floor.Meta = nil, nil
			rj, _ := json.Marshal(read)
			fj, _ := json.Marshal(floor)
			if !bytes.Equal(rj, fj) {
				t.Errorf("the floor's answer (%d bytes) is not the read's (%d bytes)", len(fj), len(rj))
			}
			schemas := map[string]string{}
			for name, cs := range map[string]*mcp.ClientSession{"pdmcp": p, "bare": bare} {
				want := map[string]string{"pdmcp": "read_protected_document", "bare": BareResultTool}[name]
				tools, err := cs.ListTools(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				for _, tl := range tools.Tools {
					if tl.Name == want {
						b, _ := json.Marshal(tl.InputSchema)
						schemas[name] = string(b)
					}
				}
			}
			if schemas["pdmcp"] == "" || schemas["pdmcp"] != schemas["bare"] {
				t.Errorf("input schemas: pdmcp %s, floor %s", schemas["pdmcp"], schemas["bare"])
			}
			for name, a := range types {
				for _, ct := range a.seen {
					if ct != "application/json" {
						t.Errorf("%s answered a call as %q, want one JSON body", name, ct)
					}
				}
				if len(a.seen) == 0 {
					t.Errorf("%s: no call answered", name)
				}
			}
		})
	}
}
