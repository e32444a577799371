package reference

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/proof"
)

// Handle kinds: a handle says which table it belongs to, so that a service
// handle the Gateway has forgotten is still answered as an expired service
// session (the client signs in again) rather than as no session at all.
const (
	serviceHandlePrefix = "svc_"
	scopedHandlePrefix  = "scp_"
)

// endedSessionMemory is how long a revoked or expired scoped session is
// remembered, so that its use is answered SESSION_REVOKED or
// SESSION_EXPIRED rather than SESSION_MISSING.
const endedSessionMemory = time.Hour

// serviceSession is a signed-in service.
type serviceSession struct {
	serviceID string
	systemID  int64
	prefix    string
	jkt       string
	expiresAt time.Time
}

// scopedSession is a session acting as one principal over a set of objects,
// bound to a holder key.
type scopedSession struct {
	serviceID   string
	principal   string
	systemID    int64
	principalID string
	jkt         string
	expiresAt   time.Time

	mu      sync.Mutex
	revoked bool
	objects map[string]bool
	order   []string
	// reserved counts scope places held for keys being minted.
	reserved int
}

// inScope reports whether ttag is one of the session's objects.
func (s *scopedSession) inScope(ttag string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.objects[ttag]
}

// objectList is the session's objects in the order they joined.
func (s *scopedSession) objectList() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string{}, s.order...)
}

// widen adds objects, refusing the lot when the session would cover more
// than api.MaxObjects.
func (s *scopedSession) widen(objects []string) *api.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var add []string
	seen := map[string]bool{}
	for _, o := range objects {
		if !s.objects[o] && !seen[o] {
			seen[o] = true
			add = append(add, o)
		}
	}
	if n := len(s.order) + s.reserved + len(add); n > api.MaxObjects {
		return scopeTooWide(n)
	}
	for _, o := range add {
		s.objects[o] = true
		s.order = append(s.order, o)
	}
	return nil
}

// reserveMint holds a scope place for a key about to be minted; the caller
// then calls finishMint with the new t-Tag, or "" when no key was made.
func (s *scopedSession) reserveMint() *api.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.order) + s.reserved + 1; n > api.MaxObjects {
		return gatewayError(api.CodeScopeTooWide, http.StatusBadRequest, fmt.Sprintf(
			"a minted key joins the session's scope, which already covers %d objects; mint a new session to create more keys", api.MaxObjects))
	}
	s.reserved++
	return nil
}

func (s *scopedSession) finishMint(ttag string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reserved--
	if ttag != "" && !s.objects[ttag] {
		s.objects[ttag] = true
		s.order = append(s.order, ttag)
	}
}

func scopeTooWide(n int) *api.Error {
	return gatewayError(api.CodeScopeTooWide, http.StatusBadRequest, fmt.Sprintf(
		"a scoped session covers at most %d objects and this one would cover %d; split the work across sessions", api.MaxObjects, n))
}

// sessionTable holds every session in memory.
type sessionTable struct {
	mu      sync.Mutex
	service map[string]*serviceSession
	scoped  map[string]*scopedSession
	// peak is the most scoped sessions live at once, counted at each mint
	// since the Gateway opened or its counts were reset.
	peak int
}

func newSessionTable() *sessionTable {
	return &sessionTable{service: map[string]*serviceSession{}, scoped: map[string]*scopedSession{}}
}

func (t *sessionTable) addService(s *serviceSession) string {
	handle := randomHandle(serviceHandlePrefix)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.service[handle] = s
	return handle
}

func (t *sessionTable) addScoped(s *scopedSession, now time.Time) string {
	handle := randomHandle(scopedHandlePrefix)
	t.mu.Lock()
	defer t.mu.Unlock()
	// Forget long-ended sessions as new ones arrive.
	for h, old := range t.scoped {
		if now.Sub(old.expiresAt) > endedSessionMemory {
			delete(t.scoped, h)
		}
	}
	t.scoped[handle] = s
	t.peak = max(t.peak, t.liveLocked(now))
	return handle
}

// liveLocked counts the scoped sessions neither revoked nor expired.
func (t *sessionTable) liveLocked(now time.Time) int {
	n := 0
	for _, s := range t.scoped {
		s.mu.Lock()
		if !s.revoked && now.Before(s.expiresAt) {
			n++
		}
		s.mu.Unlock()
	}
	return n
}

// live is how many scoped sessions are live now; peak the most that were
// live at once.
func (t *sessionTable) live(now time.Time) (live, peak int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.liveLocked(now), t.peak
}

// resetPeak starts the peak count again from the sessions live now.
func (t *sessionTable) resetPeak(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.peak = t.liveLocked(now)
}

// revokeScoped revokes every live scoped session acting as principal (all
// of them when principal is empty) and says how many.
func (t *sessionTable) revokeScoped(principal string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, s := range t.scoped {
		if principal != "" && s.principal != principal {
			continue
		}
		s.mu.Lock()
		if !s.revoked {
			s.revoked = true
			n++
		}
		s.mu.Unlock()
	}
	return n
}

// lookupService is the live service session of handle. Anything else on a
// service route is answered SERVICE_SESSION_EXPIRED: the client's remedy is
// to sign in again.
func (t *sessionTable) lookupService(handle string, now time.Time) (*serviceSession, *api.Error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, isScoped := t.scoped[handle]; isScoped {
		return nil, gatewayError(api.CodeSessionMissing, http.StatusUnauthorized,
			"this route takes a service session, not a scoped one; present the service's handle")
	}
	s, ok := t.service[handle]
	if ok && now.Before(s.expiresAt) {
		return s, nil
	}
	delete(t.service, handle)
	return nil, gatewayError(api.CodeServiceSessionExpired, http.StatusUnauthorized,
		"the service session has ended or is unknown to this Gateway; sign in as the service again, then retry once")
}

// lookupScoped is the live scoped session of handle.
func (t *sessionTable) lookupScoped(handle string, now time.Time) (*scopedSession, *api.Error) {
	t.mu.Lock()
	s, ok := t.scoped[handle]
	_, isService := t.service[handle]
	t.mu.Unlock()
	switch {
	case isService:
		return nil, gatewayError(api.CodeSessionMissing, http.StatusUnauthorized,
			"this route takes a scoped session, not the service's; mint a scoped session and present its handle")
	case !ok:
		return nil, gatewayError(api.CodeSessionMissing, http.StatusUnauthorized,
			"the handle names no session of this Gateway; mint a scoped session first")
	}
	s.mu.Lock()
	revoked := s.revoked
	s.mu.Unlock()
	if revoked {
		return nil, gatewayError(api.CodeSessionRevoked, http.StatusUnauthorized,
			"the scoped session was revoked; mint a new one if the work should go on")
	}
	if !now.Before(s.expiresAt) {
		return nil, gatewayError(api.CodeSessionExpired, http.StatusUnauthorized,
			"the scoped session has expired; mint a new one")
	}
	return s, nil
}

func (t *sessionTable) isScopedHandle(handle string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.scoped[handle]
	return ok
}

// isServiceHandle is true for a live service handle and for any handle
// shaped like one, so that a forgotten service handle is answered
// SERVICE_SESSION_EXPIRED.
func (t *sessionTable) isServiceHandle(handle string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.service[handle]
	return ok || strings.HasPrefix(handle, serviceHandlePrefix)
}

func (t *sessionTable) revokeService(handle string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.service, handle)
}

// dropServiceSessions forgets every service session.
func (t *sessionTable) dropServiceSessions() {
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.service)
}

// Service sign-in.

func (g *Gateway) serviceLogin(ctx context.Context, c *call) (any, error) {
	var req api.ServiceLoginRequest
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	if req.Assertion == "" {
		return nil, gatewayError(api.CodeBadRequest, http.StatusBadRequest,
			"the sign-in needs an assertion signed by the service's login key; send one")
	}
	loginURL := requestURL(c.r)
	va, err := proof.VerifyAssertion(req.Assertion, loginURL, c.now, api.ProofWindow)
	if err != nil {
		return nil, loginRefused("the login assertion was not accepted (" + assertionProblem(err) + "); make a fresh one for this Gateway's sign-in URL")
	}
	sv, err := g.store.serviceByFingerprint(ctx, proof.CertFingerprint(va.Certificate))
	if errors.Is(err, errNotFound) {
		return nil, loginRefused("the assertion's certificate is not registered with this Gateway; register the service first")
	}
	if err != nil {
		return nil, err
	}
	if c.now.Before(va.Certificate.NotBefore) || c.now.After(va.Certificate.NotAfter) {
		return nil, loginRefused("the service's certificate is outside its validity period; renew it and register it again")
	}
	if e := g.checkProof(c.r, "", sv.SenderJKT, c.now); e != nil {
		return nil, e
	}
	// One sign-in per assertion: it is remembered as a proof would be.
	if !g.replay.remember("assertion:"+va.Claims.JTI, time.Unix(va.Claims.Exp, 0), c.now) {
		return nil, loginRefused("this login assertion was already used; make a fresh one for each sign-in")
	}
	s := &serviceSession{serviceID: sv.ID, systemID: sv.SystemID, prefix: sv.Prefix, jkt: sv.SenderJKT,
		expiresAt: c.now.Add(g.cfg.ServiceSessionTTL)}
	handle := g.sessions.addService(s)
	return api.ServiceLoginResponse{Handle: handle, ExpiresAt: s.expiresAt.UTC(), Prefix: sv.Prefix,
		SystemID: sv.SystemID, ServiceID: sv.ID}, nil
}

func loginRefused(detail string) *api.Error {
	return gatewayError(api.CodeServiceLoginRefused, http.StatusUnauthorized, detail)
}

func assertionProblem(err error) string {
	if errors.Is(err, proof.ErrStale) {
		return "its time is outside the Gateway's window"
	}
	// The proof package's messages name the failed check, not secrets.
	return strings.TrimPrefix(err.Error(), proof.ErrInvalid.Error()+": ")
}

// Scoped sessions.

func (g *Gateway) mintScoped(ctx context.Context, c *call) (any, error) {
	sv, err := g.store.serviceByID(ctx, c.service.serviceID)
	if err != nil {
		return nil, fmt.Errorf("service of a live session: %w", err)
	}
	if !sv.AllowScoped {
		return nil, gatewayError(api.CodeScopedNotAllowed, http.StatusForbidden,
			"this service was registered without allowScoped; register it with allowScoped to mint scoped sessions")
	}
	var req api.ScopedRequest
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	objects, e := distinctObjects(req.Objects)
	if e != nil {
		return nil, e
	}
	if len(objects) > api.MaxObjects {
		return nil, scopeTooWide(len(objects))
	}
	ttl := time.Duration(req.TTLSeconds) * time.Second
	if req.TTLSeconds <= 0 || ttl > api.MaxScopedTTL {
		return nil, gatewayError(api.CodeBadRequest, http.StatusBadRequest, fmt.Sprintf(
			"ttlSeconds must be between 1 and %d; ask for a shorter session", int(api.MaxScopedTTL/time.Second)))
	}
	jkt, err := proof.ThumbprintJSON(req.HolderJWK)
	if err != nil {
		return nil, gatewayError(api.CodeBadRequest, http.StatusBadRequest,
			"holderJwk must be a public P-256 JWK; send the fresh holder key's public half")
	}
	if (req.ActingAs == "") == (req.SubjectToken == "") {
		return nil, gatewayError(api.CodeBadRequest, http.StatusBadRequest,
			"name exactly one of actingAs (a principal) and subjectToken (a provider's token)")
	}
	expiresAt := c.now.Add(ttl)
	var p *principal
	if req.ActingAs != "" {
		p, err = g.actingAs(ctx, sv, req.ActingAs)
	} else {
		var tokenExp time.Time
		p, tokenExp, err = g.subjectPrincipal(ctx, sv, req.SubjectToken, c.now)
		if err == nil && tokenExp.Before(expiresAt) {
			expiresAt = tokenExp
		}
	}
	if err != nil {
		return nil, err
	}
	if other := g.faults.mintAsPrincipal(); other != "" {
		// Fault: the session acts as someone else than the service asked
		// for or the provider's identity maps to.
		if p, err = g.store.principalByName(ctx, g.store.db, other); err != nil {
			return nil, fmt.Errorf("fault mintAsPrincipal %q: %w", other, err)
		}
	}
	s := &scopedSession{serviceID: sv.ID, principal: p.Name, systemID: p.SystemID, principalID: p.PrincipalID,
		jkt: jkt, expiresAt: expiresAt, objects: map[string]bool{}, order: objects}
	for _, o := range objects {
		s.objects[o] = true
	}
	handle := g.sessions.addScoped(s, c.now)
	return api.ScopedResponse{Handle: handle, ActingAs: p.Name, SystemID: p.SystemID, PrincipalID: p.PrincipalID,
		JKT: jkt, ExpiresAt: expiresAt.UTC(), Objects: s.objectList()}, nil
}

// distinctObjects drops repeats, keeping the first order, and refuses empty
// t-Tags.
func distinctObjects(objects []string) ([]string, *api.Error) {
	seen := map[string]bool{}
	out := []string{}
	for _, o := range objects {
		if o == "" {
			return nil, gatewayError(api.CodeBadRequest, http.StatusBadRequest,
				"objects holds an empty t-Tag; list only the t-Tags the work needs")
		}
		if !seen[o] {
			seen[o] = true
			out = append(out, o)
		}
	}
	return out, nil
}

// actingAs is the enabled principal named, inside the service's prefix.
func (g *Gateway) actingAs(ctx context.Context, sv *service, name string) (*principal, error) {
	refused := gatewayError(api.CodeActingAsRefused, http.StatusForbidden,
		"actingAs must name an enabled principal inside this service's prefix; create it or pick another")
	if !strings.HasPrefix(name, sv.Prefix) {
		return nil, refused
	}
	p, err := g.store.principalByName(ctx, g.store.db, name)
	if errors.Is(err, errNotFound) {
		return nil, refused
	}
	if err != nil {
		return nil, err
	}
	if p.ServiceID != sv.ID || p.Disabled {
		return nil, refused
	}
	return p, nil
}

func (g *Gateway) widen(_ context.Context, c *call) (any, error) {
	var req api.WidenRequest
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	objects, e := distinctObjects(req.Objects)
	if e != nil {
		return nil, e
	}
	if e := c.scoped.widen(objects); e != nil {
		return nil, e
	}
	s := c.scoped
	return api.ScopedResponse{ActingAs: s.principal, SystemID: s.systemID, PrincipalID: s.principalID,
		JKT: s.jkt, ExpiresAt: s.expiresAt.UTC(), Objects: s.objectList()}, nil
}

// revokeSessions is the administrator's revoke of scoped sessions.
func (g *Gateway) revokeSessions(_ context.Context, c *call) (any, error) {
	var req api.RevokeSessionsRequest
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	n := g.sessions.revokeScoped(req.Principal)
	g.log.Info("scoped sessions revoked by the administrator", "count", n)
	return api.RevokeSessionsResponse{Revoked: n}, nil
}

func (g *Gateway) revoke(_ context.Context, c *call) (any, error) {
	var req struct{}
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	if c.scoped != nil {
		c.scoped.mu.Lock()
		c.scoped.revoked = true
		c.scoped.mu.Unlock()
	} else {
		handle, _ := sessionHandle(c.r)
		g.sessions.revokeService(handle)
	}
	return api.RevokeResponse{Revoked: true}, nil
}
