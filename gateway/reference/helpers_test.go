package reference

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/proof"
	"github.com/pdmcp/pdmcp/internal/testutil"
)

const (
	testAdminUser     = "admin"
	testAdminPassword = "correct horse battery staple"
)

// env is a reference Gateway over real HTTPS on 127.0.0.1, with its
// SQLite file in a temporary folder.
type env struct {
	t *testing.T
	// clock is the Gateway's clock and the clients' in these tests: it
	// moves only when a test moves it.
	clock  *testutil.Clock
	dbPath string
	cfg    Config
	gw     *Gateway
	srv    *httptest.Server
}

func newEnv(t *testing.T) *env {
	return newEnvWith(t, func(*Config) {})
}

func newEnvWith(t *testing.T, adjust func(*Config)) *env {
	t.Helper()
	e := &env{t: t, clock: testutil.NewClock(time.Now().UTC().Truncate(time.Second)),
		dbPath: filepath.Join(t.TempDir(), "gateway.sqlite")}
	e.cfg = Config{DBPath: e.dbPath, AdminUser: testAdminUser, AdminPassword: testAdminPassword, Now: e.clock.Now}
	adjust(&e.cfg)
	e.start()
	t.Cleanup(e.stop)
	return e
}

func (e *env) start() {
	e.t.Helper()
	gw, err := Open(context.Background(), e.cfg)
	if err != nil {
		e.t.Fatalf("Open: %v", err)
	}
	e.gw = gw
	e.srv = httptest.NewUnstartedServer(gw)
	e.srv.StartTLS()
}

func (e *env) stop() {
	if e.gw != nil {
		// Let go of any request an injected Delay still holds, which
		// the server's Close would otherwise wait for.
		e.gw.SetFaults(Faults{})
	}
	if e.srv != nil {
		e.srv.Close()
		e.srv = nil
	}
	if e.gw != nil {
		if err := e.gw.Close(); err != nil {
			e.t.Errorf("Close: %v", err)
		}
		e.gw = nil
	}
}

// restart closes the Gateway and opens a new one on the same database,
// served at a new address.
func (e *env) restart() {
	e.t.Helper()
	e.stop()
	e.start()
}

func (e *env) url(route string) string { return e.srv.URL + route }

// request is one request to the Gateway. The proof is made by key for
// handle unless proofToken or noProof says otherwise.
type request struct {
	route      string
	method     string // POST when ""
	body       any    // JSON-encoded; []byte is sent as is
	handle     string
	key        *proof.Key
	proofToken string
	noProof    bool
	basic      bool
	header     http.Header
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (e *env) do(r request) response {
	e.t.Helper()
	var body []byte
	switch b := r.body.(type) {
	case nil:
	case []byte:
		body = b
	default:
		var err error
		if body, err = json.Marshal(b); err != nil {
			e.t.Fatalf("encode body: %v", err)
		}
	}
	method := r.method
	if method == "" {
		method = http.MethodPost
	}
	req, err := http.NewRequest(method, e.url(r.route), bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if r.handle != "" {
		req.Header.Set("Authorization", "DPoP "+r.handle)
	}
	switch {
	case r.proofToken != "":
		req.Header.Set("DPoP", r.proofToken)
	case r.key != nil && !r.noProof:
		p, err := r.key.Make(method, e.url(r.route), r.handle, e.clock.Now())
		if err != nil {
			e.t.Fatalf("make proof: %v", err)
		}
		req.Header.Set("DPoP", p)
	}
	if r.basic {
		req.SetBasicAuth(testAdminUser, testAdminPassword)
	}
	for k, vs := range r.header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, r.route, err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("read answer: %v", err)
	}
	if _, err := http.ParseTime(resp.Header.Get("Date")); err != nil {
		e.t.Errorf("%s answered without a valid Date header (%q)", r.route, resp.Header.Get("Date"))
	}
	return response{status: resp.StatusCode, header: resp.Header, body: got}
}

// decode turns an answer into out (200) or the refusal it carries.
func (e *env) decode(route string, resp response, out any) *api.Error {
	e.t.Helper()
	if resp.status == http.StatusOK {
		if out != nil {
			if err := json.Unmarshal(resp.body, out); err != nil {
				e.t.Fatalf("%s: decode answer: %v", route, err)
			}
		}
		return nil
	}
	var eb api.ErrorBody
	if err := json.Unmarshal(resp.body, &eb); err != nil {
		e.t.Fatalf("%s: %d answer is not an error body: %v", route, resp.status, err)
	}
	if eb.Error.Status != resp.status {
		e.t.Errorf("%s: body status %d, HTTP status %d", route, eb.Error.Status, resp.status)
	}
	if eb.Error.Detail == "" || eb.Error.Layer == "" {
		e.t.Errorf("%s: refusal %s lacks a layer or detail", route, eb.Error.Code)
	}
	return &eb.Error
}

// call makes a request with a session handle and a proof by key.
func (e *env) call(route, handle string, key *proof.Key, body, out any) *api.Error {
	e.t.Helper()
	return e.decode(route, e.do(request{route: route, body: body, handle: handle, key: key}), out)
}

// admin makes a request with the admin's Basic credentials.
func (e *env) admin(route string, body, out any) *api.Error {
	e.t.Helper()
	return e.decode(route, e.do(request{route: route, body: body, basic: true}), out)
}

func wantOK(t *testing.T, what string, err *api.Error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: refused: %v", what, err)
	}
}

func wantRefusal(t *testing.T, what string, err *api.Error, layer, code string, status int) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: succeeded, want %s %s (%d)", what, layer, code, status)
	}
	if err.Layer != layer || err.Code != code || err.Status != status {
		t.Fatalf("%s: got %s %s (%d) %q, want %s %s (%d)", what, err.Layer, err.Code, err.Status, err.Detail, layer, code, status)
	}
}

// testService is a registered service with its login key, certificate and
// sender key, and its current service session.
type testService struct {
	loginKey *ecdsa.PrivateKey
	cert     *x509.Certificate
	certPEM  string
	sender   *proof.Key
	reg      api.RegisterServiceResponse
	handle   string
}

func newServiceKeys(t *testing.T) *testService {
	t.Helper()
	loginKey := testutil.NewKey(t)
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	cert := testutil.SelfSigned(t, &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "pdmcp test service"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(48 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}, loginKey)
	sender, err := proof.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return &testService{loginKey: loginKey, cert: cert, sender: sender,
		certPEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))}
}

// newService registers a service (prefix "" lets the Gateway choose one)
// and signs it in.
func (e *env) newService(allowScoped bool, prefix string) *testService {
	e.t.Helper()
	s := newServiceKeys(e.t)
	wantOK(e.t, "register service", e.admin(api.RouteAdminRegisterService, api.RegisterServiceRequest{
		Name: "svc-" + randomLink()[:8], Certificate: s.certPEM, SenderJWK: s.sender.PublicJWK(),
		AllowScoped: allowScoped, Prefix: prefix,
	}, &s.reg))
	wantOK(e.t, "service login", e.login(s))
	return s
}

func (e *env) loginRequest(s *testService) request {
	e.t.Helper()
	a, err := proof.MakeAssertion(s.loginKey, s.cert, e.url(api.RouteServiceLogin), e.clock.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	return request{route: api.RouteServiceLogin, body: api.ServiceLoginRequest{Assertion: a}, key: s.sender}
}

func (e *env) login(s *testService) *api.Error {
	e.t.Helper()
	var out api.ServiceLoginResponse
	if err := e.decode(api.RouteServiceLogin, e.do(e.loginRequest(s)), &out); err != nil {
		return err
	}
	s.handle = out.Handle
	return nil
}

// principal creates a principal named prefix+name.
func (e *env) principal(s *testService, name string, roles ...string) api.Principal {
	e.t.Helper()
	var p api.Principal
	wantOK(e.t, "create principal", e.admin(api.RouteAdminCreatePrincipal,
		api.PrincipalRequest{Name: s.reg.Prefix + name, Roles: roles}, &p))
	return p
}

// session is a scoped session and its holder key.
type session struct {
	handle string
	key    *proof.Key
	resp   api.ScopedResponse
}

func (e *env) mint(s *testService, req api.ScopedRequest) (*session, *api.Error) {
	e.t.Helper()
	key, err := proof.NewKey()
	if err != nil {
		e.t.Fatal(err)
	}
	if req.HolderJWK == nil {
		req.HolderJWK = key.PublicJWK()
	}
	if req.TTLSeconds == 0 {
		req.TTLSeconds = 300
	}
	sess := &session{key: key}
	if err := e.call(api.RouteScoped, s.handle, s.sender, req, &sess.resp); err != nil {
		return nil, err
	}
	sess.handle = sess.resp.Handle
	return sess, nil
}

// scoped mints a session acting as principal over objects.
func (e *env) scoped(s *testService, p api.Principal, objects ...string) *session {
	e.t.Helper()
	sess, err := e.mint(s, api.ScopedRequest{Objects: objects, ActingAs: p.Name})
	wantOK(e.t, "mint scoped session", err)
	return sess
}

func (e *env) encrypt(sess *session, req api.EncryptRequest) (api.EncryptResponse, *api.Error) {
	e.t.Helper()
	var out api.EncryptResponse
	err := e.call(api.RouteEncrypt, sess.handle, sess.key, req, &out)
	return out, err
}

func (e *env) decrypt(sess *session, req api.DecryptRequest) (api.DecryptResponse, *api.Error) {
	e.t.Helper()
	var out api.DecryptResponse
	err := e.call(api.RouteDecrypt, sess.handle, sess.key, req, &out)
	return out, err
}

// mintKey has sess mint a key by encrypting text, and returns the answer.
func (e *env) mintKey(sess *session, text string) api.EncryptResponse {
	e.t.Helper()
	out, err := e.encrypt(sess, api.EncryptRequest{Plaintext: b64(text)})
	wantOK(e.t, "mint key", err)
	if !out.Minted {
		e.t.Fatal("encrypt without ttag did not answer minted: true")
	}
	return out
}

func (e *env) audit() []AuditRow {
	e.t.Helper()
	rows, err := e.gw.KeyServerAudit(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return rows
}

func (e *env) grant(sess *session, ttag string, p api.Principal, rights []string, end *time.Time, uses *int) *api.Error {
	e.t.Helper()
	return e.call(api.RouteACLGrant, sess.handle, sess.key, api.ACLGrantRequest{TTag: ttag, SystemID: p.SystemID,
		PrincipalID: p.PrincipalID, Rights: rights, EndTime: end, Uses: uses}, nil)
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
