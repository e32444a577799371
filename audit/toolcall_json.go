package audit

import (
	"strconv"
	"time"
)

// appendToolCall appends the JSON object encoding/json's Encoder (HTML
// left unescaped) writes for c, its members after the opening brace, and
// the newline; ok is false, with b unchanged, for a line it leaves to
// that encoder: a string that needs escaping or a time outside years
// 0-9999. A tool call's line is the one written per call, and this costs
// a fraction of the reflection (TestAppendToolCallIsTheEncoders holds the
// two alike).
func appendToolCall(b []byte, c ToolCall) ([]byte, bool) {
	if !c.plain() {
		return b, false
	}
	b = appendStr(b, `"runId":`, c.RunID)
	b = appendStr(b, `,"grantId":`, c.GrantID)
	b = appendOmit(b, `,"actingAs":`, c.ActingAs)
	b = appendOmit(b, `,"caller":`, c.Caller)
	b = appendOmit(b, `,"jkt":`, c.JKT)
	b = appendOmit(b, `,"handleDigest":`, c.HandleDigest)
	b = appendStr(b, `,"tool":`, c.Tool)
	b = appendOmit(b, `,"documentId":`, c.DocumentID)
	b = appendOmit(b, `,"fragmentId":`, c.FragmentID)
	b = appendOmit(b, `,"stepId":`, c.StepID)
	if c.Version != 0 {
		b = strconv.AppendInt(append(b, `,"version":`...), int64(c.Version), 10)
	}
	b = appendStr(b, `,"outcome":`, c.Outcome)
	b = appendOmit(b, `,"layer":`, c.Layer)
	b = appendOmit(b, `,"code":`, c.Code)
	if c.Status != 0 {
		b = strconv.AppendInt(append(b, `,"status":`...), int64(c.Status), 10)
	}
	b = appendTime(append(b, `,"startedAt":`...), c.StartedAt)
	b = strconv.AppendInt(append(b, `,"latencyMs":`...), c.LatencyMs, 10)
	if len(c.GatewayRequests) > 0 {
		b = append(b, `,"gatewayRequests":[`...)
		for i, r := range c.GatewayRequests {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendStr(b, `{"route":`, r.Route)
			b = strconv.AppendInt(append(b, `,"status":`...), int64(r.Status), 10)
			b = appendOmit(b, `,"code":`, r.Code)
			b = strconv.AppendInt(append(b, `,"latencyMs":`...), r.LatencyMs, 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = appendBool(b, `,"serviceRelogin":true`, c.ServiceRelogin)
	b = appendBool(b, `,"sessionReplaced":true`, c.SessionReplaced)
	b = appendOmit(b, `,"path":`, c.Path)
	b = appendOmit(b, `,"plaintextSha256":`, c.PlaintextSHA256)
	b = appendBool(b, `,"minted":true`, c.Minted)
	b = appendOmit(b, `,"keyLink":`, c.KeyLink)
	if len(c.Sections) > 0 {
		b = append(b, `,"sections":[`...)
		for i, s := range c.Sections {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendStr(b, `{"id":`, s.ID)
			b = appendStr(b, `,"outcome":`, s.Outcome)
			b = appendOmit(b, `,"layer":`, s.Layer)
			b = appendOmit(b, `,"code":`, s.Code)
			b = appendTime(append(b, `,"startedAt":`...), s.StartedAt)
			b = strconv.AppendInt(append(b, `,"latencyMs":`...), s.LatencyMs, 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = appendOmit(b, `,"confirmation":`, c.Confirmation)
	if c.EntriesLeftAlone != 0 {
		b = strconv.AppendInt(append(b, `,"entriesLeftAlone":`...), int64(c.EntriesLeftAlone), 10)
	}
	b = appendOmit(b, `,"traceId":`, c.TraceID)
	b = appendOmit(b, `,"spanId":`, c.SpanID)
	return append(b, "}\n"...), true
}

// plain reports whether every string of c is written as it is (printable
// ASCII without a quote or a backslash) and every time is one
// encoding/json writes.
func (c ToolCall) plain() bool {
	for _, s := range [...]string{c.RunID, c.GrantID, c.ActingAs, c.Caller, c.JKT, c.HandleDigest, c.Tool,
		c.DocumentID, c.FragmentID, c.StepID, c.Outcome, c.Layer, c.Code, c.Path, c.PlaintextSHA256,
		c.KeyLink, c.Confirmation, c.TraceID, c.SpanID} {
		if !plainString(s) {
			return false
		}
	}
	if !plainTime(c.StartedAt) {
		return false
	}
	for _, r := range c.GatewayRequests {
		if !plainString(r.Route) || !plainString(r.Code) {
			return false
		}
	}
	for _, s := range c.Sections {
		if !plainString(s.ID) || !plainString(s.Outcome) || !plainString(s.Layer) || !plainString(s.Code) ||
			!plainTime(s.StartedAt) {
			return false
		}
	}
	return true
}

func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// plainTime: a year encoding/json writes (it refuses others).
func plainTime(t time.Time) bool { y := t.Year(); return y >= 0 && y <= 9999 }

func appendStr(b []byte, name, v string) []byte {
	return append(append(append(append(b, name...), '"'), v...), '"')
}

func appendOmit(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	return appendStr(b, name, v)
}

func appendBool(b []byte, member string, v bool) []byte {
	if !v {
		return b
	}
	return append(b, member...)
}

// appendTime is time.Time's MarshalJSON for a plainTime.
func appendTime(b []byte, t time.Time) []byte {
	return append(t.AppendFormat(append(b, '"'), time.RFC3339Nano), '"')
}
