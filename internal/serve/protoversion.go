package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/pdmcp/pdmcp/server"
)

// codeUnsupportedProtocolVersion is the JSON-RPC error code protocol
// 2026-07-28 names for a request whose revision the server does not serve
// (SEP-2575, UnsupportedProtocolVersionError).
const codeUnsupportedProtocolVersion = -32022

// maxEchoedVersion bounds how much of a requested revision a refusal
// repeats back: the header is the client's, of any length.
const maxEchoedVersion = 64

// unsupportedVersion reports the revision a request asks for that this
// server does not serve, and why, or "" when it asks for one it serves (or
// names none: an initialize picks its revision in its body).
//
// The SDK refuses an unknown Mcp-Protocol-Version header only when it sorts
// before 2026-07-28, and then in plain text, which a client that speaks
// both eras takes for a server of the old era only; one sorting after it
// (a later date, or no date at all) without per-request metadata is
// answered as a malformed modern request. A request that names a handshake
// revision in its _meta is refused by the SDK with a list that holds that
// very revision, which would have the client retry the same request.
// Every one of these is the same refusal under 2026-07-28: the revision is
// not served that way, here is what is.
func unsupportedVersion(h http.Header, msg []byte, supported []string) (requested, why string) {
	if len(msg) == 0 {
		return unsupportedVersionOf(h, "", false, supported)
	}
	var m struct {
		Params struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		} `json:"params"`
	}
	var meta string
	if json.Unmarshal(msg, &m) == nil {
		if raw, ok := m.Params.Meta[metaProtocolVersion]; ok && json.Unmarshal(raw, &meta) != nil {
			meta = ""
		}
	}
	return unsupportedVersionOf(h, meta, true, supported)
}

// unsupportedVersionOf is unsupportedVersion given the revision the
// message's _meta names ("" for none); hasBody false is a request with no
// message.
func unsupportedVersionOf(h http.Header, meta string, hasBody bool, supported []string) (requested, why string) {
	header := h.Get("Mcp-Protocol-Version")
	if header != "" && !slices.Contains(supported, header) {
		return header, fmt.Sprintf("unsupported protocol version: this server serves %v; retry with one of them", supported)
	}
	if !hasBody || meta == "" {
		return "", ""
	}
	switch {
	case !slices.Contains(supported, meta):
		return meta, fmt.Sprintf("unsupported protocol version: this server serves %v; retry with one of them", supported)
	case meta < server.NewestProtocol:
		return meta, fmt.Sprintf("protocol %s is a revision with an initialize handshake and is not named per request: "+
			"send initialize for it, or name %s per request", meta, server.NewestProtocol)
	}
	return "", ""
}

// writeUnsupportedVersion answers 400 with UnsupportedProtocolVersionError
// for the message with the given id (null when nil), listing the
// revisions served, newest first.
func writeUnsupportedVersion(w http.ResponseWriter, id json.RawMessage, requested, why string, supported []string) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	if len(requested) > maxEchoedVersion {
		requested = requested[:maxEchoedVersion]
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": id,
		"error": map[string]any{"code": codeUnsupportedProtocolVersion, "message": why,
			"data": map[string]any{"supported": supported, "requested": requested}}})
}

// messageID is a JSON-RPC message's id, or nil when it has none or is not
// one.
func messageID(msg []byte) json.RawMessage {
	var m struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(msg, &m) != nil {
		return nil
	}
	return m.ID
}
