package operator

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
)

// clientConfig is the Config of a client acting as the service sc, logging
// each Gateway request to l (the command's logger; nil discards), so that
// an operator command's -v or --log-level debug shows what it asked.
func clientConfig(sc *gateway.ServiceConfig, l *slog.Logger) gateway.Config {
	cc := sc.ClientConfig()
	cc.Logger = l
	return cc
}

// UnansweredError is a Gateway that did not answer, worded as what it is:
// the Gateway's client reports it as a refusal ("gateway refused
// GATEWAY_UNREACHABLE"), but nothing refused anything. It wraps the error
// it words (errors.Is/As still match the api.Error).
type UnansweredError struct {
	msg string
	err error
}

func (e *UnansweredError) Error() string { return e.msg }
func (e *UnansweredError) Unwrap() error { return e.err }

// GatewayWords rewords err when the Gateway at url did not answer (no
// answer, or not one of its own): the Gateway client's "gateway refused
// GATEWAY_UNREACHABLE …" within it becomes "the Gateway at <url> did not
// answer: <reason>", hint (when not "") after the whole. Any other err is
// returned as it is.
func GatewayWords(url string, err error, hint string) error {
	var ae *api.Error
	if err == nil || !errors.As(err, &ae) || (ae.Code != api.CodeUnreachable && ae.Code != api.CodeBadResponse) {
		return err
	}
	if errors.As(err, new(*UnansweredError)) {
		return err
	}
	// In its own words: the dial error ("connect: connection refused"),
	// else the cause the client kept (a timeout), else its detail.
	reason := ae.Detail
	var oe *net.OpError
	switch {
	case errors.As(ae.Cause, &oe) && oe.Err != nil:
		reason = oe.Err.Error()
	case ae.Cause != nil:
		reason = ae.Cause.Error()
	}
	what := "did not answer"
	if ae.Code == api.CodeBadResponse {
		what = "did not answer as a Gateway does"
	}
	full := err.Error()
	if !strings.Contains(full, ae.Error()) {
		return err // worded by its wrapper already
	}
	msg := strings.Replace(full, ae.Error(), fmt.Sprintf("the Gateway at %s %s: %s", url, what, reason), 1)
	if hint != "" {
		msg += "; " + hint
	}
	return &UnansweredError{msg: msg, err: err}
}
