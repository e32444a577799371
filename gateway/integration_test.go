package gateway_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
)

// world is a reference Gateway with one registered service, an owner and a
// reader, and one key the owner minted and granted READ on to the reader.
type world struct {
	env           *reftest.Env
	svc           *gateway.ServiceConfig
	c             *gateway.Client
	owner, reader *api.Principal
	ownerSess     *gateway.Session
	ttag          string
	iv, ct        []byte
	plaintext     []byte
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx := context.Background()
	w := &world{env: reftest.Start(t, reference.Config{})}
	w.svc = w.env.Service(t, "svc", true)
	w.c = w.env.ServiceClient(t, w.svc)
	w.owner = reftest.Principal(t, w.c, w.svc.Prefix+"owner")
	w.reader = reftest.Principal(t, w.c, w.svc.Prefix+"reader")
	s, err := w.c.Mint(ctx, gateway.MintRequest{ActingAs: w.owner.Name, TTL: time.Minute})
	if err != nil {
		t.Fatalf("owner session: %v", err)
	}
	w.ownerSess = s
	w.plaintext = []byte("supplier proposal: synthetic text")
	enc, err := s.Encrypt(ctx, gateway.EncryptInput{IV: bytes.Repeat([]byte{7}, 16), Plaintext: w.plaintext})
	if err != nil {
		t.Fatalf("mint key: %v", err)
	}
	if !enc.Minted || enc.TTag == "" {
		t.Fatalf("encrypt without ttag did not mint: %+v", enc)
	}
	w.ttag, w.iv, w.ct = enc.TTag, enc.IV, enc.Ciphertext
	w.grant(t, w.reader, api.RightRead)
	return w
}

func (w *world) grant(t *testing.T, p *api.Principal, rights ...string) {
	t.Helper()
	err := w.ownerSess.ACLGrant(context.Background(), api.ACLGrantRequest{TTag: w.ttag, SystemID: p.SystemID,
		PrincipalID: p.PrincipalID, Rights: rights})
	if err != nil {
		t.Fatalf("grant %v to %s: %v", rights, p.Name, err)
	}
}

func (w *world) session(t *testing.T, who string, objects ...string) *gateway.Session {
	t.Helper()
	s, err := w.c.Mint(context.Background(), gateway.MintRequest{ActingAs: who, Objects: objects, TTL: time.Minute})
	if err != nil {
		t.Fatalf("mint for %s: %v", who, err)
	}
	return s
}

// wantRefusal asserts err is the Gateway's refusal with this layer, code
// and status.
func wantRefusal(t *testing.T, err error, layer, code string, status int) {
	t.Helper()
	var ae *api.Error
	if !errors.As(err, &ae) {
		t.Fatalf("got %v, want %s %s %d", err, layer, code, status)
	}
	if ae.Layer != layer || ae.Code != code || ae.Status != status {
		t.Fatalf("got %s %s %d (%s), want %s %s %d", ae.Layer, ae.Code, ae.Status, ae.Detail, layer, code, status)
	}
	if ae.Detail == "" {
		t.Errorf("refusal %s has no detail sentence", code)
	}
}

func TestReaderDecryptsAndMayEncryptUnderTheKey(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	s := w.session(t, w.reader.Name, w.ttag)
	got, err := s.Decrypt(ctx, w.ttag, w.iv, w.ct)
	if err != nil || !bytes.Equal(got, w.plaintext) {
		t.Fatalf("decrypt = %q, %v", got, err)
	}
	enc, err := s.Encrypt(ctx, gateway.EncryptInput{TTag: w.ttag, IV: bytes.Repeat([]byte{1}, 16), Plaintext: []byte("result")})
	if err != nil || enc.Minted {
		t.Fatalf("READ holder encrypt under the key: %+v, %v", enc, err)
	}
	if s.JKT() == "" || s.ActingAs() != w.reader.Name || len(s.HandleDigest()) != 12 {
		t.Errorf("session identity: jkt=%q actingAs=%q digest=%q", s.JKT(), s.ActingAs(), s.HandleDigest())
	}
	other := w.session(t, w.reader.Name, w.ttag)
	if other.JKT() == s.JKT() {
		t.Error("two sessions share a holder key")
	}
}

func TestRefusalsThroughTheClient(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()

	t.Run("OBJECT_NOT_IN_CREDENTIAL_SCOPE writes no key-server row", func(t *testing.T) {
		s := w.session(t, w.reader.Name) // empty scope
		before, err := w.env.Gateway.KeyServerAudit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Decrypt(ctx, w.ttag, w.iv, w.ct)
		wantRefusal(t, err, api.LayerGateway, api.CodeObjectNotInScope, 403)
		after, _ := w.env.Gateway.KeyServerAudit(ctx)
		if len(after) != len(before) {
			t.Fatalf("key server audit grew from %d to %d rows for an out-of-scope request", len(before), len(after))
		}
	})
	t.Run("ACL_DENIED without an entry, with a FAILED audit row", func(t *testing.T) {
		stranger := reftest.Principal(t, w.c, w.svc.Prefix+"stranger")
		s := w.session(t, stranger.Name, w.ttag)
		_, err := s.Decrypt(ctx, w.ttag, w.iv, w.ct)
		wantRefusal(t, err, api.LayerKeyServer, api.CodeACLDenied, 403)
		rows, _ := w.env.Gateway.KeyServerAudit(ctx)
		last := rows[len(rows)-1]
		if last.Outcome != "FAILED" || last.Code != api.CodeACLDenied {
			t.Errorf("last key-server row %+v", last)
		}
	})
	t.Run("ACCESS_DENIED for a principal without the DECRYPT role", func(t *testing.T) {
		p := reftest.Principal(t, w.c, w.svc.Prefix+"noroles", api.RoleEncrypt)
		w.grant(t, p, api.RightRead)
		s := w.session(t, p.Name, w.ttag)
		_, err := s.Decrypt(ctx, w.ttag, w.iv, w.ct)
		wantRefusal(t, err, api.LayerKeyServer, api.CodeAccessDenied, 403)
	})
	t.Run("SCOPE_TOO_WIDE at 65 objects, 64 accepted", func(t *testing.T) {
		objs := make([]string, 65)
		for i := range objs {
			objs[i] = fmt.Sprintf("tag-%02d", i)
		}
		_, err := w.c.Mint(ctx, gateway.MintRequest{ActingAs: w.reader.Name, Objects: objs, TTL: time.Minute})
		wantRefusal(t, err, api.LayerGateway, api.CodeScopeTooWide, 400)
		s, err := w.c.Mint(ctx, gateway.MintRequest{ActingAs: w.reader.Name, Objects: objs[:64], TTL: time.Minute})
		if err != nil || len(s.Objects()) != 64 {
			t.Fatalf("64 objects: %v", err)
		}
	})
	t.Run("SCOPED_NOT_ALLOWED for a service registered without it", func(t *testing.T) {
		plain := w.env.Service(t, "plain", false)
		c := w.env.ServiceClient(t, plain)
		p := reftest.Principal(t, c, plain.Prefix+"u")
		_, err := c.Mint(ctx, gateway.MintRequest{ActingAs: p.Name, TTL: time.Minute})
		wantRefusal(t, err, api.LayerGateway, api.CodeScopedNotAllowed, 403)
	})
	t.Run("a READ holder cannot grant", func(t *testing.T) {
		s := w.session(t, w.reader.Name, w.ttag)
		err := s.ACLGrant(ctx, api.ACLGrantRequest{TTag: w.ttag, SystemID: w.owner.SystemID,
			PrincipalID: w.owner.PrincipalID, Rights: []string{api.RightRead}})
		wantRefusal(t, err, api.LayerKeyServer, api.CodeACLDenied, 403)
		var ae *api.Error
		errors.As(err, &ae)
		if !bytes.Contains([]byte(ae.Detail), []byte("does not have write privilege")) {
			t.Errorf("detail %q", ae.Detail)
		}
	})
	t.Run("SESSION_REVOKED after this client revoked it, nothing sent", func(t *testing.T) {
		s := w.session(t, w.reader.Name, w.ttag)
		if err := s.Revoke(ctx); err != nil {
			t.Fatal(err)
		}
		decrypts := w.env.Gateway.Count(api.RouteDecrypt)
		_, err := s.Decrypt(ctx, w.ttag, w.iv, w.ct)
		wantRefusal(t, err, api.LayerAdapter, api.CodeSessionRevoked, 401)
		if !errors.Is(err, gateway.ErrSessionEnded) || !gateway.IsSessionGone(err) {
			t.Errorf("refusal %v does not wrap ErrSessionEnded", err)
		}
		if w.env.Gateway.Count(api.RouteDecrypt) != decrypts {
			t.Error("a call on a session this client revoked was sent")
		}
	})
	t.Run("SESSION_REVOKED after the Gateway's administrator revoked it", func(t *testing.T) {
		s := w.session(t, w.reader.Name, w.ttag)
		n, err := w.env.Client(t).Admin(reftest.AdminUser, reftest.AdminPassword).RevokeSessions(ctx, w.reader.Name)
		if err != nil || n < 1 { // the reader's earlier subtests' sessions too
			t.Fatalf("admin revoke: %d, %v", n, err)
		}
		decrypts := w.env.Gateway.Count(api.RouteDecrypt)
		_, err = s.Decrypt(ctx, w.ttag, w.iv, w.ct)
		wantRefusal(t, err, api.LayerGateway, api.CodeSessionRevoked, 401)
		if !gateway.IsSessionGone(err) {
			t.Errorf("IsSessionGone(%v) is false", err)
		}
		if w.env.Gateway.Count(api.RouteDecrypt) != decrypts+1 {
			t.Error("the Gateway's refusal was not the Gateway's")
		}
		// The owner's session, acting as someone else, is untouched.
		if _, err := w.ownerSess.Decrypt(ctx, w.ttag, w.iv, w.ct); err != nil {
			t.Fatalf("owner after the reader's revoke: %v", err)
		}
	})
}

func TestRevokedEntryIsRefusedOnTheHeldHandle(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	s := w.session(t, w.reader.Name, w.ttag)
	if _, err := s.Decrypt(ctx, w.ttag, w.iv, w.ct); err != nil {
		t.Fatal(err)
	}
	err := w.ownerSess.ACLRevoke(ctx, api.ACLRevokeRequest{TTag: w.ttag, SystemID: w.reader.SystemID, PrincipalID: w.reader.PrincipalID})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Decrypt(ctx, w.ttag, w.iv, w.ct)
	wantRefusal(t, err, api.LayerKeyServer, api.CodeACLDenied, 403)
}

func TestExpireThenRemove(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	s := w.session(t, w.reader.Name, w.ttag)
	if err := w.ownerSess.ExpireKey(ctx, w.ttag); err != nil {
		t.Fatal(err)
	}
	_, err := s.Decrypt(ctx, w.ttag, w.iv, w.ct)
	wantRefusal(t, err, api.LayerKeyServer, api.CodeKeyExpired, 410)
	_, err = w.ownerSess.Decrypt(ctx, w.ttag, w.iv, w.ct)
	wantRefusal(t, err, api.LayerKeyServer, api.CodeKeyExpired, 410)
	if err := w.ownerSess.RemoveKey(ctx, w.ttag); err != nil {
		t.Fatal(err)
	}
	_, err = s.Decrypt(ctx, w.ttag, w.iv, w.ct)
	wantRefusal(t, err, api.LayerKeyServer, api.CodeKeyNotFound, 404)
	_, err = w.ownerSess.ACLGet(ctx, w.ttag)
	wantRefusal(t, err, api.LayerKeyServer, api.CodeKeyNotFound, 404)
}

func TestDeterministicWithoutIV(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	enc := func(iv []byte) []byte {
		r, err := w.ownerSess.Encrypt(ctx, gateway.EncryptInput{TTag: w.ttag, IV: iv, Plaintext: []byte("same text")})
		if err != nil {
			t.Fatal(err)
		}
		return r.Ciphertext
	}
	if a, b := enc(nil), enc(nil); !bytes.Equal(a, b) {
		t.Error("encrypt without IV is not deterministic")
	}
	if a, b := enc(bytes.Repeat([]byte{1}, 16)), enc(bytes.Repeat([]byte{2}, 16)); bytes.Equal(a, b) {
		t.Error("different IVs gave the same ciphertext")
	}
}

func TestSizeLimit(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	// 16 MiB each way under -race on two loaded cores can overrun the
	// default 30 s request bound and a one-minute session (five minutes is
	// the Gateway's longest); this test is about the size limit, not
	// about either.
	cc := w.svc.ClientConfig()
	cc.BaseURL, cc.TrustFile, cc.Timeout = w.env.URL, w.env.CAFile, 5*time.Minute
	c, err := gateway.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Mint(ctx, gateway.MintRequest{ActingAs: w.owner.Name, Objects: []string{w.ttag}, TTL: 5 * time.Minute})
	if err != nil {
		t.Fatalf("owner session: %v", err)
	}
	big := bytes.Repeat([]byte{'x'}, api.MaxDataBytes+1)
	_, err = s.Encrypt(ctx, gateway.EncryptInput{TTag: w.ttag, IV: w.iv, Plaintext: big})
	wantRefusal(t, err, api.LayerGateway, api.CodeBadRequest, 400)
	enc, err := s.Encrypt(ctx, gateway.EncryptInput{TTag: w.ttag, IV: w.iv, Plaintext: big[:api.MaxDataBytes]})
	if err != nil {
		t.Fatalf("encrypt of exactly %d bytes: %v", api.MaxDataBytes, err)
	}
	got, err := s.Decrypt(ctx, w.ttag, enc.IV, enc.Ciphertext)
	if err != nil || len(got) != api.MaxDataBytes {
		t.Fatalf("round trip of %d bytes: %d bytes, %v", api.MaxDataBytes, len(got), err)
	}
}

func TestServiceReloginOnce(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	w.env.Gateway.DropServiceSessions()
	w.env.Gateway.ResetCounts()
	rec := &gateway.Recorder{}
	s, err := w.c.Mint(gateway.WithRecorder(ctx, rec), gateway.MintRequest{ActingAs: w.reader.Name, Objects: []string{w.ttag}, TTL: time.Minute})
	if err != nil {
		t.Fatalf("mint after the service session was dropped: %v", err)
	}
	if n := w.env.Gateway.Count(api.RouteServiceLogin); n != 1 {
		t.Errorf("sign-ins after the drop: %d, want 1", n)
	}
	if n := w.env.Gateway.Count(api.RouteScoped); n != 2 {
		t.Errorf("mint requests: %d, want 2 (refused, then retried)", n)
	}
	if !rec.ServiceRelogin() {
		t.Error("the recorder does not say the service signed in again")
	}
	if _, err := s.Decrypt(ctx, w.ttag, w.iv, w.ct); err != nil {
		t.Fatal(err)
	}
}

func TestSkewedGatewayClock(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	w.env.Gateway.SetFaults(reference.Faults{ClockSkew: 10 * time.Minute})
	s := w.session(t, w.reader.Name, w.ttag)
	if _, err := s.Decrypt(ctx, w.ttag, w.iv, w.ct); err != nil {
		t.Fatalf("decrypt against a clock 10 minutes ahead: %v", err)
	}
	if off := w.c.ClockOffset(); off < 9*time.Minute || off > 11*time.Minute {
		t.Errorf("measured offset %s, want about 10m", off)
	}
}

func TestStateSurvivesRestart(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	w.env.Restart(t)
	c := w.env.ServiceClient(t, w.svc)
	s, err := c.Mint(ctx, gateway.MintRequest{ActingAs: w.reader.Name, Objects: []string{w.ttag}, TTL: time.Minute})
	if err != nil {
		t.Fatalf("mint after restart: %v", err)
	}
	got, err := s.Decrypt(ctx, w.ttag, w.iv, w.ct)
	if err != nil || !bytes.Equal(got, w.plaintext) {
		t.Fatalf("decrypt after restart = %q, %v", got, err)
	}
}

// BenchmarkDecryptRoundTrip measures one 1 KiB decrypt, client to reference
// Gateway over TLS on loopback. It reports x-baseline: the ratio to a plain
// TLS POST of the same body to a handler that echoes it, measured in the
// same run, so the number means something on a noisy shared machine.
func BenchmarkDecryptRoundTrip(b *testing.B) {
	ctx := context.Background()
	env := reftest.Start(b, reference.Config{})
	svc := env.Service(b, "bench", true)
	c := env.ServiceClient(b, svc)
	owner := reftest.Principal(b, c, svc.Prefix+"owner")
	s, err := c.Mint(ctx, gateway.MintRequest{ActingAs: owner.Name, TTL: 5 * time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	text := bytes.Repeat([]byte("a"), 1024)
	enc, err := s.Encrypt(ctx, gateway.EncryptInput{IV: bytes.Repeat([]byte{3}, 16), Plaintext: text})
	if err != nil {
		b.Fatal(err)
	}
	// The baseline runs the same number of iterations in this process:
	// testing.Benchmark cannot be nested inside a running benchmark.
	echo := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(w, r.Body)
	}))
	defer echo.Close()
	hc := echo.Client()
	body := bytes.Repeat([]byte("a"), 1400)
	post := func() {
		resp, err := hc.Post(echo.URL, "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	post() // warm the connection, as the client's is after Encrypt
	b.ResetTimer()
	var baseline time.Duration
	for b.Loop() {
		b.StopTimer()
		t0 := time.Now()
		post()
		baseline += time.Since(t0)
		b.StartTimer()
		if _, err := s.Decrypt(ctx, enc.TTag, enc.IV, enc.Ciphertext); err != nil {
			b.Fatal(err)
		}
	}
	if baseline > 0 {
		b.ReportMetric(float64(b.Elapsed())/float64(baseline), "x-baseline")
	}
}
