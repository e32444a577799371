package audit

import (
	"cmp"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// RefusalWindow is how long the refusals of one kind are counted after the
// one that got its own line. A request refused before its token is even
// read costs the sender next to nothing; written one line each, a flood
// from one connection added megabytes a minute to the file and a warning
// per request to the log. Counted, it costs at most two lines a second per
// kind, whatever the rate.
const RefusalWindow = time.Second

// maxRefusalKinds bounds the kinds counted at once. A kind names a caller
// only after their token was accepted (session-user-mismatch), so only
// signed-in users can add kinds; past the bound a new caller's refusals are
// counted without their name.
const maxRefusalKinds = 256

// refusalKind is what refusals are counted by: nothing in it comes from
// the request as sent (the class, reason and status are the server's own
// words; the caller is the digest of a verified user).
type refusalKind struct {
	class, reason string
	status        int
	caller        string
}

// tally is one kind's open window.
type tally struct {
	opened      time.Time // the time of the refusal that got its own line
	count       int       // refusals counted since, without lines of their own
	first, last time.Time // the first and last of those
}

// refusalTally is a Log's state for Refused. Its mutex is held while lines
// are written, so a kind's summary always comes ahead of its next line.
type refusalTally struct {
	mu      sync.Mutex
	open    map[refusalKind]*tally
	timer   *time.Timer
	stopped bool // Close ran: write everything at once
}

// Refused records one refused request and reports whether it was written
// as its own line. The first refusal of a kind (class, reason, status and
// caller) gets its own AuthRefused line; the rest within RefusalWindow of
// it are only counted, and written as one RefusalSummary line when the
// window ends (on the next refusal of any kind, by a timer, or at Close and
// at the Shutdown line), with a WARN on the Log's logger. A caller that
// logs each refusal itself should do so only when own is true: the summary
// speaks for the rest. On a nil Log every refusal is its own (and nothing
// is written).
func (l *Log) Refused(line AuthRefused) (own bool, err error) {
	if l == nil {
		return true, nil
	}
	r := &l.refusals
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return true, l.write(line)
	}
	now := l.clock()
	errs := l.writeSummaries(now, false)
	k := refusalKind{class: line.Class, reason: line.Reason, status: line.Status, caller: line.Caller}
	t := r.open[k]
	if t == nil && len(r.open) >= maxRefusalKinds {
		k.caller = ""
		t = r.open[k]
	}
	if t != nil {
		if t.count == 0 {
			t.first = now
		}
		t.count++
		t.last = now
		return false, errors.Join(errs...)
	}
	if r.open == nil {
		r.open = make(map[refusalKind]*tally)
	}
	r.open[k] = &tally{opened: now}
	l.armRefusalTimer(RefusalWindow)
	return true, errors.Join(append(errs, l.write(line))...)
}

// armRefusalTimer makes sure a timer will write the summaries of windows
// that end with no refusal after them. Called with refusals.mu held.
func (l *Log) armRefusalTimer(d time.Duration) {
	r := &l.refusals
	if r.timer != nil || r.stopped {
		return
	}
	r.timer = time.AfterFunc(d, l.refusalTimerFired)
}

func (l *Log) refusalTimerFired() {
	r := &l.refusals
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timer = nil
	if r.stopped {
		return
	}
	now := l.clock()
	l.logWriteErrors(l.writeSummaries(now, false))
	// Wake again when the next open window ends.
	var next time.Time
	for _, t := range r.open {
		if end := t.opened.Add(RefusalWindow); next.IsZero() || end.Before(next) {
			next = end
		}
	}
	if !next.IsZero() {
		l.armRefusalTimer(max(next.Sub(now), time.Millisecond))
	}
}

// flushRefusals writes the summaries of ended windows, or of every window
// when all is set.
func (l *Log) flushRefusals(all bool) {
	r := &l.refusals
	r.mu.Lock()
	defer r.mu.Unlock()
	l.logWriteErrors(l.writeSummaries(l.clock(), all))
}

// stopRefusals writes every window's summary and stops the timer: what
// is refused after this gets its own line.
func (l *Log) stopRefusals() {
	r := &l.refusals
	r.mu.Lock()
	defer r.mu.Unlock()
	l.logWriteErrors(l.writeSummaries(l.clock(), true))
	r.stopped = true
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
}

// writeSummaries closes the windows that have ended by now (all of them
// when all is set), oldest first, writing a summary for each that counted
// something. Called with refusals.mu held.
func (l *Log) writeSummaries(now time.Time, all bool) []error {
	r := &l.refusals
	type ended struct {
		k refusalKind
		t *tally
	}
	var done []ended
	for k, t := range r.open {
		if all || !now.Before(t.opened.Add(RefusalWindow)) {
			done = append(done, ended{k, t})
		}
	}
	if len(done) == 0 {
		return nil
	}
	slices.SortFunc(done, func(a, b ended) int {
		return cmp.Or(a.t.opened.Compare(b.t.opened), cmp.Compare(a.k.class, b.k.class),
			cmp.Compare(a.k.reason, b.k.reason), cmp.Compare(a.k.status, b.k.status), cmp.Compare(a.k.caller, b.k.caller))
	})
	var errs []error
	for _, e := range done {
		delete(r.open, e.k)
		if e.t.count == 0 {
			continue
		}
		s := RefusalSummary{Class: e.k.class, Reason: e.k.reason, Status: e.k.status, Caller: e.k.caller,
			Count: e.t.count, First: e.t.first, Last: e.t.last}
		args := []any{"event", EventRefusalSummary, "class", s.Class, "reason", s.Reason, "status", s.Status,
			"count", s.Count, "first", s.First.UTC(), "last", s.Last.UTC()}
		if s.Caller != "" {
			args = append(args, "caller", s.Caller)
		}
		l.slogger().Warn("requests refused (summary)", args...)
		if err := l.write(s); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func (l *Log) logWriteErrors(errs []error) {
	for _, err := range errs {
		l.slogger().Error("audit write failed", "event", EventRefusalSummary, "err", err)
	}
}

// slogger is the Log's logger; slog.Default() for a Log not made by Open
// or Discard.
func (l *Log) slogger() *slog.Logger {
	if l.logger == nil {
		return slog.Default()
	}
	return l.logger
}
