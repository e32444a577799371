package reference

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
)

func (w *world) aclEntries(sess *session) []api.ACLEntry {
	w.t.Helper()
	var out api.ACLGetResponse
	wantOK(w.t, "acl get", w.call(api.RouteACLGet, sess.handle, sess.key, api.TTagRequest{TTag: w.key.TTag}, &out))
	if out.TTag != w.key.TTag {
		w.t.Errorf("acl get answered t-Tag %q", out.TTag)
	}
	return out.Entries
}

func entryOf(entries []api.ACLEntry, p api.Principal) *api.ACLEntry {
	for i := range entries {
		if entries[i].SystemID == p.SystemID && entries[i].PrincipalID == p.PrincipalID {
			return &entries[i]
		}
	}
	return nil
}

func TestReadHolderCannotGrant(t *testing.T) {
	w := newWorld(t)
	bob := w.grantBob("grant bob READ", []string{api.RightRead}, nil, nil)
	_, err := w.decrypt(bob, w.decryptReq())
	wantOK(t, "READ holder decrypts", err)

	err = w.grant(bob, w.key.TTag, w.carol, []string{api.RightRead}, nil, nil)
	wantRefusal(t, "READ holder grants", err, api.LayerKeyServer, api.CodeACLDenied, http.StatusForbidden)
	if !strings.Contains(err.Detail, "does not have write privilege") {
		t.Errorf("detail %q does not say the holder lacks write privilege", err.Detail)
	}
	row := lastRow(t, w.audit())
	if row.Operation != OpACLGrant || row.Principal != w.bob.Name || row.Code != api.CodeACLDenied {
		t.Errorf("audit row %+v", row)
	}
	err = w.call(api.RouteACLRevoke, bob.handle, bob.key, api.ACLRevokeRequest{TTag: w.key.TTag, SystemID: w.bob.SystemID, PrincipalID: w.bob.PrincipalID}, nil)
	wantRefusal(t, "READ holder revokes", err, api.LayerKeyServer, api.CodeACLDenied, http.StatusForbidden)
	if entryOf(w.aclEntries(w.owner), w.carol) != nil {
		t.Error("carol got an entry from a READ holder")
	}

	// Made a writer, bob may grant READ but not OWNER.
	wantOK(t, "update bob to WRITE", w.call(api.RouteACLUpdate, w.owner.handle, w.owner.key, api.ACLGrantRequest{
		TTag: w.key.TTag, SystemID: w.bob.SystemID, PrincipalID: w.bob.PrincipalID, Rights: []string{api.RightWrite}}, nil))
	wantOK(t, "WRITE holder grants READ", w.grant(bob, w.key.TTag, w.carol, []string{api.RightRead}, nil, nil))
	dave := w.principal(w.svc, "dave")
	err = w.grant(bob, w.key.TTag, dave, []string{api.RightOwner}, nil, nil)
	wantRefusal(t, "WRITE holder grants OWNER", err, api.LayerKeyServer, api.CodeACLDenied, http.StatusForbidden)
	err = w.call(api.RouteACLRevoke, bob.handle, bob.key, api.ACLRevokeRequest{TTag: w.key.TTag, SystemID: w.alice.SystemID, PrincipalID: w.alice.PrincipalID}, nil)
	wantRefusal(t, "WRITE holder revokes the OWNER", err, api.LayerKeyServer, api.CodeACLDenied, http.StatusForbidden)

	entries := w.aclEntries(bob)
	if c := entryOf(entries, w.carol); c == nil || c.Principal != w.carol.Name || strings.Join(c.Rights, ",") != api.RightRead {
		t.Errorf("carol's entry %+v", c)
	}
	if len(entries) != 3 {
		t.Errorf("%d entries, want alice, bob and carol", len(entries))
	}
}

func TestRevokedEntryRefusedOnHeldSession(t *testing.T) {
	w := newWorld(t)
	bob := w.grantBob("grant", []string{api.RightRead}, nil, nil)
	_, err := w.decrypt(bob, w.decryptReq())
	wantOK(t, "decrypt while granted", err)
	wantOK(t, "revoke", w.call(api.RouteACLRevoke, w.owner.handle, w.owner.key,
		api.ACLRevokeRequest{TTag: w.key.TTag, SystemID: w.bob.SystemID, PrincipalID: w.bob.PrincipalID}, nil))
	_, err = w.decrypt(bob, w.decryptReq())
	wantRefusal(t, "decrypt on the session already held", err, api.LayerKeyServer, api.CodeACLDenied, http.StatusForbidden)
	fresh := w.scoped(w.svc, w.bob, w.key.TTag)
	_, err = w.decrypt(fresh, w.decryptReq())
	wantRefusal(t, "decrypt on a fresh session", err, api.LayerKeyServer, api.CodeACLDenied, http.StatusForbidden)
}

func TestUsesRunOut(t *testing.T) {
	w := newWorld(t)
	two := 2
	bob := w.grantBob("grant two uses", []string{api.RightRead}, nil, &two)

	// ACL reads do not spend uses; encrypt and decrypt do.
	w.aclEntries(bob)
	_, err := w.decrypt(bob, w.decryptReq())
	wantOK(t, "first use (decrypt)", err)
	if e := entryOf(w.aclEntries(w.owner), w.bob); e == nil || e.Uses == nil || *e.Uses != 1 {
		t.Fatalf("after one use the entry is %+v, want 1 use left", e)
	}
	_, err = w.encrypt(bob, api.EncryptRequest{TTag: w.key.TTag, Plaintext: b64("x")})
	wantOK(t, "second use (encrypt)", err)
	_, err = w.decrypt(bob, w.decryptReq())
	wantRefusal(t, "third use", err, api.LayerKeyServer, api.CodeACLDenied, http.StatusForbidden)
	if e := entryOf(w.aclEntries(w.owner), w.bob); e == nil || e.Uses == nil || *e.Uses != 0 {
		t.Errorf("spent entry %+v, want 0 uses left", e)
	}
	// A refused decrypt spends nothing: a wrong IV under a fresh grant.
	one := 1
	wantOK(t, "update to one use", w.call(api.RouteACLUpdate, w.owner.handle, w.owner.key, api.ACLGrantRequest{
		TTag: w.key.TTag, SystemID: w.bob.SystemID, PrincipalID: w.bob.PrincipalID, Rights: []string{api.RightRead}, Uses: &one}, nil))
	bad := w.decryptReq()
	bad.IV = b64("0000000000000000")
	_, err = w.decrypt(bob, bad)
	wantRefusal(t, "wrong IV", err, api.LayerKeyServer, api.CodeBadRequest, http.StatusBadRequest)
	_, err = w.decrypt(bob, w.decryptReq())
	wantOK(t, "the one use is still there", err)
}

func TestEndTimePasses(t *testing.T) {
	w := newWorld(t)
	end := w.clock.Now().Add(2 * time.Minute)
	bob := w.grantBob("grant until end", []string{api.RightRead}, &end, nil)
	if e := entryOf(w.aclEntries(w.owner), w.bob); e == nil || e.EndTime == nil || !e.EndTime.Equal(end) {
		t.Errorf("entry %+v, want endTime %v", e, end)
	}
	w.clock.Advance(2*time.Minute - time.Second)
	_, err := w.decrypt(bob, w.decryptReq())
	wantOK(t, "decrypt before endTime", err)
	w.clock.Advance(time.Second)
	_, err = w.decrypt(bob, w.decryptReq())
	wantRefusal(t, "decrypt at endTime", err, api.LayerKeyServer, api.CodeACLDenied, http.StatusForbidden)
}

func TestACLRouteRefusals(t *testing.T) {
	w := newWorld(t)
	wantOK(t, "grant bob", w.grant(w.owner, w.key.TTag, w.bob, []string{api.RightRead}, nil, nil))
	past := w.clock.Now().Add(-time.Second)
	zero := 0
	req := func(p api.Principal, rights ...string) api.ACLGrantRequest {
		return api.ACLGrantRequest{TTag: w.key.TTag, SystemID: p.SystemID, PrincipalID: p.PrincipalID, Rights: rights}
	}
	ghost := api.Principal{SystemID: w.bob.SystemID, PrincipalID: "999999"}
	cases := []struct {
		name          string
		route         string
		body          any
		layer, code   string
		status        int
		auditRowAdded bool
	}{
		{"grant an existing entry", api.RouteACLGrant, req(w.bob, api.RightRead),
			api.LayerKeyServer, api.CodeConflict, http.StatusConflict, true},
		{"grant to an unknown principal", api.RouteACLGrant, req(ghost, api.RightRead),
			api.LayerKeyServer, api.CodeNotFound, http.StatusNotFound, true},
		{"update a missing entry", api.RouteACLUpdate, req(w.carol, api.RightRead),
			api.LayerKeyServer, api.CodeNotFound, http.StatusNotFound, true},
		{"revoke a missing entry", api.RouteACLRevoke,
			api.ACLRevokeRequest{TTag: w.key.TTag, SystemID: w.carol.SystemID, PrincipalID: w.carol.PrincipalID},
			api.LayerKeyServer, api.CodeNotFound, http.StatusNotFound, true},
		{"grant no rights", api.RouteACLGrant, req(w.carol),
			api.LayerGateway, api.CodeBadRequest, http.StatusBadRequest, false},
		{"grant an unknown right", api.RouteACLGrant, req(w.carol, "ADMIN"),
			api.LayerGateway, api.CodeBadRequest, http.StatusBadRequest, false},
		{"grant ending in the past", api.RouteACLGrant,
			api.ACLGrantRequest{TTag: w.key.TTag, SystemID: w.carol.SystemID, PrincipalID: w.carol.PrincipalID, Rights: []string{api.RightRead}, EndTime: &past},
			api.LayerGateway, api.CodeBadRequest, http.StatusBadRequest, false},
		{"grant zero uses", api.RouteACLGrant,
			api.ACLGrantRequest{TTag: w.key.TTag, SystemID: w.carol.SystemID, PrincipalID: w.carol.PrincipalID, Rights: []string{api.RightRead}, Uses: &zero},
			api.LayerGateway, api.CodeBadRequest, http.StatusBadRequest, false},
		{"grant without a grantee", api.RouteACLGrant, api.ACLGrantRequest{TTag: w.key.TTag, Rights: []string{api.RightRead}},
			api.LayerGateway, api.CodeBadRequest, http.StatusBadRequest, false},
		{"get without a ttag", api.RouteACLGet, api.TTagRequest{},
			api.LayerGateway, api.CodeBadRequest, http.StatusBadRequest, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := len(w.audit())
			err := w.call(c.route, w.owner.handle, w.owner.key, c.body, nil)
			wantRefusal(t, c.name, err, c.layer, c.code, c.status)
			rows := w.audit()
			if added := len(rows) - before; (added == 1) != c.auditRowAdded || added > 1 {
				t.Errorf("%d key-server rows added, want %v", added, c.auditRowAdded)
			}
			if c.auditRowAdded {
				if row := lastRow(t, rows); row.Outcome != OutcomeFailed || row.Code != c.code || row.Link != w.key.Link {
					t.Errorf("audit row %+v", row)
				}
			}
		})
	}
	// Nothing above changed the ACL.
	if entries := w.aclEntries(w.owner); len(entries) != 2 {
		t.Errorf("ACL after refusals: %+v", entries)
	}
}

// Concurrent uses of a limited entry: exactly as many succeed as the entry
// allows, whatever the interleaving.
func TestUsesUnderConcurrency(t *testing.T) {
	w := newWorld(t)
	const allowed, workers, each = 13, 4, 6
	n := allowed
	bob := w.grantBob("grant", []string{api.RightRead}, nil, &n)
	body, err := json.Marshal(w.decryptReq())
	if err != nil {
		t.Fatal(err)
	}
	client := w.srv.Client()
	url := w.url(api.RouteDecrypt)
	now := w.clock.Now()

	statuses := make(chan int, workers*each)
	errs := make(chan error, workers*each)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				p, err := bob.key.Make(http.MethodPost, url, bob.handle, now)
				if err != nil {
					errs <- err
					return
				}
				req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				req.Header.Set("Authorization", "DPoP "+bob.handle)
				req.Header.Set("DPoP", p)
				resp, err := client.Do(req)
				if err != nil {
					errs <- err
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				statuses <- resp.StatusCode
			}
		}()
	}
	wg.Wait()
	close(statuses)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	counts := map[int]int{}
	for s := range statuses {
		counts[s]++
	}
	if counts[http.StatusOK] != allowed || counts[http.StatusForbidden] != workers*each-allowed {
		t.Errorf("answers %v, want %d OK and %d refused", counts, allowed, workers*each-allowed)
	}
	if e := entryOf(w.aclEntries(w.owner), w.bob); e == nil || e.Uses == nil || *e.Uses != 0 {
		t.Errorf("entry after the run %+v, want 0 uses left", e)
	}
}
