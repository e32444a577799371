// Package noanswer words a peer that did not answer (the Gateway, the
// OpenID provider) the same way wherever it is found: what the peer is,
// the URL asked, and the reason, never "refused", which a peer that
// answered no would be. A URL here never holds a token: the callers ask
// fixed routes and discovery documents.
package noanswer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"syscall"
)

// Error is a request that got no answer from Peer at URL.
type Error struct {
	Peer string // "the Gateway", "the OpenID provider"
	URL  string
	Err  error // the transport's failure
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s at %s did not answer: %s", e.Peer, e.URL, Reason(e.Err))
}

func (e *Error) Unwrap() error { return e.Err }

// Reason is err as the end of a "did not answer" sentence: a deadline in
// words, a cancellation as such, and a transport error without the
// method and URL net/http puts before it (the sentence names the URL).
func Reason(err error) string {
	switch {
	case err == nil:
		return "no reason given"
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer in the time allowed"
	case errors.Is(err, context.Canceled):
		return "the request was cancelled before an answer came"
	case errors.Is(err, syscall.ECONNREFUSED):
		// The system's own word is "refused"; nothing there refused
		// anything: nothing listens.
		var oe *net.OpError
		if errors.As(err, &oe) && oe.Addr != nil {
			return "nothing listens at " + oe.Addr.String() + " (ECONNREFUSED)"
		}
		return "nothing listens at that address (ECONNREFUSED)"
	}
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err.Error()
	}
	return err.Error()
}
