package reference

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/proof"
)

func TestCountsOnArrival(t *testing.T) {
	w := newWorld(t)
	w.gw.ResetCounts()
	if n := len(w.gw.Counts()); n != 0 {
		t.Fatalf("counts after reset: %v", w.gw.Counts())
	}
	_, err := w.decrypt(w.owner, w.decryptReq())
	wantOK(t, "decrypt", err)
	// Refused before any check passes, still counted.
	err = w.decode(api.RouteDecrypt, w.do(request{route: api.RouteDecrypt, body: w.decryptReq()}), nil)
	wantRefusal(t, "no session", err, api.LayerGateway, api.CodeSessionMissing, http.StatusUnauthorized)
	err = w.decode("/api/v1/nowhere", w.do(request{route: "/api/v1/nowhere"}), nil)
	wantRefusal(t, "unknown route", err, api.LayerGateway, api.CodeNotFound, http.StatusNotFound)
	err = w.decode(api.RouteDecrypt, w.do(request{route: api.RouteDecrypt, method: http.MethodGet}), nil)
	wantRefusal(t, "GET", err, api.LayerGateway, api.CodeBadRequest, http.StatusMethodNotAllowed)

	if n := w.gw.Count(api.RouteDecrypt); n != 3 {
		t.Errorf("Count(decrypt) = %d, want 3", n)
	}
	if n := w.gw.Count("/api/v1/nowhere"); n != 1 {
		t.Errorf("Count(unknown route) = %d, want 1", n)
	}
	if n := w.gw.Count(api.RouteEncrypt); n != 0 {
		t.Errorf("Count(encrypt) = %d, want 0", n)
	}
}

func TestFailNext(t *testing.T) {
	w := newWorld(t)
	w.gw.SetFaults(Faults{FailNext: map[string]int{api.RouteDecrypt: 2}})
	for range 2 {
		_, err := w.decrypt(w.owner, w.decryptReq())
		wantRefusal(t, "injected", err, api.LayerGateway, api.CodeInjectedFault, http.StatusServiceUnavailable)
	}
	_, err := w.decrypt(w.owner, w.decryptReq())
	wantOK(t, "third decrypt", err)
	_, err = w.encrypt(w.owner, api.EncryptRequest{TTag: w.key.TTag, Plaintext: b64("x")})
	wantOK(t, "another route is not touched", err)

	w.gw.SetFaults(Faults{FailNext: map[string]int{api.RouteEncrypt: 1}, Status: http.StatusBadGateway})
	_, err = w.encrypt(w.owner, api.EncryptRequest{TTag: w.key.TTag, Plaintext: b64("x")})
	wantRefusal(t, "injected 502", err, api.LayerGateway, api.CodeInjectedFault, http.StatusBadGateway)
	if f := w.gw.CurrentFaults(); len(f.FailNext) != 0 {
		t.Errorf("spent failures still listed: %v", f.FailNext)
	}
	// The injected failure comes before any check: no session needed.
	w.gw.SetFaults(Faults{FailNext: map[string]int{api.RouteDecrypt: 1}})
	err = w.decode(api.RouteDecrypt, w.do(request{route: api.RouteDecrypt}), nil)
	wantRefusal(t, "injected before checks", err, api.LayerGateway, api.CodeInjectedFault, http.StatusServiceUnavailable)
}

func TestDelay(t *testing.T) {
	w := newWorld(t)
	// A delay far longer than the client waits: the client gives up, and
	// the Gateway's handler ends with the abandoned request.
	w.gw.SetFaults(Faults{Delay: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url(api.RouteDecrypt), bytes.NewReader([]byte("{}")))
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := w.srv.Client().Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("answered %d during an hour's delay", resp.StatusCode)
	}
	w.gw.SetFaults(Faults{})
	_, err2 := w.decrypt(w.owner, w.decryptReq())
	wantOK(t, "after the delay is lifted", err2)
}

func TestLoseEncryptAnswer(t *testing.T) {
	w := newWorld(t)
	rowsBefore := len(w.audit())
	keysBefore := countKeys(t, w.env)
	w.gw.ResetCounts()
	w.gw.SetFaults(Faults{LoseEncryptAnswer: 1})

	body, err := json.Marshal(api.EncryptRequest{Plaintext: b64("a new file")})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, w.url(api.RouteEncrypt), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	p, err := w.owner.key.Make(http.MethodPost, w.url(api.RouteEncrypt), w.owner.handle, w.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "DPoP "+w.owner.handle)
	req.Header.Set("DPoP", p)
	if resp, err := w.srv.Client().Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the lost encrypt was answered %d", resp.StatusCode)
	}
	if n := w.gw.Count(api.RouteEncrypt); n != 1 {
		t.Errorf("encrypt received %d times, want 1 (no retry)", n)
	}
	// The work was done: a key was minted and the key server recorded it.
	if n := countKeys(t, w.env) - keysBefore; n != 1 {
		t.Errorf("%d keys minted by the lost encrypt, want 1", n)
	}
	rows := w.audit()
	if len(rows) != rowsBefore+1 {
		t.Fatalf("%d audit rows added, want 1", len(rows)-rowsBefore)
	}
	if row := rows[len(rows)-1]; row.Operation != OpMint || row.Outcome != OutcomeOK || row.Link == "" {
		t.Errorf("audit row of the lost encrypt %+v", row)
	}
	// Only the next one is lost.
	_, err2 := w.encrypt(w.owner, api.EncryptRequest{TTag: w.key.TTag, Plaintext: b64("x")})
	wantOK(t, "next encrypt", err2)
}

// TestFailEncryptAfterWork: the encrypt mints its key and is then
// answered a 504, the key server's work done; only the next one fails.
func TestFailEncryptAfterWork(t *testing.T) {
	w := newWorld(t)
	keysBefore := countKeys(t, w.env)
	w.gw.SetFaults(Faults{FailEncryptAfterWork: 1, Status: http.StatusGatewayTimeout})
	_, err := w.encrypt(w.owner, api.EncryptRequest{Plaintext: b64("a new file")})
	wantRefusal(t, "after work", err, api.LayerGateway, api.CodeInjectedFault, http.StatusGatewayTimeout)
	if n := countKeys(t, w.env) - keysBefore; n != 1 {
		t.Errorf("%d keys minted by the failed encrypt, want 1 (the work was done)", n)
	}
	if f := w.gw.CurrentFaults(); f.FailEncryptAfterWork != 0 {
		t.Errorf("the spent failure is still listed: %+v", f)
	}
	_, err = w.encrypt(w.owner, api.EncryptRequest{TTag: w.key.TTag, Plaintext: b64("x")})
	wantOK(t, "next encrypt", err)
}

func countKeys(t *testing.T, e *env) int {
	t.Helper()
	var n int
	if err := e.gw.store.db.QueryRow(`SELECT count(*) FROM keys`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestClockSkew(t *testing.T) {
	w := newWorld(t)
	// Two minutes: past the proof window, within the session's life.
	skew := 2 * time.Minute
	w.gw.SetFaults(Faults{ClockSkew: skew})
	resp := w.do(request{route: api.RouteWiden, body: api.WidenRequest{}})
	if got, want := resp.header.Get("Date"), w.clock.Now().Add(skew).UTC().Format(http.TimeFormat); got != want {
		t.Errorf("Date %q, want the skewed clock's %q", got, want)
	}
	// A proof on the client's unskewed clock is stale at the Gateway...
	_, err := w.decrypt(w.owner, w.decryptReq())
	wantRefusal(t, "unskewed proof", err, api.LayerGateway, api.CodeProofStale, http.StatusUnauthorized)
	// ...and one made on the Gateway's clock, as read from Date, is not.
	p, err2 := w.owner.key.Make(http.MethodPost, w.url(api.RouteDecrypt), w.owner.handle, w.clock.Now().Add(skew))
	if err2 != nil {
		t.Fatal(err2)
	}
	err = w.decode(api.RouteDecrypt, w.do(request{route: api.RouteDecrypt, body: w.decryptReq(), handle: w.owner.handle, proofToken: p}), nil)
	wantOK(t, "proof on the Gateway's clock", err)
	// Sessions age by the skewed clock: minted at T, expiring at T+5m, the
	// owner's session is gone once T+3m passes on the client's clock.
	w.clock.Advance(3 * time.Minute)
	p, err2 = w.owner.key.Make(http.MethodPost, w.url(api.RouteDecrypt), w.owner.handle, w.clock.Now().Add(skew))
	if err2 != nil {
		t.Fatal(err2)
	}
	err = w.decode(api.RouteDecrypt, w.do(request{route: api.RouteDecrypt, body: w.decryptReq(), handle: w.owner.handle, proofToken: p}), nil)
	wantRefusal(t, "session by the skewed clock", err, api.LayerGateway, api.CodeSessionExpired, http.StatusUnauthorized)
}

func TestHTTPControls(t *testing.T) {
	w := newWorld(t)
	// Refused without the admin's credentials.
	for _, route := range []string{api.RouteAdminTestFaults, api.RouteAdminTestCounts, api.RouteAdminTestDropServiceSessions} {
		err := w.call(route, w.svc.handle, w.svc.sender, nil, nil)
		wantRefusal(t, route, err, api.LayerGateway, api.CodeAdminAuthRequired, http.StatusUnauthorized)
	}
	w.gw.ResetCounts()
	var f Faults
	wantOK(t, "set faults", w.admin(api.RouteAdminTestFaults, Faults{FailNext: map[string]int{api.RouteACLGet: 1}, Status: 500}, &f))
	if f.FailNext[api.RouteACLGet] != 1 || f.Status != 500 {
		t.Errorf("faults answered %+v", f)
	}
	err := w.call(api.RouteACLGet, w.owner.handle, w.owner.key, api.TTagRequest{TTag: w.key.TTag}, nil)
	wantRefusal(t, "injected over HTTP", err, api.LayerGateway, api.CodeInjectedFault, http.StatusInternalServerError)
	err = w.admin(api.RouteAdminTestFaults, Faults{Status: 404}, nil)
	wantRefusal(t, "status not 5xx", err, api.LayerGateway, api.CodeBadRequest, http.StatusBadRequest)
	err = w.admin(api.RouteAdminTestFaults, []byte(`{"delay":"1s"}`), nil)
	wantRefusal(t, "delay as a string", err, api.LayerGateway, api.CodeBadRequest, http.StatusBadRequest)

	var counts CountsResponse
	wantOK(t, "counts", w.admin(api.RouteAdminTestCounts, CountsRequest{Reset: true}, &counts))
	if counts.Counts[api.RouteACLGet] != 1 || len(counts.Counts) != 1 {
		t.Errorf("counts %v, want one acl/get and no control route", counts.Counts)
	}
	var after CountsResponse
	wantOK(t, "counts after reset", w.admin(api.RouteAdminTestCounts, nil, &after))
	if after.Counts == nil || len(after.Counts) != 0 {
		t.Errorf("counts after reset %v", after.Counts)
	}

	wantOK(t, "drop service sessions", w.admin(api.RouteAdminTestDropServiceSessions, nil, nil))
	key, _ := proof.NewKey()
	err = w.call(api.RouteScoped, w.svc.handle, w.svc.sender, api.ScopedRequest{ActingAs: w.alice.Name, HolderJWK: key.PublicJWK(), TTLSeconds: 60}, nil)
	wantRefusal(t, "mint after drop", err, api.LayerGateway, api.CodeServiceSessionExpired, http.StatusUnauthorized)
}

// TestDelayActingAs: a delay narrowed to one principal holds that
// principal's crypto calls only; another principal's are answered while
// the first is still held, and lifting the faults lets it go.
func TestDelayActingAs(t *testing.T) {
	w := newWorld(t)
	bob := w.env.scoped(w.svc, w.bob, w.key.TTag)
	w.gw.SetFaults(Faults{Delay: time.Hour, DelayActingAs: w.alice.Name})
	held := make(chan *api.Error, 1)
	before := w.gw.Count(api.RouteDecrypt)
	go func() {
		_, err := w.decrypt(w.owner, w.decryptReq())
		held <- err
	}()
	for w.gw.Count(api.RouteDecrypt) == before {
		time.Sleep(time.Millisecond)
	}
	_, err := w.decrypt(bob, w.decryptReq())
	wantRefusal(t, "bob's decrypt, answered at once", err, api.LayerKeyServer, api.CodeACLDenied, http.StatusForbidden)
	select {
	case err := <-held:
		t.Fatalf("alice's decrypt was answered (%v) while her delay held", err)
	default:
	}
	w.gw.SetFaults(Faults{})
	if err := <-held; err != nil {
		t.Fatalf("alice's decrypt after the delay was lifted: %v", err)
	}
}
