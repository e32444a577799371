package auth

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
)

// BenchmarkMiddlewareCached: the Middleware's pass over a request whose
// token the Verifier has in its cache (every call but a session's first):
// the token taken from its header, the cache's answer, the go-sdk's own
// bearer check handed the TokenInfo, and the caller put in the context.
// The handler inside only reads what the streamable handler and the user
// limiter read. Run:
//
//	go test -run X -bench MiddlewareCached -benchmem ./auth/
func BenchmarkMiddlewareCached(b *testing.B) {
	f := newVerifierFixture(b)
	tok := f.token(b, nil)
	if _, err := f.v.Verify(context.Background(), tok); err != nil {
		b.Fatal(err)
	}
	mw := Middleware(f.v, MiddlewareOptions{ResourceMetadataURL: "https://mcp.test/.well-known/oauth-protected-resource"})
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := CallerFromContext(r.Context())
		info := sdkauth.TokenInfoFromContext(r.Context())
		if _, cred := CredentialFromExtra(info.Extra); !ok || !cred || info.UserID != c.ID() {
			b.Fatal("no caller")
		}
		w.WriteHeader(http.StatusOK)
	}))
	r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, r)
	}
	if w.Code != http.StatusOK {
		b.Fatalf("status %d: %s", w.Code, w.Body)
	}
}
