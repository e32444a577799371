package testutil

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestBearerSetsTheHeaderOnAClone(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("Authorization")
	}))
	defer srv.Close()
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: &Bearer{Token: "tok", Base: http.DefaultTransport}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got != "Bearer tok" {
		t.Fatalf("Authorization = %q, want %q", got, "Bearer tok")
	}
	if h := req.Header.Get("Authorization"); h != "" {
		t.Fatalf("the caller's request was changed: %q", h)
	}
}
