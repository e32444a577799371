package api

import "errors"

// RefusedBeforeWork reports a call the Gateway or the key server refused
// outright, so nothing was done: an answer with a 4xx status and a code of
// its own. Anything else (a connection lost, a timeout, an unreadable
// answer, any 5xx, which includes a 504 sent after the key server did the
// work) may have come after the work was done; for an encrypt that creates
// a key, the key may exist.
func RefusedBeforeWork(err error) bool {
	var ae *Error
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.Code {
	case "", CodeUnreachable, CodeBadResponse:
		return false
	}
	return ae.Status >= 400 && ae.Status < 500
}
