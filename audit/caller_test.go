package audit

import (
	"strings"
	"testing"
	"time"
)

// TestClientAndAuthRefusedCallerIsADigest: the caller of a client or
// auth-refused line is Digest12 of the user id; a value of any other
// shape (the id itself, issuer|subject) is dropped, not written.
func TestClientAndAuthRefusedCallerIsADigest(t *testing.T) {
	id := "https://idp.example|alice"
	d := Digest12(id)
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		line    Line
		dropped bool
	}{
		{Client{RunID: "r", Caller: d}, false},
		{Client{RunID: "r", Caller: id}, true},
		{AuthRefused{Class: "session-user-mismatch", Reason: "SESSION_USER_MISMATCH", Caller: d}, false},
		{AuthRefused{Class: "session-user-mismatch", Reason: "SESSION_USER_MISMATCH", Caller: id}, true},
	} {
		_, dropped := tc.line.prepare(now)
		got := strings.Join(dropped, ",")
		if tc.dropped != (got == "caller") || (!tc.dropped && got != "") {
			t.Errorf("%T with caller %q: dropped %q", tc.line, callerOf(tc.line), got)
		}
	}
}

func callerOf(l Line) string {
	switch l := l.(type) {
	case Client:
		return l.Caller
	case AuthRefused:
		return l.Caller
	}
	return ""
}
