package gateway

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/proof"
	"github.com/pdmcp/pdmcp/internal/testutil"
)

// Admin credentials of the fake Gateway.
const (
	testAdminUser     = "admin"
	testAdminPassword = "adm1n-pa55word-never-logged"
)

// testCA is a CA made for one test, with its certificate in a PEM file.
type testCA struct {
	*testutil.CA
	file string
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	ca := testutil.NewCA(t, name)
	file := filepath.Join(t.TempDir(), name+".pem")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return &testCA{CA: ca, file: file}
}

// serverCert issues a server certificate for 127.0.0.1 and localhost.
func (ca *testCA) serverCert(t *testing.T) tls.Certificate {
	t.Helper()
	der, key := ca.Sign(t, &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "gateway"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
	})
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// seenProof is one verified proof, with the route it came on.
type seenProof struct {
	route  string
	raw    string
	claims proof.Claims
}

// fakeGateway is a small Gateway that checks sessions and proofs the way
// the contract says, and does toy crypto. Tests steer it with its fields.
type fakeGateway struct {
	t   *testing.T
	srv *httptest.Server
	ca  *testCA

	// The service it knows, from GenerateServiceCredentials.
	certFile, loginKeyFile, senderKeyFile string
	certFP, senderJKT                     string

	mu sync.Mutex
	// skew is the fake's clock minus the real one.
	skew time.Duration
	// expireService answers that many service-session requests with
	// SERVICE_SESSION_EXPIRED, whatever the handle.
	expireService int
	// wrongJKT makes a scoped mint answer a jkt other than the holder key's.
	wrongJKT bool
	// override, when set, answers a request instead; it returns false to
	// let the fake handle it.
	override func(w http.ResponseWriter, r *http.Request) bool

	logins   int
	services map[string]bool
	scoped   map[string]*fakeScoped
	jtis     map[string]bool
	proofs   []seenProof
	handles  []string // every handle issued
	requests []string // routes in the order received
}

type fakeScoped struct {
	jkt     string
	objects []string
	revoked bool
}

// newFakeGateway starts the fake on 127.0.0.1 over TLS, with a certificate
// from its own CA, and makes service credentials for it in a temp dir.
func newFakeGateway(t *testing.T) *fakeGateway {
	t.Helper()
	g := &fakeGateway{t: t, ca: newTestCA(t, "gateway-ca"),
		services: map[string]bool{}, scoped: map[string]*fakeScoped{}, jtis: map[string]bool{}}
	var err error
	g.certFile, g.loginKeyFile, g.senderKeyFile, err = GenerateServiceCredentials(t.TempDir(), "svc")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := LoadCertificate(g.certFile)
	if err != nil {
		t.Fatal(err)
	}
	g.certFP = proof.CertFingerprint(cert)
	sk, err := LoadSenderKey(g.senderKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := proof.FromECDSA(sk)
	if err != nil {
		t.Fatal(err)
	}
	g.senderJKT = pk.JKT()

	g.srv = httptest.NewUnstartedServer(http.HandlerFunc(g.serve))
	g.srv.TLS = &tls.Config{Certificates: []tls.Certificate{g.ca.serverCert(t)}, MinVersion: tls.VersionTLS12}
	g.srv.StartTLS()
	t.Cleanup(g.srv.Close)
	return g
}

// config is a client config for the fake, trusting only its CA.
func (g *fakeGateway) config() Config {
	return Config{
		BaseURL:         g.srv.URL,
		TrustFile:       g.ca.file,
		ServiceCertFile: g.certFile,
		LoginKeyFile:    g.loginKeyFile,
		SenderKeyFile:   g.senderKeyFile,
	}
}

func (g *fakeGateway) client(t *testing.T) *Client {
	t.Helper()
	c, err := New(g.config())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// aliceSession is a session acting as xa.test.alice, minted on a new
// client.
func (g *fakeGateway) aliceSession(t *testing.T) *Session {
	t.Helper()
	s, err := g.client(t).Mint(t.Context(), MintRequest{ActingAs: "xa.test.alice"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (g *fakeGateway) set(f func(g *fakeGateway)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f(g)
}

func (g *fakeGateway) loginCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.logins
}

func (g *fakeGateway) seenProofs() []seenProof {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]seenProof(nil), g.proofs...)
}

func (g *fakeGateway) issuedHandles() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.handles...)
}

// dropServiceSessions forgets every service session, as a Gateway does
// after an idle spell.
func (g *fakeGateway) dropServiceSessions() {
	g.set(func(g *fakeGateway) { g.services = map[string]bool{} })
}

func (g *fakeGateway) now() time.Time { return time.Now().Add(g.skew) }

func (g *fakeGateway) newHandle() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		g.t.Error(err)
	}
	h := "h-" + hex.EncodeToString(b)
	g.handles = append(g.handles, h)
	return h
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func refuse(w http.ResponseWriter, status int, layer, code string) {
	writeJSON(w, status, api.ErrorBody{Error: api.Error{Layer: layer, Code: code, Status: status,
		Detail: "refused by the fake gateway"}})
}

func (g *fakeGateway) serve(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	w.Header().Set("Date", g.now().UTC().Format(http.TimeFormat))
	g.requests = append(g.requests, r.URL.Path)
	override := g.override
	g.mu.Unlock()
	if override != nil && override(w, r) {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if r.Method != http.MethodPost {
		refuse(w, http.StatusMethodNotAllowed, api.LayerGateway, api.CodeBadRequest)
		return
	}
	scheme := "https://"
	if r.TLS == nil {
		scheme = "http://"
	}
	htu := scheme + r.Host + r.URL.Path
	route := r.URL.Path

	switch route {
	case api.RouteServiceLogin:
		g.serviceLogin(w, r, htu)
		return
	case api.RouteAdminRegisterService, api.RouteAdminBindProvider:
		g.admin(w, r, route)
		return
	case api.RouteAdminCreatePrincipal, api.RouteAdminGetPrincipal, api.RouteAdminDeletePrincipal,
		api.RouteAdminMapIdentity, api.RouteAdminUnmapIdentity:
		if _, _, ok := r.BasicAuth(); ok {
			g.admin(w, r, route)
			return
		}
	}

	handle, ok := strings.CutPrefix(r.Header.Get("Authorization"), "DPoP ")
	if !ok || handle == "" {
		refuse(w, http.StatusUnauthorized, api.LayerGateway, api.CodeSessionMissing)
		return
	}
	isService := route == api.RouteScoped || strings.HasPrefix(route, "/api/v1/admin/") ||
		(route == api.RouteRevoke && g.services[handle])
	wantJKT := g.senderJKT
	var sc *fakeScoped
	if isService {
		if !g.services[handle] || g.expireService > 0 {
			if g.expireService > 0 {
				g.expireService--
			}
			refuse(w, http.StatusUnauthorized, api.LayerGateway, api.CodeServiceSessionExpired)
			return
		}
	} else {
		sc = g.scoped[handle]
		if sc == nil {
			refuse(w, http.StatusUnauthorized, api.LayerGateway, api.CodeSessionMissing)
			return
		}
		if sc.revoked {
			refuse(w, http.StatusUnauthorized, api.LayerGateway, api.CodeSessionRevoked)
			return
		}
		wantJKT = sc.jkt
	}
	if !g.checkProof(w, r, route, htu, handle, wantJKT) {
		return
	}

	switch route {
	case api.RouteScoped:
		var req api.ScopedRequest
		if !decode(w, r, &req) {
			return
		}
		jkt, err := proof.ThumbprintJSON(req.HolderJWK)
		if err != nil {
			refuse(w, http.StatusBadRequest, api.LayerGateway, api.CodeBadRequest)
			return
		}
		if g.wrongJKT {
			jkt = g.senderJKT
		}
		h := g.newHandle()
		g.scoped[h] = &fakeScoped{jkt: jkt, objects: req.Objects}
		actingAs := req.ActingAs
		if actingAs == "" {
			actingAs = "xa.test.mapped-user" // the principal a subject token maps to
		}
		writeJSON(w, http.StatusOK, api.ScopedResponse{Handle: h, ActingAs: actingAs, SystemID: 7,
			PrincipalID: "1001", JKT: jkt, ExpiresAt: g.now().Add(time.Duration(req.TTLSeconds) * time.Second),
			Objects: req.Objects})
	case api.RouteRevoke:
		if isService {
			delete(g.services, handle)
		} else {
			sc.revoked = true
		}
		writeJSON(w, http.StatusOK, api.RevokeResponse{Revoked: true})
	case api.RouteWiden:
		var req api.WidenRequest
		if !decode(w, r, &req) {
			return
		}
		sc.objects = append(sc.objects, req.Objects...)
		writeJSON(w, http.StatusOK, api.ScopedResponse{Objects: sc.objects})
	case api.RouteEncrypt:
		var req api.EncryptRequest
		if !decode(w, r, &req) {
			return
		}
		ct, ok := toyCipherBase64(w, req.Plaintext)
		if !ok {
			return
		}
		resp := api.EncryptResponse{TTag: req.TTag, IV: req.IV, Ciphertext: ct, Link: "link-1"}
		if resp.IV == "" {
			resp.IV = base64.StdEncoding.EncodeToString(make([]byte, api.IVBytes))
		}
		if resp.TTag == "" {
			resp.TTag, resp.Minted = "ttag-minted", true
			sc.objects = append(sc.objects, resp.TTag)
		}
		writeJSON(w, http.StatusOK, resp)
	case api.RouteDecrypt:
		var req api.DecryptRequest
		if !decode(w, r, &req) {
			return
		}
		if pt, ok := toyCipherBase64(w, req.Ciphertext); ok {
			writeJSON(w, http.StatusOK, api.DecryptResponse{Plaintext: pt, Link: "link-1"})
		}
	default:
		answerPrincipalOrOK(w, r, route)
	}
}

// answerPrincipalOrOK answers the routes both the admin and a service
// session may call: a principal's record for the principal routes, OK for
// the rest.
func answerPrincipalOrOK(w http.ResponseWriter, r *http.Request, route string) {
	if route != api.RouteAdminCreatePrincipal && route != api.RouteAdminGetPrincipal {
		writeJSON(w, http.StatusOK, api.OKResponse{OK: true})
		return
	}
	var req api.PrincipalRequest
	if !decode(w, r, &req) {
		return
	}
	writeJSON(w, http.StatusOK, api.Principal{Name: req.Name, SystemID: 7, PrincipalID: "1001", Roles: api.DefaultRoles})
}

// toyCipher stands in for AES-GCM: the client does not look inside.
func toyCipher(b []byte) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		out[i] = c ^ 0x5a
	}
	return out
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		refuse(w, http.StatusBadRequest, api.LayerGateway, api.CodeBadRequest)
		return false
	}
	return true
}

// toyCipherBase64 applies toyCipher to a base64 field, both ways (the
// toy is its own inverse): a field that is not base64 is refused as a bad
// request.
func toyCipherBase64(w http.ResponseWriter, field string) (string, bool) {
	b, err := base64.StdEncoding.DecodeString(field)
	if err != nil {
		refuse(w, http.StatusBadRequest, api.LayerGateway, api.CodeBadRequest)
		return "", false
	}
	return base64.StdEncoding.EncodeToString(toyCipher(b)), true
}

// checkProof verifies the request's proof as the reference does: form,
// htm, htu, ath, iat against the fake's clock, replay and key binding.
func (g *fakeGateway) checkProof(w http.ResponseWriter, r *http.Request, route, htu, handle, wantJKT string) bool {
	raw := r.Header.Get("DPoP")
	v, err := proof.Verify(raw, r.Method, htu, handle, g.now(), api.ProofWindow)
	switch {
	case errors.Is(err, proof.ErrMissing):
		refuse(w, http.StatusUnauthorized, api.LayerGateway, api.CodeProofMissing)
		return false
	case errors.Is(err, proof.ErrStale):
		refuse(w, http.StatusUnauthorized, api.LayerGateway, api.CodeProofStale)
		return false
	case err != nil:
		refuse(w, http.StatusUnauthorized, api.LayerGateway, api.CodeProofInvalid)
		return false
	}
	if g.jtis[v.Claims.JTI] {
		refuse(w, http.StatusUnauthorized, api.LayerGateway, api.CodeProofReplayed)
		return false
	}
	g.jtis[v.Claims.JTI] = true
	if v.JKT != wantJKT {
		refuse(w, http.StatusUnauthorized, api.LayerGateway, api.CodeProofKeyMismatch)
		return false
	}
	g.proofs = append(g.proofs, seenProof{route: route, raw: raw, claims: v.Claims})
	return true
}

func (g *fakeGateway) serviceLogin(w http.ResponseWriter, r *http.Request, htu string) {
	if r.Header.Get("Authorization") != "" {
		refuse(w, http.StatusBadRequest, api.LayerGateway, api.CodeBadRequest)
		return
	}
	var req api.ServiceLoginRequest
	if !decode(w, r, &req) {
		return
	}
	va, err := proof.VerifyAssertion(req.Assertion, htu, g.now(), api.ProofWindow)
	if errors.Is(err, proof.ErrStale) {
		refuse(w, http.StatusUnauthorized, api.LayerGateway, api.CodeProofStale)
		return
	}
	if err != nil || proof.CertFingerprint(va.Certificate) != g.certFP {
		refuse(w, http.StatusUnauthorized, api.LayerGateway, api.CodeServiceLoginRefused)
		return
	}
	if !g.checkProof(w, r, api.RouteServiceLogin, htu, "", g.senderJKT) {
		return
	}
	g.logins++
	h := g.newHandle()
	g.services[h] = true
	writeJSON(w, http.StatusOK, api.ServiceLoginResponse{Handle: h, ExpiresAt: g.now().Add(30 * time.Minute),
		Prefix: "xa.test.", SystemID: 7, ServiceID: "svc-1"})
}

func (g *fakeGateway) admin(w http.ResponseWriter, r *http.Request, route string) {
	user, pass, ok := r.BasicAuth()
	if !ok || user != testAdminUser || pass != testAdminPassword {
		refuse(w, http.StatusUnauthorized, api.LayerGateway, api.CodeAdminAuthRequired)
		return
	}
	switch route {
	case api.RouteAdminRegisterService:
		writeJSON(w, http.StatusOK, api.RegisterServiceResponse{ServiceID: "svc-1", SystemID: 7, Prefix: "xa.test."})
	default:
		answerPrincipalOrOK(w, r, route)
	}
}

func newTestLogger() (*slog.Logger, *testutil.LogBuffer) {
	b := &testutil.LogBuffer{}
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

// asAPIError fails the test unless err is an *api.Error.
func asAPIError(t *testing.T, err error) *api.Error {
	t.Helper()
	var ae *api.Error
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T) is not an *api.Error", err, err)
	}
	return ae
}
