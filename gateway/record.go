package gateway

import (
	"context"
	"sync"
	"time"
)

// Request is what a Recorder keeps of one request sent to the Gateway:
// never its body, handle or proof.
type Request struct {
	Route   string        // the api route, e.g. api.RouteDecrypt
	Status  int           // the HTTP status; 0 when no answer came
	Code    string        // the refusal code; "" on success
	Latency time.Duration // from sending to the answer read
	// ServiceRelogin is set on the sign-in the client made because the
	// service session had run out, and on the request sent again after it.
	ServiceRelogin bool
}

// Recorder collects the requests made under a context (see WithRecorder).
// It is safe for concurrent use.
type Recorder struct {
	mu   sync.Mutex
	reqs []Request
}

// Requests returns a copy of what was recorded, in the order sent.
func (r *Recorder) Requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Request(nil), r.reqs...)
}

// ServiceRelogin reports whether any recorded request was part of a
// service re-sign-in.
func (r *Recorder) ServiceRelogin() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, q := range r.reqs {
		if q.ServiceRelogin {
			return true
		}
	}
	return false
}

func (r *Recorder) add(q Request) {
	r.mu.Lock()
	r.reqs = append(r.reqs, q)
	r.mu.Unlock()
}

type recorderKey struct{}

// WithRecorder returns a context under which every request the client sends
// is appended to rec, so that a tool call can report the Gateway requests it
// made (and a test can prove none was made).
func WithRecorder(ctx context.Context, rec *Recorder) context.Context {
	return context.WithValue(ctx, recorderKey{}, rec)
}

func recorderFrom(ctx context.Context) *Recorder {
	rec, _ := ctx.Value(recorderKey{}).(*Recorder)
	return rec
}
