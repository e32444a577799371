package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/proof"
)

// ErrSessionEnded is the cause of the refusal for a call on a scoped
// session this client has already revoked; nothing is sent.
var ErrSessionEnded = errors.New("scoped session ended by this client")

// MintRequest asks for a scoped session. Exactly one of ActingAs (a
// principal inside the service's prefix) and SubjectToken (a token the
// provider issued to the Gateway's audience) is set; the Gateway refuses
// otherwise. TTL zero means api.MaxScopedTTL; it is sent in whole seconds,
// rounded up.
type MintRequest struct {
	Objects      []string
	ActingAs     string
	SubjectToken string
	TTL          time.Duration
}

// Session is a scoped session: bound to a holder key generated for it
// alone, acting as one principal, over a set of t-Tags. It is safe for
// concurrent use. Its handle never leaves it; HandleDigest names it for
// audit.
type Session struct {
	c           *Client
	handle      string
	digest      string
	actingAs    string
	systemID    int64
	principalID string
	jkt         string
	expiresAt   time.Time

	// keyMu guards the holder key against Revoke destroying it while a
	// proof is being signed.
	keyMu   sync.RWMutex
	key     *proof.Key
	revoked bool

	mu      sync.Mutex
	objects []string
}

// Mint asks the Gateway, on the service session, for a scoped session bound
// to a fresh P-256 holder key.
func (c *Client) Mint(ctx context.Context, m MintRequest) (*Session, error) {
	key, err := proof.NewKey()
	if err != nil {
		return nil, err
	}
	ttl := m.TTL
	if ttl == 0 {
		ttl = api.MaxScopedTTL
	}
	secs := int(ttl / time.Second)
	if ttl%time.Second > 0 {
		secs++
	}
	objects := m.Objects
	if objects == nil {
		objects = []string{}
	}
	req := api.ScopedRequest{Objects: objects, HolderJWK: key.PublicJWK(), TTLSeconds: secs,
		ActingAs: m.ActingAs, SubjectToken: m.SubjectToken}
	var out api.ScopedResponse
	if err := c.serviceCall(ctx, api.RouteScoped, req, &out); err != nil {
		key.Destroy()
		return nil, err
	}
	if out.Handle == "" {
		key.Destroy()
		return nil, badResponse(http.StatusOK, errors.New("scoped session answered without a handle"))
	}
	if out.JKT != key.JKT() {
		// The Gateway bound the session to some other key: our proofs
		// would never match it, so it is useless (and left to expire).
		key.Destroy()
		return nil, badResponse(http.StatusOK, errors.New("scoped session is bound to a different key than the one sent"))
	}
	s := &Session{
		c:           c,
		handle:      out.Handle,
		digest:      handleDigest(out.Handle),
		actingAs:    out.ActingAs,
		systemID:    out.SystemID,
		principalID: out.PrincipalID,
		jkt:         out.JKT,
		expiresAt:   out.ExpiresAt,
		key:         key,
		objects:     slices.Clone(out.Objects),
	}
	if err := c.checkIdentity(ctx, m, s); err != nil {
		return nil, err
	}
	c.log.LogAttrs(ctx, slog.LevelDebug, "gateway scoped session minted",
		slog.String("session", s.digest), slog.Int("objects", len(out.Objects)), slog.Time("expiresAt", out.ExpiresAt))
	return s, nil
}

// checkIdentity is the prefix check every minted session passes before it
// is used: it must act inside the service's prefix (the one config.json
// names, else the one the sign-in answered) and, when a principal was
// named, as exactly that principal. A session that fails is revoked at once
// and refused SESSION_IDENTITY_MISMATCH: a Gateway that answers another
// principal must never have this server act as someone else.
func (c *Client) checkIdentity(ctx context.Context, m MintRequest, s *Session) error {
	prefix := c.prefix
	if prefix == "" {
		prefix = c.Prefix()
	}
	var problem string
	switch {
	case prefix == "":
		problem = "no service prefix is known to check it against"
	case !strings.HasPrefix(s.actingAs, prefix) || len(s.actingAs) == len(prefix):
		problem = "it acts outside the service's prefix"
	case m.ActingAs != "" && s.actingAs != m.ActingAs:
		problem = "it acts as another principal than the one asked for"
	default:
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
	defer cancel()
	revokeErr := s.Revoke(rctx)
	c.log.LogAttrs(ctx, slog.LevelError, "gateway scoped session refused: "+problem+"; revoked unused",
		slog.String("code", api.CodeSessionIdentityMismatch), slog.String("session", s.digest),
		slog.String("prefix", prefix), slog.String("asked", m.ActingAs),
		slog.String("answered", s.actingAs), slog.Bool("revokeConfirmed", revokeErr == nil))
	return &api.Error{Layer: api.LayerAdapter, Code: api.CodeSessionIdentityMismatch, Status: http.StatusBadGateway,
		Detail: "the Gateway answered a session acting as another principal than this server asked for; " +
			"it was revoked unused and nothing was read or written; do not retry; tell the operator",
		Cause: errors.New(problem)}
}

// revokeTimeout bounds a revoke sent on the client's own initiative.
const revokeTimeout = 5 * time.Second

// handleDigest is the first 12 hex digits of sha256(handle).
func handleDigest(handle string) string {
	sum := sha256.Sum256([]byte(handle))
	return hex.EncodeToString(sum[:])[:12]
}

// ActingAs is the principal name the session acts as.
func (s *Session) ActingAs() string { return s.actingAs }

// SystemID is the acting principal's system id.
func (s *Session) SystemID() int64 { return s.systemID }

// PrincipalID is the acting principal's id.
func (s *Session) PrincipalID() string { return s.principalID }

// JKT is the thumbprint of the session's holder key.
func (s *Session) JKT() string { return s.jkt }

// ExpiresAt is when the Gateway ends the session (on its clock).
func (s *Session) ExpiresAt() time.Time { return s.expiresAt }

// HandleDigest names the session for audit without revealing its handle.
func (s *Session) HandleDigest() string { return s.digest }

// Objects are the t-Tags in the session's scope as this client knows them:
// those minted, widened to, and keys its encrypts created.
func (s *Session) Objects() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.objects)
}

// Live reports whether the session is neither revoked by this client nor
// past its expiry on the Gateway's estimated clock.
func (s *Session) Live() bool {
	s.keyMu.RLock()
	revoked := s.revoked
	s.keyMu.RUnlock()
	return !revoked && s.c.GatewayNow().Before(s.expiresAt)
}

// String names the session without its handle.
func (s *Session) String() string {
	return fmt.Sprintf("scoped session %s acting as %s", s.digest, s.actingAs)
}

// GoString is String, so that %#v prints no handle either.
func (s *Session) GoString() string { return s.String() }

// Format prints String for every verb: %d or %x of the struct would
// otherwise show its fields.
func (s *Session) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, s.String()) }

// LogValue keeps the handle and key out of structured logs.
func (s *Session) LogValue() slog.Value {
	return slog.GroupValue(slog.String("session", s.digest), slog.String("actingAs", s.actingAs))
}

// ended is the refusal for a call on a session this client revoked.
func ended() *api.Error {
	return &api.Error{Layer: api.LayerAdapter, Code: api.CodeSessionRevoked, Status: http.StatusUnauthorized,
		Detail: "this scoped session was already ended; mint a new one", Cause: ErrSessionEnded}
}

// prove signs a proof with the holder key, unless the session was revoked.
func (s *Session) prove(method, url, handle string, now time.Time) (string, error) {
	s.keyMu.RLock()
	defer s.keyMu.RUnlock()
	if s.revoked {
		return "", ended()
	}
	return s.key.Make(method, url, handle, now)
}

// proveRevoke signs the revoke request's proof, which is sent after the
// session is already marked revoked.
func (s *Session) proveRevoke(method, url, handle string, now time.Time) (string, error) {
	s.keyMu.RLock()
	defer s.keyMu.RUnlock()
	if s.key == nil {
		return "", ended()
	}
	return s.key.Make(method, url, handle, now)
}

// call sends one request on the session. A session this client revoked
// sends nothing.
func (s *Session) call(ctx context.Context, route string, body, out any) error {
	s.keyMu.RLock()
	revoked := s.revoked
	s.keyMu.RUnlock()
	if revoked {
		return ended()
	}
	return s.c.do(ctx, &request{route: route, body: body, out: out, handle: s.handle, prove: s.prove})
}

// addObjects records t-Tags that joined the scope.
func (s *Session) addObjects(tags ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range tags {
		if t != "" && !slices.Contains(s.objects, t) {
			s.objects = append(s.objects, t)
		}
	}
}

// Widen adds objects to the session's scope (the Gateway caps it at
// api.MaxObjects).
func (s *Session) Widen(ctx context.Context, objects []string) error {
	if objects == nil {
		objects = []string{}
	}
	// The answer is read leniently: if it lists the scope, that list is
	// taken; otherwise the objects asked for are added.
	var out api.ScopedResponse
	if err := s.call(ctx, api.RouteWiden, api.WidenRequest{Objects: objects}, &out); err != nil {
		return err
	}
	if len(out.Objects) > 0 {
		s.mu.Lock()
		s.objects = slices.Clone(out.Objects)
		s.mu.Unlock()
		return nil
	}
	s.addObjects(objects...)
	return nil
}

// Revoke ends the session at the Gateway and destroys its holder key. It
// is idempotent. The key is destroyed and later calls refused even when
// the Gateway cannot be told; a session the Gateway already ended counts as
// revoked.
func (s *Session) Revoke(ctx context.Context) error {
	s.keyMu.Lock()
	if s.revoked {
		s.keyMu.Unlock()
		return nil
	}
	s.revoked = true
	s.keyMu.Unlock()
	defer func() {
		s.keyMu.Lock()
		s.key.Destroy()
		s.key = nil
		s.keyMu.Unlock()
	}()
	var out api.RevokeResponse
	err := s.c.do(ctx, &request{route: api.RouteRevoke, body: struct{}{}, out: &out, handle: s.handle, prove: s.proveRevoke})
	if IsSessionGone(err) {
		return nil
	}
	return err
}

// Discard forgets a session the Gateway said it no longer knows: the
// holder key is destroyed and later calls are refused, and nothing is sent
// (there is nothing left to revoke).
func (s *Session) Discard() {
	s.keyMu.Lock()
	defer s.keyMu.Unlock()
	s.revoked = true
	if s.key != nil {
		s.key.Destroy()
		s.key = nil
	}
}

// IsSessionGone reports whether err says a scoped session can no longer be
// used: the Gateway answered SESSION_MISSING (it forgot the session, for
// example in a restart), SESSION_EXPIRED or SESSION_REVOKED (an operator
// revoked it), or this client had already ended it. A call refused so did
// nothing at the Gateway, so it is safe to repeat on a new session.
func IsSessionGone(err error) bool {
	return errors.Is(err, ErrSessionEnded) || isRefusal(err, api.CodeSessionMissing) ||
		isRefusal(err, api.CodeSessionExpired) || isRefusal(err, api.CodeSessionRevoked)
}

// EncryptInput is what to encrypt. No TTag mints a new key owned by the
// acting principal; no IV makes the encryption deterministic.
type EncryptInput struct {
	TTag      string
	IV        []byte
	Plaintext []byte
}

// EncryptResult is an encryption's outcome. Minted says the key was created
// by this call (it then joined the session's scope).
type EncryptResult struct {
	TTag       string
	IV         []byte
	Ciphertext []byte
	Minted     bool
	Link       string
}

// Encrypt encrypts under the key in.TTag, or a new key. The request's
// base64 is encoded as it is sent and the answer's ciphertext decoded as it
// arrives, so a 16 MiB plaintext costs its own size and the ciphertext's
// here: neither JSON text is ever held whole.
func (s *Session) Encrypt(ctx context.Context, in EncryptInput) (*EncryptResult, error) {
	head, err := json.Marshal(struct {
		TTag string `json:"ttag,omitempty"`
		IV   []byte `json:"iv,omitempty"`
	}{in.TTag, in.IV})
	if err != nil {
		return nil, fmt.Errorf("encode encrypt request: %w", err)
	}
	payload := func() (io.Reader, int64) { return base64FieldBody(head, "plaintext", in.Plaintext) }
	var out struct {
		TTag       string `json:"ttag"`
		IV         []byte `json:"iv"`
		Ciphertext []byte `json:"ciphertext"`
		Minted     bool   `json:"minted"`
		Link       string `json:"link"`
	}
	// AES-GCM adds its 16-byte tag.
	field := &streamedField{name: "ciphertext", sizeHint: len(in.Plaintext) + 16}
	if err := s.callRaw(ctx, api.RouteEncrypt, payload, field, &out); err != nil {
		return nil, err
	}
	if field.seen {
		out.Ciphertext = field.data
	}
	if out.TTag == "" || (in.TTag != "" && out.TTag != in.TTag) {
		return nil, badResponse(http.StatusOK, errors.New("encrypt answered another key than the one asked for"))
	}
	if out.Minted {
		s.addObjects(out.TTag)
	}
	return &EncryptResult{TTag: out.TTag, IV: out.IV, Ciphertext: out.Ciphertext, Minted: out.Minted, Link: out.Link}, nil
}

// base64FieldBody returns the JSON object head (a marshalled object) with
// one more string field whose value is data's standard base64, as a reader
// that encodes it while it is read, and the body's length.
func base64FieldBody(head []byte, name string, data []byte) (io.Reader, int64) {
	prefix := make([]byte, 0, len(head)+len(name)+5)
	prefix = append(prefix, head[:len(head)-1]...) // without its closing brace
	if len(head) > 2 {
		prefix = append(prefix, ',')
	}
	prefix = append(prefix, '"')
	prefix = append(prefix, name...)
	prefix = append(prefix, `":"`...)
	const suffix = `"}`
	n := int64(len(prefix)) + int64(base64.StdEncoding.EncodedLen(len(data))) + int64(len(suffix))
	return io.MultiReader(bytes.NewReader(prefix), &base64Reader{src: data}, strings.NewReader(suffix)), n
}

// base64Reader reads as the standard base64 of src, encoding as it goes.
type base64Reader struct {
	src  []byte
	pend []byte // encoded but not yet read: at most one quantum
	quad [4]byte
}

func (r *base64Reader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if len(r.pend) > 0 {
			c := copy(p[n:], r.pend)
			r.pend = r.pend[c:]
			n += c
			continue
		}
		if len(r.src) == 0 {
			break
		}
		// Whole groups of 3 bytes straight into p; a partial group only
		// at the end of src, where its padding belongs.
		k := min((len(p)-n)/4*3, len(r.src))
		if k == 0 {
			// Less than one quantum's room: encode one aside.
			k = min(3, len(r.src))
			base64.StdEncoding.Encode(r.quad[:], r.src[:k])
			r.pend = r.quad[:]
			r.src = r.src[k:]
			continue
		}
		base64.StdEncoding.Encode(p[n:], r.src[:k])
		n += base64.StdEncoding.EncodedLen(k)
		r.src = r.src[k:]
	}
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

// callRaw is call with a body already encoded.
func (s *Session) callRaw(ctx context.Context, route string, payload func() (io.Reader, int64), field *streamedField,
	out any) error {
	s.keyMu.RLock()
	revoked := s.revoked
	s.keyMu.RUnlock()
	if revoked {
		return ended()
	}
	return s.c.do(ctx, &request{route: route, raw: payload, field: field, out: out, handle: s.handle, prove: s.prove})
}

// DecryptResult is a decryption's outcome: the plaintext and the key's
// hidden link.
type DecryptResult struct {
	Plaintext []byte
	Link      string
}

// Decrypt decrypts ciphertext under the key ttag with iv.
func (s *Session) Decrypt(ctx context.Context, ttag string, iv, ciphertext []byte) ([]byte, error) {
	r, err := s.DecryptWithLink(ctx, ttag, iv, ciphertext)
	if err != nil {
		return nil, err
	}
	return r.Plaintext, nil
}

// DecryptWithLink is Decrypt that also returns the key's hidden link. Like
// Encrypt, it encodes the ciphertext as it is sent and decodes the
// plaintext as it arrives.
func (s *Session) DecryptWithLink(ctx context.Context, ttag string, iv, ciphertext []byte) (*DecryptResult, error) {
	head, err := json.Marshal(struct {
		TTag string `json:"ttag"`
		IV   []byte `json:"iv"`
	}{ttag, iv})
	if err != nil {
		return nil, fmt.Errorf("encode decrypt request: %w", err)
	}
	payload := func() (io.Reader, int64) { return base64FieldBody(head, "ciphertext", ciphertext) }
	var out struct {
		Plaintext []byte `json:"plaintext"`
		Link      string `json:"link"`
	}
	field := &streamedField{name: "plaintext", sizeHint: len(ciphertext) - 16}
	if err := s.callRaw(ctx, api.RouteDecrypt, payload, field, &out); err != nil {
		return nil, err
	}
	if field.seen {
		out.Plaintext = field.data
	}
	if out.Plaintext == nil {
		out.Plaintext = []byte{}
	}
	return &DecryptResult{Plaintext: out.Plaintext, Link: out.Link}, nil
}

// ACLGet lists the key's access control entries.
func (s *Session) ACLGet(ctx context.Context, ttag string) ([]api.ACLEntry, error) {
	var out api.ACLGetResponse
	if err := s.call(ctx, api.RouteACLGet, api.TTagRequest{TTag: ttag}, &out); err != nil {
		return nil, err
	}
	return out.Entries, nil
}

// ACLGrant adds an entry to a key's access control list.
func (s *Session) ACLGrant(ctx context.Context, g api.ACLGrantRequest) error {
	var out api.OKResponse
	return s.call(ctx, api.RouteACLGrant, g, &out)
}

// ACLUpdate replaces an existing entry.
func (s *Session) ACLUpdate(ctx context.Context, g api.ACLGrantRequest) error {
	var out api.OKResponse
	return s.call(ctx, api.RouteACLUpdate, g, &out)
}

// ACLRevoke removes an entry.
func (s *Session) ACLRevoke(ctx context.Context, r api.ACLRevokeRequest) error {
	var out api.OKResponse
	return s.call(ctx, api.RouteACLRevoke, r, &out)
}

// ExpireKey expires a key for good (owner only).
func (s *Session) ExpireKey(ctx context.Context, ttag string) error {
	var out api.OKResponse
	return s.call(ctx, api.RouteKeyExpire, api.TTagRequest{TTag: ttag}, &out)
}

// RemoveKey deletes a key and its access control list (owner only).
func (s *Session) RemoveKey(ctx context.Context, ttag string) error {
	var out api.OKResponse
	return s.call(ctx, api.RouteKeyRemove, api.TTagRequest{TTag: ttag}, &out)
}
