package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestLoadFiftyUsersThroughEightCallers is the load suite: 50 users, each
// mapped to one of three principals with different access, call
// read_protected_document at once through maxCallers 8, half with MCP
// sessions and half without. Every call must end as that user's access
// says: the document's own text (its sha256 checked against the manifest)
// when their principal holds READ, a key-server refusal when not. The
// only other outcome allowed is SESSIONS_BUSY, retried after its
// retryAfter. Meanwhile the reference Gateway's counters never show more
// than 8 live scoped sessions. Run alone:
//
//	go test ./internal/bench -run TestLoad
func TestLoadFiftyUsersThroughEightCallers(t *testing.T) {
	const users, callsEach, maxCallers = 50, 4, 8
	ctx := context.Background()
	st, err := StartStack(ctx, StackOptions{Dir: t.TempDir(), Users: users, MaxCallers: maxCallers, Mixed: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	docs := []string{DocumentID, "proposal-aurora", "proposal-borealis", "evaluation-criteria"}
	tokens := make([]string, users)
	for i := range tokens {
		if tokens[i], err = st.Token(ctx, i); err != nil {
			t.Fatal(err)
		}
	}

	// The live sessions, sampled from the counters while the load runs.
	var maxLive atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if n := int64(st.LiveScopedSessions()); n > maxLive.Load() {
				maxLive.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
		}
	}()

	var (
		mu         sync.Mutex
		unexpected []string
		served     atomic.Int64
		denied     atomic.Int64
		busy       atomic.Int64
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		unexpected = append(unexpected, fmt.Sprintf(format, args...))
	}
	var wg sync.WaitGroup
	for i := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			proto := SessionProtocol
			if i%2 == 1 {
				proto = StatelessProtocol
			}
			cs, err := st.Connect(ctx, st.MCPURL, tokens[i], proto)
			if err != nil {
				fail("user %d: connect: %v", i, err)
				return
			}
			defer cs.Close()
			for k := range callsEach {
				doc := docs[(i+k)%len(docs)]
				for attempt := 0; ; attempt++ {
					res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read_protected_document",
						Arguments: map[string]any{"documentId": doc}})
					if err != nil {
						fail("user %d, %s: %v", i, doc, err)
						break
					}
					if wait, retry := judge(t, st, i, doc, res, fail, &served, &denied); retry {
						busy.Add(1)
						if attempt >= 40 {
							fail("user %d, %s: still SESSIONS_BUSY after %d tries", i, doc, attempt+1)
							break
						}
						time.Sleep(wait)
						continue
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	for _, u := range unexpected {
		t.Error(u)
	}
	if n := maxLive.Load(); n > maxCallers {
		t.Errorf("%d live Gateway sessions at once, over maxCallers %d", n, maxCallers)
	}
	if served.Load() == 0 || denied.Load() == 0 {
		t.Errorf("served %d, denied %d: the load did not exercise both outcomes", served.Load(), denied.Load())
	}
	t.Logf("%d served, %d refused by the key server, %d SESSIONS_BUSY retried, at most %d live sessions",
		served.Load(), denied.Load(), busy.Load(), maxLive.Load())
}

// judge checks one answer against user i's access to doc. It returns
// retry for SESSIONS_BUSY, with the wait its retryAfter asks for.
func judge(t *testing.T, st *Stack, i int, doc string, res *mcp.CallToolResult, fail func(string, ...any),
	served, denied *atomic.Int64) (time.Duration, bool) {
	var text string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text = tc.Text
		}
	}
	if res.IsError {
		var r struct {
			Refused    bool   `json:"refused"`
			Layer      string `json:"layer"`
			Code       string `json:"code"`
			RetryAfter int    `json:"retryAfter"`
		}
		if err := json.Unmarshal([]byte(text), &r); err != nil || !r.Refused {
			fail("user %d, %s: an error that is not a refusal: %.200s", i, doc, text)
			return 0, false
		}
		if r.Code == "SESSIONS_BUSY" {
			return time.Duration(min(max(r.RetryAfter, 1), 2)) * 100 * time.Millisecond, true
		}
		if st.MayRead(i, doc) {
			fail("user %d (%s), %s: refused %s/%s though READ is held", i, st.PrincipalOf(i), doc, r.Layer, r.Code)
			return 0, false
		}
		if r.Layer != "keyserver" || r.Code != "ACL_DENIED" {
			fail("user %d (%s), %s: refused %s/%s, want keyserver/ACL_DENIED", i, st.PrincipalOf(i), doc, r.Layer, r.Code)
			return 0, false
		}
		denied.Add(1)
		return 0, false
	}
	if !st.MayRead(i, doc) {
		fail("user %d (%s) read %s without READ on it", i, st.PrincipalOf(i), doc)
		return 0, false
	}
	var out struct {
		Provenance struct {
			DocumentID string `json:"documentId"`
		} `json:"provenance"`
		Text string `json:"text"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		fail("user %d, %s: structured output: %v", i, doc, err)
		return 0, false
	}
	sum := sha256.Sum256([]byte(out.Text))
	if out.Provenance.DocumentID != doc || hex.EncodeToString(sum[:]) != st.Manifest.Documents[doc].SHA256 {
		fail("user %d, %s: got %s's text or another's (sha %x)", i, doc, out.Provenance.DocumentID, sum[:4])
		return 0, false
	}
	served.Add(1)
	return 0, false
}
