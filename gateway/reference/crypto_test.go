package reference

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
)

// world is a service with an owner (alice) of one key, and two more
// principals (bob, carol) with no entry on it yet.
type world struct {
	*env
	svc        *testService
	alice, bob api.Principal
	carol      api.Principal
	owner      *session // alice's session over the key
	key        api.EncryptResponse
	text       string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	e := newEnv(t)
	w := &world{env: e, svc: e.newService(true, ""), text: "the patient's history of illness"}
	w.alice = e.principal(w.svc, "alice")
	w.bob = e.principal(w.svc, "bob")
	w.carol = e.principal(w.svc, "carol")
	w.owner = e.scoped(w.svc, w.alice)
	w.key = e.mintKey(w.owner, w.text)
	return w
}

// grantBob has the owner grant bob rights on the world's key, then mints
// bob a scoped session over it.
func (w *world) grantBob(what string, rights []string, end *time.Time, uses *int) *session {
	w.t.Helper()
	wantOK(w.t, what, w.grant(w.owner, w.key.TTag, w.bob, rights, end, uses))
	return w.scoped(w.svc, w.bob, w.key.TTag)
}

func (w *world) decryptReq() api.DecryptRequest {
	return api.DecryptRequest{TTag: w.key.TTag, IV: w.key.IV, Ciphertext: w.key.Ciphertext}
}

// keyBytes reads a key's bytes from the key server's store.
func (w *world) keyBytes(ttag string) []byte {
	w.t.Helper()
	k, err := w.gw.store.keyByTTag(context.Background(), w.gw.store.db, ttag)
	if err != nil {
		w.t.Fatal(err)
	}
	return k.Bytes
}

func lastRow(t *testing.T, rows []AuditRow) AuditRow {
	t.Helper()
	if len(rows) == 0 {
		t.Fatal("the key server's audit is empty")
	}
	return rows[len(rows)-1]
}

func TestMintAndRoundTrip(t *testing.T) {
	w := newWorld(t)
	if raw, err := base64.StdEncoding.DecodeString(w.key.TTag); err != nil || len(raw) != 24 {
		t.Errorf("t-Tag %q is not base64 of 24 bytes", w.key.TTag)
	}
	if raw, err := hex.DecodeString(w.key.Link); err != nil || len(raw) != 16 {
		t.Errorf("link %q is not hex of 16 bytes", w.key.Link)
	}
	if raw, err := base64.StdEncoding.DecodeString(w.key.IV); err != nil || len(raw) != api.IVBytes {
		t.Errorf("iv %q is not base64 of 16 bytes", w.key.IV)
	}
	row := lastRow(t, w.audit())
	if row.Operation != OpMint || row.Outcome != OutcomeOK || row.Link != w.key.Link || row.Principal != w.alice.Name ||
		row.SystemID != w.alice.SystemID || row.PrincipalID != w.alice.PrincipalID {
		t.Errorf("mint audit row %+v", row)
	}

	// The minted key joined the session's scope: the same session opens it.
	out, err := w.decrypt(w.owner, w.decryptReq())
	wantOK(t, "decrypt", err)
	if got, _ := base64.StdEncoding.DecodeString(out.Plaintext); string(got) != w.text || out.Link != w.key.Link {
		t.Errorf("decrypt answered %q link %q", got, out.Link)
	}
	var acl api.ACLGetResponse
	wantOK(t, "acl get", w.call(api.RouteACLGet, w.owner.handle, w.owner.key, api.TTagRequest{TTag: w.key.TTag}, &acl))
	if len(acl.Entries) != 1 {
		t.Fatalf("a minted key's ACL: %+v", acl.Entries)
	}
	if en := acl.Entries[0]; en.Principal != w.alice.Name || en.PrincipalID != w.alice.PrincipalID || en.SystemID != w.alice.SystemID ||
		len(en.Rights) != 1 || en.Rights[0] != api.RightOwner || en.EndTime != nil || en.Uses != nil {
		t.Errorf("owner entry %+v", en)
	}
	row = lastRow(t, w.audit())
	if row.Operation != OpACLGet || row.Outcome != OutcomeOK || row.Link != w.key.Link {
		t.Errorf("acl get audit row %+v", row)
	}
}

func TestDeterministicAndRandomIV(t *testing.T) {
	w := newWorld(t)
	text := []byte("same text, same key")
	enc := func(iv string) api.EncryptResponse {
		t.Helper()
		out, err := w.encrypt(w.owner, api.EncryptRequest{TTag: w.key.TTag, IV: iv, Plaintext: base64.StdEncoding.EncodeToString(text)})
		wantOK(t, "encrypt", err)
		if out.Minted || out.TTag != w.key.TTag || out.Link != w.key.Link {
			t.Fatalf("encrypt under a named key answered %+v", out)
		}
		return out
	}
	a, b := enc(""), enc("")
	if a.IV != b.IV || a.Ciphertext != b.Ciphertext {
		t.Error("encrypt without an IV is not deterministic")
	}
	m := hmac.New(sha256.New, w.keyBytes(w.key.TTag))
	m.Write(text)
	if want := base64.StdEncoding.EncodeToString(m.Sum(nil)[:16]); a.IV != want {
		t.Errorf("deterministic IV %s, want the first 16 bytes of HMAC-SHA256(key, text) %s", a.IV, want)
	}
	iv1 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 16))
	iv2 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 16))
	c, d := enc(iv1), enc(iv2)
	if c.IV != iv1 || d.IV != iv2 {
		t.Errorf("named IVs not answered back: %s %s", c.IV, d.IV)
	}
	if c.Ciphertext == d.Ciphertext || c.Ciphertext == a.Ciphertext {
		t.Error("different IVs gave the same ciphertext")
	}
	for _, x := range []api.EncryptResponse{a, c, d} {
		out, err := w.decrypt(w.owner, api.DecryptRequest{TTag: x.TTag, IV: x.IV, Ciphertext: x.Ciphertext})
		wantOK(t, "decrypt", err)
		if got, _ := base64.StdEncoding.DecodeString(out.Plaintext); !bytes.Equal(got, text) {
			t.Errorf("round trip gave %q", got)
		}
	}

	// The IV is the GCM nonce: the wrong one does not open, and the key
	// server says so (and keeps a FAILED row).
	_, err := w.decrypt(w.owner, api.DecryptRequest{TTag: c.TTag, IV: iv2, Ciphertext: c.Ciphertext})
	wantRefusal(t, "wrong IV", err, api.LayerKeyServer, api.CodeBadRequest, http.StatusBadRequest)
	if row := lastRow(t, w.audit()); row.Outcome != OutcomeFailed || row.Code != api.CodeBadRequest || row.Operation != OpDecrypt {
		t.Errorf("failed decrypt audit row %+v", row)
	}
}

func TestCryptoBadRequests(t *testing.T) {
	w := newWorld(t)
	before := len(w.audit())
	cases := []struct {
		name  string
		route string
		body  any
	}{
		{"encrypt IV too short", api.RouteEncrypt, api.EncryptRequest{TTag: w.key.TTag, IV: b64("short"), Plaintext: b64("x")}},
		{"encrypt IV not base64", api.RouteEncrypt, api.EncryptRequest{TTag: w.key.TTag, IV: "!!!", Plaintext: b64("x")}},
		{"encrypt plaintext not base64", api.RouteEncrypt, api.EncryptRequest{TTag: w.key.TTag, Plaintext: "not base64!"}},
		{"encrypt plaintext unpadded", api.RouteEncrypt, api.EncryptRequest{TTag: w.key.TTag, Plaintext: "eA"}},
		{"decrypt without IV", api.RouteDecrypt, api.DecryptRequest{TTag: w.key.TTag, Ciphertext: w.key.Ciphertext}},
		{"decrypt without ttag", api.RouteDecrypt, api.DecryptRequest{IV: w.key.IV, Ciphertext: w.key.Ciphertext}},
		{"decrypt ciphertext not base64", api.RouteDecrypt, api.DecryptRequest{TTag: w.key.TTag, IV: w.key.IV, Ciphertext: "%%%"}},
		{"body not JSON", api.RouteEncrypt, []byte("plaintext=hello")},
		{"empty body", api.RouteEncrypt, []byte{}},
		{"JSON null", api.RouteEncrypt, []byte("null")},
		{"two JSON values", api.RouteEncrypt, []byte(`{"plaintext":""}{"plaintext":""}`)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := w.call(c.route, w.owner.handle, w.owner.key, c.body, nil)
			wantRefusal(t, c.name, err, api.LayerGateway, api.CodeBadRequest, http.StatusBadRequest)
		})
	}
	if after := len(w.audit()); after != before {
		t.Errorf("gateway-level refusals wrote %d key-server rows", after-before)
	}
}

func TestObjectNotInCredentialScope(t *testing.T) {
	w := newWorld(t)
	// alice owns the key, but this session of hers does not cover it.
	narrow := w.scoped(w.svc, w.alice, "some-other-ttag")
	before := len(w.audit())
	cases := []struct {
		route string
		body  any
	}{
		{api.RouteEncrypt, api.EncryptRequest{TTag: w.key.TTag, Plaintext: b64("x")}},
		{api.RouteDecrypt, w.decryptReq()},
		{api.RouteACLGet, api.TTagRequest{TTag: w.key.TTag}},
		{api.RouteACLGrant, api.ACLGrantRequest{TTag: w.key.TTag, SystemID: w.bob.SystemID, PrincipalID: w.bob.PrincipalID, Rights: []string{api.RightRead}}},
		{api.RouteACLUpdate, api.ACLGrantRequest{TTag: w.key.TTag, SystemID: w.bob.SystemID, PrincipalID: w.bob.PrincipalID, Rights: []string{api.RightRead}}},
		{api.RouteACLRevoke, api.ACLRevokeRequest{TTag: w.key.TTag, SystemID: w.bob.SystemID, PrincipalID: w.bob.PrincipalID}},
		{api.RouteKeyExpire, api.TTagRequest{TTag: w.key.TTag}},
		{api.RouteKeyRemove, api.TTagRequest{TTag: w.key.TTag}},
	}
	for _, c := range cases {
		t.Run(c.route, func(t *testing.T) {
			err := w.call(c.route, narrow.handle, narrow.key, c.body, nil)
			wantRefusal(t, c.route, err, api.LayerGateway, api.CodeObjectNotInScope, http.StatusForbidden)
		})
	}
	if after := len(w.audit()); after != before {
		t.Errorf("out-of-scope requests wrote %d key-server rows; the key server must not be asked", after-before)
	}
	// And the key is untouched: the owner's own session still opens it.
	_, err := w.decrypt(w.owner, w.decryptReq())
	wantOK(t, "owner decrypt", err)
}

func TestKeyServerRefusals(t *testing.T) {
	w := newWorld(t)

	t.Run("ACL_DENIED without an entry", func(t *testing.T) {
		sess := w.scoped(w.svc, w.bob, w.key.TTag)
		_, err := w.decrypt(sess, w.decryptReq())
		wantRefusal(t, "bob decrypt", err, api.LayerKeyServer, api.CodeACLDenied, http.StatusForbidden)
		row := lastRow(t, w.audit())
		if row.Principal != w.bob.Name || row.Operation != OpDecrypt || row.Link != w.key.Link ||
			row.Outcome != OutcomeFailed || row.Code != api.CodeACLDenied {
			t.Errorf("audit row %+v", row)
		}
		err = w.call(api.RouteACLGet, sess.handle, sess.key, api.TTagRequest{TTag: w.key.TTag}, nil)
		wantRefusal(t, "bob acl get", err, api.LayerKeyServer, api.CodeACLDenied, http.StatusForbidden)
	})
	t.Run("ACCESS_DENIED without DECRYPT", func(t *testing.T) {
		p := w.principal(w.svc, "encrypt-only", api.RoleEncrypt)
		wantOK(t, "grant", w.grant(w.owner, w.key.TTag, p, []string{api.RightRead}, nil, nil))
		sess := w.scoped(w.svc, p, w.key.TTag)
		_, err := w.decrypt(sess, w.decryptReq())
		wantRefusal(t, "decrypt", err, api.LayerKeyServer, api.CodeAccessDenied, http.StatusForbidden)
		if row := lastRow(t, w.audit()); row.Code != api.CodeAccessDenied || row.Link != w.key.Link {
			t.Errorf("audit row %+v", row)
		}
		// It may still encrypt under the key: READ is enough for both.
		_, err = w.encrypt(sess, api.EncryptRequest{TTag: w.key.TTag, Plaintext: b64("x")})
		wantOK(t, "encrypt", err)
	})
	t.Run("ACCESS_DENIED without ENCRYPT", func(t *testing.T) {
		p := w.principal(w.svc, "decrypt-only", api.RoleDecrypt)
		wantOK(t, "grant", w.grant(w.owner, w.key.TTag, p, []string{api.RightRead}, nil, nil))
		sess := w.scoped(w.svc, p, w.key.TTag)
		_, err := w.encrypt(sess, api.EncryptRequest{TTag: w.key.TTag, Plaintext: b64("x")})
		wantRefusal(t, "encrypt", err, api.LayerKeyServer, api.CodeAccessDenied, http.StatusForbidden)
		_, err = w.encrypt(sess, api.EncryptRequest{Plaintext: b64("x")})
		wantRefusal(t, "mint", err, api.LayerKeyServer, api.CodeAccessDenied, http.StatusForbidden)
		if row := lastRow(t, w.audit()); row.Operation != OpMint || row.Code != api.CodeAccessDenied || row.Link != "" {
			t.Errorf("refused mint audit row %+v", row)
		}
		var now api.ScopedResponse
		wantOK(t, "widen by nothing", w.call(api.RouteWiden, sess.handle, sess.key, api.WidenRequest{}, &now))
		if len(now.Objects) != 1 {
			t.Errorf("a refused mint changed the scope: %v", now.Objects)
		}
	})
	t.Run("ACCESS_DENIED without ACL", func(t *testing.T) {
		p := w.principal(w.svc, "no-acl-role", api.RoleEncrypt, api.RoleDecrypt)
		wantOK(t, "grant", w.grant(w.owner, w.key.TTag, p, []string{api.RightWrite}, nil, nil))
		sess := w.scoped(w.svc, p, w.key.TTag)
		err := w.grant(sess, w.key.TTag, w.carol, []string{api.RightRead}, nil, nil)
		wantRefusal(t, "grant", err, api.LayerKeyServer, api.CodeAccessDenied, http.StatusForbidden)
	})
	t.Run("ACCESS_DENIED once the principal is disabled", func(t *testing.T) {
		p := w.principal(w.svc, "suspended")
		wantOK(t, "grant", w.grant(w.owner, w.key.TTag, p, []string{api.RightRead}, nil, nil))
		sess := w.scoped(w.svc, p, w.key.TTag)
		// No route disables a principal after creation; an operator of
		// the key server would, so the test does it in the store.
		if _, err := w.gw.store.db.Exec(`UPDATE principals SET disabled = 1 WHERE name = ?`, p.Name); err != nil {
			t.Fatal(err)
		}
		_, err := w.decrypt(sess, w.decryptReq())
		wantRefusal(t, "decrypt", err, api.LayerKeyServer, api.CodeAccessDenied, http.StatusForbidden)
	})
	t.Run("ACCESS_DENIED once the principal is deleted", func(t *testing.T) {
		p := w.principal(w.svc, "leaver")
		wantOK(t, "grant", w.grant(w.owner, w.key.TTag, p, []string{api.RightRead}, nil, nil))
		sess := w.scoped(w.svc, p, w.key.TTag)
		_, err := w.decrypt(sess, w.decryptReq())
		wantOK(t, "decrypt before", err)
		wantOK(t, "delete", w.admin(api.RouteAdminDeletePrincipal, api.PrincipalRequest{Name: p.Name}, nil))
		_, err = w.decrypt(sess, w.decryptReq())
		wantRefusal(t, "decrypt after", err, api.LayerKeyServer, api.CodeAccessDenied, http.StatusForbidden)
	})
}

func TestExpireAndRemove(t *testing.T) {
	w := newWorld(t)
	bob := w.grantBob("grant bob WRITE", []string{api.RightWrite}, nil, nil)

	err := w.call(api.RouteKeyExpire, bob.handle, bob.key, api.TTagRequest{TTag: w.key.TTag}, nil)
	wantRefusal(t, "WRITE holder expires", err, api.LayerKeyServer, api.CodeACLDenied, http.StatusForbidden)
	err = w.call(api.RouteKeyRemove, bob.handle, bob.key, api.TTagRequest{TTag: w.key.TTag}, nil)
	wantRefusal(t, "WRITE holder removes", err, api.LayerKeyServer, api.CodeACLDenied, http.StatusForbidden)

	wantOK(t, "owner expires", w.call(api.RouteKeyExpire, w.owner.handle, w.owner.key, api.TTagRequest{TTag: w.key.TTag}, nil))
	if row := lastRow(t, w.audit()); row.Operation != OpKeyExpire || row.Outcome != OutcomeOK || row.Link != w.key.Link {
		t.Errorf("expire audit row %+v", row)
	}
	for _, sess := range []*session{w.owner, bob} {
		_, err := w.decrypt(sess, w.decryptReq())
		wantRefusal(t, "decrypt", err, api.LayerKeyServer, api.CodeKeyExpired, http.StatusGone)
		_, err = w.encrypt(sess, api.EncryptRequest{TTag: w.key.TTag, Plaintext: b64("x")})
		wantRefusal(t, "encrypt", err, api.LayerKeyServer, api.CodeKeyExpired, http.StatusGone)
		err = w.call(api.RouteACLGet, sess.handle, sess.key, api.TTagRequest{TTag: w.key.TTag}, nil)
		wantRefusal(t, "acl get", err, api.LayerKeyServer, api.CodeKeyExpired, http.StatusGone)
		err = w.grant(sess, w.key.TTag, w.carol, []string{api.RightRead}, nil, nil)
		wantRefusal(t, "grant", err, api.LayerKeyServer, api.CodeKeyExpired, http.StatusGone)
	}
	err = w.call(api.RouteKeyExpire, w.owner.handle, w.owner.key, api.TTagRequest{TTag: w.key.TTag}, nil)
	wantRefusal(t, "expire again", err, api.LayerKeyServer, api.CodeKeyExpired, http.StatusGone)
	if row := lastRow(t, w.audit()); row.Outcome != OutcomeFailed || row.Code != api.CodeKeyExpired || row.Link != w.key.Link {
		t.Errorf("KEY_EXPIRED audit row %+v", row)
	}

	// Removal is the one thing still allowed on an expired key, and only
	// for its owner.
	err = w.call(api.RouteKeyRemove, bob.handle, bob.key, api.TTagRequest{TTag: w.key.TTag}, nil)
	wantRefusal(t, "WRITE holder removes an expired key", err, api.LayerKeyServer, api.CodeACLDenied, http.StatusForbidden)
	wantOK(t, "owner removes", w.call(api.RouteKeyRemove, w.owner.handle, w.owner.key, api.TTagRequest{TTag: w.key.TTag}, nil))
	for _, sess := range []*session{w.owner, bob} {
		_, err := w.decrypt(sess, w.decryptReq())
		wantRefusal(t, "decrypt", err, api.LayerKeyServer, api.CodeKeyNotFound, http.StatusNotFound)
		err = w.call(api.RouteACLGet, sess.handle, sess.key, api.TTagRequest{TTag: w.key.TTag}, nil)
		wantRefusal(t, "acl get", err, api.LayerKeyServer, api.CodeKeyNotFound, http.StatusNotFound)
	}
	if row := lastRow(t, w.audit()); row.Outcome != OutcomeFailed || row.Code != api.CodeKeyNotFound || row.Link != "" {
		t.Errorf("KEY_NOT_FOUND audit row %+v (the link of a key not found is empty)", row)
	}
	entries, err2 := w.gw.store.entries(context.Background(), w.gw.store.db, w.key.TTag)
	if err2 != nil || len(entries) != 0 {
		t.Errorf("ACL entries left after remove: %v %v", entries, err2)
	}
}
