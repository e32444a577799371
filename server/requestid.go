package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The go-sdk hands its middleware a request's method, params, session and
// RequestExtra, never its JSON-RPC id (it keeps the id in the context under
// a key of its own). The one thing a transport attaches to a request that
// reaches the middleware unchanged is jsonrpc.Request.Extra, a
// *mcp.RequestExtra, and the one place in it open to a value of pdmcp's is
// its Header map. So the id travels there, under RequestIDHeader:
//
//   - over HTTP the serving edge, which reads each POST's one message
//     before the SDK does, sets it on the request's header
//     (NoteRequestID), which the SDK hands on as RequestExtra.Header;
//   - over stdio the connection the server runs on (Server.Transport)
//     sets it on each request it reads.
//
// It never comes from the client: the serving edge deletes any header of
// that name a request carries, and stdio has no headers.

// RequestIDHeader carries a request's JSON-RPC id, in its string form, from
// the transport to the MCP request's span (jsonrpc.request.id).
const RequestIDHeader = "Pdmcp-Jsonrpc-Request-Id"

// maxRequestID bounds the id a span records: a client picks its ids, and
// one longer than this is not a counter or a UUID; it is left out.
const maxRequestID = 128

// RequestIDString is id's string form: a string id as it is, a number in
// decimal, "" for a notification's (absent) id.
func RequestIDString(id jsonrpc.ID) string {
	switch v := id.Raw().(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return ""
}

// NoteRequestID sets h's RequestIDHeader to id's string form; nothing for
// a notification or an id longer than maxRequestID.
func NoteRequestID(h http.Header, id jsonrpc.ID) {
	if s := RequestIDString(id); s != "" && len(s) <= maxRequestID {
		h[RequestIDHeader] = []string{s}
	}
}

// NoteRawRequestID is NoteRequestID of a message's raw JSON id (as the
// serving edge reads it from the body): a plain integer or a string
// without escapes is taken as it is written, without decoding it; any
// other id is decoded as the SDK decodes it.
func NoteRawRequestID(h http.Header, raw []byte) {
	if s, ok := plainID(raw); ok {
		if s != "" {
			h[RequestIDHeader] = []string{s}
		}
		return
	}
	var v any
	if json.Unmarshal(raw, &v) == nil {
		if id, err := jsonrpc.MakeID(v); err == nil {
			NoteRequestID(h, id)
		}
	}
}

// plainID is the string form of a raw id that needs no decoding ("" when
// it is one a span does not record: an empty or over-long string): an
// integer of at most 15 digits (which a float64 holds exactly, as the SDK
// decodes it) without a leading zero, or a string of printable ASCII
// without escapes. ok is false for any other.
func plainID(raw []byte) (id string, ok bool) {
	if n := len(raw); n >= 2 && raw[0] == '"' && raw[n-1] == '"' {
		inner := raw[1 : n-1]
		for _, b := range inner {
			if b < 0x20 || b >= 0x7f || b == '\\' || b == '"' {
				return "", false
			}
		}
		if len(inner) > maxRequestID {
			return "", true
		}
		return string(inner), true
	}
	digits := raw
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 15 || (digits[0] == '0' && len(raw) > 1) {
		return "", false
	}
	for _, b := range digits {
		if b < '0' || b > '9' {
			return "", false
		}
	}
	return string(raw), true
}

// requestIDOf is the JSON-RPC id the transport noted for req; "" for a
// notification, or when nothing noted one (not tracing).
func requestIDOf(req mcp.Request) string {
	if ex := req.GetExtra(); ex != nil {
		if v := ex.Header[RequestIDHeader]; len(v) == 1 {
			return v[0]
		}
	}
	return ""
}

// Transport is the transport to serve t's connection on (stdio): t itself
// when the server does not trace, which costs nothing; when it does, t
// with each request's JSON-RPC id noted for its span.
//
// The SDK's stdio connection also refuses a JSON-RPC batch once a
// revision from 2025-06-18 on is negotiated, told of it through a method
// of its own that a wrapping connection cannot pass on; so while tracing,
// such a batch (which no conforming client sends) is answered instead.
func (s *Server) Transport(t mcp.Transport) mcp.Transport {
	if s.cfg.Tracer == nil {
		return t
	}
	if v, ok := t.(mcp.ProtocolVersionSupporter); ok {
		// The revisions a transport serves are passed on: server/discover
		// lists them.
		return idVersionedTransport{idTransport{t}, v}
	}
	return idTransport{t}
}

type idTransport struct{ mcp.Transport }

type idVersionedTransport struct {
	idTransport
	v mcp.ProtocolVersionSupporter
}

func (t idVersionedTransport) SupportsProtocolVersion(version string) bool {
	return t.v.SupportsProtocolVersion(version)
}

func (t idTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return idConn{c}, nil
}

// idConn notes the id of each call it reads in the call's RequestExtra.
type idConn struct{ mcp.Connection }

func (c idConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	req, ok := msg.(*jsonrpc.Request)
	if !ok || req == nil || !req.IsCall() {
		return msg, err
	}
	ex, _ := req.Extra.(*mcp.RequestExtra)
	if ex == nil {
		if req.Extra != nil {
			// Something else rides there: left alone.
			return msg, err
		}
		ex = &mcp.RequestExtra{}
		req.Extra = ex
	}
	if ex.Header == nil {
		ex.Header = http.Header{}
	}
	NoteRequestID(ex.Header, req.ID)
	return msg, err
}
