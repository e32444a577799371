package auth

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
)

// TestCallerIDFromContext: the id is the caller's ID whether the context
// was made by ContextWithCaller or by the Middleware (where it is the
// TokenInfo's UserID, made once), and there is none without a caller. The
// handler behind the Middleware sees the request's own headers.
func TestCallerIDFromContext(t *testing.T) {
	if id, ok := CallerIDFromContext(context.Background()); ok || id != "" {
		t.Errorf("no caller: %q, %v", id, ok)
	}
	if _, ok := CallerIDFromContext(ContextWithCaller(context.Background(), nil, "tok")); ok {
		t.Error("a nil caller has an id")
	}
	c := &Caller{Issuer: "https://idp.test", Subject: "alice"}
	if id, ok := CallerIDFromContext(ContextWithCaller(context.Background(), c, "tok")); !ok || id != c.ID() {
		t.Errorf("ContextWithCaller: %q, %v; want %q", id, ok, c.ID())
	}

	f := newVerifierFixture(t)
	tok := f.token(t, nil)
	seen := false
	h := Middleware(f.v, MiddlewareOptions{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := CallerFromContext(r.Context())
		info := sdkauth.TokenInfoFromContext(r.Context())
		id, ok := CallerIDFromContext(r.Context())
		if !ok || c == nil || info == nil || id != c.ID() || id != info.UserID {
			t.Errorf("Middleware: id %q, %v; caller %v; TokenInfo %+v", id, ok, c, info)
		}
		// The request's own headers, as sent, whatever the SDK's check
		// was shown.
		if r.Header.Get("Authorization") != "Bearer "+tok || r.Header.Get("X-Other") != "kept" || len(r.Header) != 2 {
			t.Errorf("the handler saw headers %v", r.Header)
		}
		seen = true
	}))
	r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	r.Header.Set("X-Other", "kept")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if !seen {
		t.Fatalf("refused: %d %s", w.Code, w.Body)
	}
}
