package serve

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/auth"
)

// TestUserLimiterTake: the user's own limit answers 429 and is checked
// before the server's (503); what is given back frees the place, and a
// user who holds nothing is forgotten.
func TestUserLimiterTake(t *testing.T) {
	l := NewUserLimiter(UserLimits{MaxRequestsPerUser: 2, MaxRequests: 3, MaxBodyBytesPerUser: 100, MaxBodyBytes: 150,
		MaxListenStreamsPerUser: 1, MaxListenStreams: 1}, nil, nil, nil)
	for _, step := range []struct {
		user   string
		d      userLoad
		status int
		reason string
	}{
		{"carol", userLoad{requests: 1}, 0, ""},
		{"carol", userLoad{requests: 1}, 0, ""},
		{"carol", userLoad{requests: 1}, http.StatusTooManyRequests, ReasonUserRequests},
		{"alice", userLoad{requests: 1}, 0, ""},
		{"alice", userLoad{requests: 1}, http.StatusServiceUnavailable, ReasonServerRequests},
		{"carol", userLoad{bodyBytes: 100}, 0, ""},
		{"carol", userLoad{bodyBytes: 1}, http.StatusTooManyRequests, ReasonUserBodies},
		{"alice", userLoad{bodyBytes: 60}, http.StatusServiceUnavailable, ReasonServerBodies},
		{"alice", userLoad{bodyBytes: 50}, 0, ""},
		{"carol", userLoad{listens: 1}, 0, ""},
		{"carol", userLoad{listens: 1}, http.StatusTooManyRequests, ReasonUserStreams},
		{"alice", userLoad{listens: 1}, http.StatusServiceUnavailable, ReasonServerStreams},
	} {
		rf := l.take(step.user, step.d)
		if rf.status != step.status || rf.reason != step.reason {
			t.Fatalf("%s takes %+v: %d %s, want %d %s", step.user, step.d, rf.status, rf.reason, step.status, step.reason)
		}
		if rf.refused() && rf.retry < 1 {
			t.Errorf("%s refused with Retry-After %d", rf.reason, rf.retry)
		}
	}
	if got := l.Load(); got != (UserLoad{Requests: 3, BodyBytes: 150, Listens: 1, Users: 2}) {
		t.Fatalf("load %+v", got)
	}
	l.give("carol", userLoad{requests: 2, bodyBytes: 100, listens: 1})
	l.give("alice", userLoad{requests: 1, bodyBytes: 50})
	if got := l.Load(); got != (UserLoad{}) {
		t.Errorf("after everything was given back: %+v, want nothing held and no user remembered", got)
	}
	if rf := l.take("alice", userLoad{listens: 1}); rf.refused() {
		t.Errorf("alice's stream after carol's ended: %+v", rf)
	}
}

// TestUserLimitsDefaults: zero takes the default; a total left to its
// default is never below the per-user value set.
func TestUserLimitsDefaults(t *testing.T) {
	d := UserLimits{}.withDefaults()
	if d != (UserLimits{DefaultMaxRequestsPerUser, DefaultMaxRequests, DefaultMaxBodyBytesPerUser, DefaultMaxBodyBytes,
		DefaultBodyTimeout, DefaultMaxListenStreamsPerUser, DefaultMaxListenStreams}) {
		t.Errorf("defaults %+v", d)
	}
	got := UserLimits{MaxRequestsPerUser: 1000, MaxBodyBytesPerUser: 1 << 30, MaxListenStreamsPerUser: 300}.withDefaults()
	if got.MaxRequests != 1000 || got.MaxBodyBytes != 1<<30 || got.MaxListenStreams != 300 {
		t.Errorf("totals %d, %d, %d below the per-user values set", got.MaxRequests, got.MaxBodyBytes, got.MaxListenStreams)
	}
	if DefaultMaxBodyBytesPerUser < MaxRequestBytes || auth.MinBodyBytes != MaxRequestBytes {
		t.Errorf("a user's body budget must admit one body of MaxRequestBytes (%d): default %d, least settable %d",
			MaxRequestBytes, DefaultMaxBodyBytesPerUser, auth.MinBodyBytes)
	}
}

// TestListenRequest: a subscriptions/listen request is known as one
// however its member name is cased or its value escaped.
func TestListenRequest(t *testing.T) {
	for _, tc := range []struct {
		body   string
		listen bool
		id     string
	}{
		{`{"jsonrpc":"2.0","id":4,"method":"subscriptions/listen","params":{}}`, true, "4"},
		{`{"jsonrpc":"2.0","id":"a","method":"subscriptions\/listen"}`, true, `"a"`},
		{`{"jsonrpc":"2.0","id":5,"Method":"subscriptions/listen"}`, true, "5"},
		{`{"jsonrpc":"2.0","id":6,"method":"tools/list","METHOD":"subscriptions/listen"}`, true, "6"},
		{`{"jsonrpc":"2.0","id":7,"method":"tools/list"}`, false, "7"},
		{`{"jsonrpc":"2.0","id":8,"method":"subscriptions/listen/x"}`, false, "8"},
		{`[{"jsonrpc":"2.0","id":9,"method":"subscriptions/listen"}]`, false, ""},
		{`not json`, false, ""},
	} {
		id, listen := listenRequest([]byte(tc.body))
		if listen != tc.listen || string(id) != tc.id {
			t.Errorf("%s: listen %v, id %s; want %v, %s", tc.body, listen, id, tc.listen, tc.id)
		}
	}
}

// asUser puts a verified caller in every request's context, as the token
// check does.
func asUser(user string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &auth.Caller{Issuer: "https://idp.test", Subject: user}
		next.ServeHTTP(w, r.WithContext(auth.ContextWithCaller(r.Context(), c, "tok")))
	})
}

// TestBodyTimeoutOverHTTP2: over HTTP/2, where one connection carries many
// requests, a body that does not arrive in time is answered 408 on its own
// stream and gives back what it held; the request after it is served.
func TestBodyTimeoutOverHTTP2(t *testing.T) {
	l := NewUserLimiter(UserLimits{BodyTimeout: 500 * time.Millisecond}, nil, nil, nil)
	ts := httptest.NewUnstartedServer(asUser("carol", l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	}))))
	ts.EnableHTTP2 = true
	ts.StartTLS()
	defer ts.Close()
	client := ts.Client()

	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest("POST", ts.URL, pr)
	req.ContentLength = 200
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() { _, _ = pw.Write([]byte(`{"jsonrpc":`)) }() // then nothing
	resp, err := client.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("stalled body over HTTP/2: %v", err)
	}
	var m struct {
		Error struct {
			Data struct {
				Reason string `json:"reason"`
			} `json:"data"`
		} `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&m)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusRequestTimeout || m.Error.Data.Reason != ReasonBodyTimeout {
		t.Fatalf("stalled body: %s %d %+v, want HTTP/2 408 %s", resp.Proto, resp.StatusCode, m, ReasonBodyTimeout)
	}
	for range 100 {
		if l.Load() == (UserLoad{}) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := l.Load(); got != (UserLoad{}) {
		t.Fatalf("after the cut: %+v still held", got)
	}
	resp, err = client.Post(ts.URL, "application/json", strings.NewReader(`{"ok":1}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != `{"ok":1}` {
		t.Errorf("the next request: %d %s", resp.StatusCode, b)
	}
}

// TestSessionStreamsAreNotRequests: a session's GET stream is bounded by
// the session limiter, not counted in flight, so a host's open streams
// never use up its requests; any other request past the cap is refused
// without its body being read.
func TestSessionStreamsAreNotRequests(t *testing.T) {
	l := NewUserLimiter(UserLimits{MaxRequestsPerUser: 1}, nil, nil, nil)
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	ts := httptest.NewTLSServer(asUser("alice", l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	}))))
	defer ts.Close()
	defer close(release)
	client := ts.Client()
	done := make(chan int, 4)
	do := func(method string, session bool) {
		req, _ := http.NewRequest(method, ts.URL, strings.NewReader("{}"))
		if method == http.MethodGet {
			req.Body, req.ContentLength = nil, 0
		}
		if session {
			req.Header.Set(sessionHeader, "s1")
		}
		resp, err := client.Do(req)
		if err != nil {
			done <- -1
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}
	go do(http.MethodGet, true)
	go do(http.MethodPost, false)
	for range 2 {
		select {
		case <-entered:
		case got := <-done:
			t.Fatalf("a session stream beside one request: %d, want both let through", got)
		case <-time.After(time.Minute):
			t.Fatal("a session stream and one request did not both get through")
		}
	}
	go do(http.MethodPost, false)
	select {
	case got := <-done:
		if got != http.StatusTooManyRequests {
			t.Fatalf("a second request past the cap of 1: %d, want 429", got)
		}
	case <-time.After(time.Minute):
		t.Fatal("the request past the cap was not answered")
	}
}
