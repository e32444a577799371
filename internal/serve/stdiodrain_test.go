package serve

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestIDKey(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{`1`, `1`, true},
		{`1`, `1.0`, true},
		{`1`, `"1"`, false},
		{`"a"`, `"a"`, true},
	} {
		ka, oka := idKey([]byte(tc.a))
		kb, okb := idKey([]byte(tc.b))
		if !oka || !okb || (ka == kb) != tc.same {
			t.Errorf("idKey(%s)=%q, idKey(%s)=%q; same=%v wanted", tc.a, ka, tc.b, kb, tc.same)
		}
	}
	for _, raw := range []string{``, `null`, `{`} {
		if _, ok := idKey([]byte(raw)); ok {
			t.Errorf("idKey(%q) is an id", raw)
		}
	}
}

// newDrain is a drainReader over input whose answers are written to w.
func newDrain(input string, wait time.Duration, logs io.Writer) (*drainReader, *trackWriter, *bytes.Buffer) {
	p := &pendingCalls{ids: map[string]struct{}{}, changed: make(chan struct{}), closed: make(chan struct{})}
	r := &drainReader{in: io.NopCloser(strings.NewReader(input)), p: p, wait: wait,
		logger: slog.New(slog.NewTextHandler(logs, nil)), lines: lineSplitter{onLine: p.readLine}}
	var out bytes.Buffer
	return r, &trackWriter{out: &out, lines: lineSplitter{onLine: p.wroteLine}}, &out
}

// The end of input is held back until each request read (a batch's too)
// is answered; notifications and a response from the client need none.
func TestDrainReaderHoldsEOFUntilAnswered(t *testing.T) {
	input := `{"jsonrpc":"2.0","id":1,"method":"a"}` + "\n" +
		`[{"jsonrpc":"2.0","id":"b","method":"b"},{"jsonrpc":"2.0","method":"note"}]` + "\n" +
		`{"jsonrpc":"2.0","id":9,"result":{}}` + "\n" +
		`{"jsonrpc":"2.0","id":3,"method":"c"}` + "\n"
	r, w, _ := newDrain(input, time.Minute, io.Discard)
	if _, err := io.ReadAll(io.LimitReader(r, int64(len(input)))); err != nil {
		t.Fatal(err)
	}
	eof := make(chan error, 1)
	go func() { _, err := r.Read(make([]byte, 10)); eof <- err }()
	for _, answer := range []string{`{"jsonrpc":"2.0","id":1,"result":{}}`, `[{"jsonrpc":"2.0","id":"b","result":{}}]`} {
		if _, err := w.Write([]byte(answer + "\n")); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-eof:
			t.Fatalf("end of input (%v) passed on with request 3 unanswered", err)
		default:
		}
	}
	if _, err := w.Write([]byte(`{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"x"}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-eof:
		if err != io.EOF {
			t.Fatalf("after every answer: %v, want io.EOF", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("end of input held back after every request was answered")
	}
}

// The wait is bounded (and logged), and Close ends it.
func TestDrainReaderWaitIsBounded(t *testing.T) {
	var logs bytes.Buffer
	r, _, _ := newDrain(`{"jsonrpc":"2.0","id":1,"method":"a"}`+"\n", 10*time.Millisecond, &logs)
	if _, err := io.ReadAll(r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "unanswered=1") {
		t.Fatalf("no WARN for the unanswered request: %s", logs.String())
	}
	r, _, _ = newDrain(`{"jsonrpc":"2.0","id":1,"method":"a"}`+"\n", time.Hour, io.Discard)
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(r); done <- err }()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not end the wait")
	}
}
