package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
)

// Pool limits and defaults.
const (
	// DefaultMaxCallers is PoolConfig.MaxCallers when it is zero.
	DefaultMaxCallers = 8
	// DefaultMaxRetryWait is PoolConfig.MaxRetryWait when it is zero.
	DefaultMaxRetryWait = 3 * time.Second
	// DefaultMaxPlaceWait is PoolConfig.MaxPlaceWait when it is zero.
	DefaultMaxPlaceWait = 5 * time.Second
	// PoolReuseMargin: a caller's session is reused only while more than
	// this remains of it, so that it does not run out in the middle of a
	// tool call.
	PoolReuseMargin = 30 * time.Second
	// PoolRevokeTimeout bounds each revoke the pool sends, so that ending
	// one user's session can never hold up another user for long.
	PoolRevokeTimeout = 5 * time.Second
	// DefaultSpareIdle is PoolConfig.SpareIdle when it is zero.
	DefaultSpareIdle = 5 * time.Second
)

// subjectTTLMargin is kept between a session's end and its subject
// token's: the Gateway starts the session's clock when the mint arrives,
// a little after we computed the TTL.
const subjectTTLMargin = time.Second

// ErrPoolClosed is returned by Pool.Session after Pool.EndAll.
var ErrPoolClosed = errors.New("gateway session pool is closed: the server is shutting down")

// ErrSubjectTokenExpired is the cause when a caller's subject token has
// expired, or expires too soon to bind a session to it.
var ErrSubjectTokenExpired = errors.New("the subject token has expired; the user must sign in again")

// ErrPastNotAfter is returned when a session would be needed at or after
// PoolConfig.NotAfter: no session of the pool lives past it.
var ErrPastNotAfter = errors.New("the session pool's notAfter has passed; no session is minted past it")

// SubjectToken is a token the provider issued to the Gateway's audience for
// one user, and when it expires. It prints and logs without the token.
type SubjectToken struct {
	Token  string
	Expiry time.Time
}

// String names the token without revealing it.
func (t SubjectToken) String() string {
	return "SubjectToken{redacted, expiry " + t.Expiry.UTC().Format(time.RFC3339) + "}"
}

// GoString is String, so that %#v prints no token either.
func (t SubjectToken) GoString() string { return t.String() }

// Format makes every fmt verb print String: a struct printed with, say,
// %d would otherwise show its fields.
func (t SubjectToken) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(t.String())) }

// LogValue keeps the token out of structured logs.
func (t SubjectToken) LogValue() slog.Value {
	return slog.GroupValue(slog.Time("expiry", t.Expiry))
}

// SubjectSource gives the calling user's subject token, typically by token
// exchange (package auth), which caches. The pool asks it each time it
// mints a session for that user.
type SubjectSource func(ctx context.Context) (SubjectToken, error)

// Minter mints scoped sessions; *Client is one.
type Minter interface {
	Mint(ctx context.Context, m MintRequest) (*Session, error)
}

// PoolConfig configures a Pool.
type PoolConfig struct {
	// Minter mints the sessions: the service's *Client.
	Minter Minter
	// Objects are the grant's t-Tags; every session covers these (and the
	// keys the user's session was widened to).
	// At least one, at most api.MaxObjects, none empty.
	Objects []string
	// MaxCallers is how many sessions the pool holds at once, at most
	// (DefaultMaxCallers when zero): one per user.
	MaxCallers int
	// MaxPlaceWait is how long a user with no session waits for one of
	// the MaxCallers places when every place is held by a call in flight
	// (DefaultMaxPlaceWait when zero); then the call is refused
	// SESSIONS_BUSY with a Retry-After.
	MaxPlaceWait time.Duration
	// NotAfter, when set, is when every session ends at the latest (the
	// grant's notAfter); no session is minted past it.
	NotAfter time.Time
	// MaxRetryWait: an IDP_UNAVAILABLE whose Retry-After is at most this is
	// waited out once and the mint tried again (DefaultMaxRetryWait when
	// zero). A longer one is returned as it is.
	MaxRetryWait time.Duration
	// SpareIdle: once every place is taken, the user who called least
	// recently, with no call in flight and no call for at least this long,
	// is ended in the background, so that a place is free before a new
	// user needs it (DefaultSpareIdle when zero). Users calling more often
	// than this keep their sessions however many places they fill.
	SpareIdle time.Duration
	// Now is the clock that decides when a session is renewed (time.Now
	// when nil).
	Now func() time.Time
	// Logger gets the pool's events; callers appear only as a 12-hex
	// digest of their id. Nil discards.
	Logger *slog.Logger
}

// Pool keeps one scoped session per user for the HTTP transport: each
// minted from that user's subject token with its own holder key, renewed
// before it runs out, never past NotAfter, and never shared. It is safe for
// concurrent use.
//
// MaxCallers is a hard cap: never more sessions than that are live at the
// Gateway at once, counting those being minted and those being revoked.
// A place is freed ahead of need, in the background, so that a new user's
// first call does not wait on another user's revoke: when a user with no
// session arrives and every place is taken, the user who called least
// recently among those with no call in flight is ended at once (while the
// newcomer's subject token is fetched), and once every place is taken
// again, the least recent such user idle for SpareIdle is ended too. The
// newcomer mints in the place freed (the revoke is confirmed, or the
// holder key destroyed, before the place counts as free); when every place
// is busy, they wait up to MaxPlaceWait and are then refused
// SESSIONS_BUSY, retryable.
//
// Concurrent calls of one user wait for each other, so that they mint at
// most one session; no lock is held across a Gateway request that another
// user's call needs.
type Pool struct {
	minter       Minter
	objects      []string
	maxCallers   int
	maxPlaceWait time.Duration
	notAfter     time.Time
	maxRetryWait time.Duration
	spareIdle    time.Duration
	now          func() time.Time
	log          *slog.Logger

	// bg counts background evictions, waited for by EndAll.
	bg sync.WaitGroup

	mu      sync.Mutex
	callers map[string]*poolEntry
	// places counts entries holding a place (see poolEntry.place).
	places int
	// freed is closed, and replaced, whenever a place is given up or a
	// user's last call in flight ends: a waiter then looks again.
	freed  chan struct{}
	tick   uint64 // orders calls, for least-recently-calling eviction
	closed bool
	// evicting counts places being freed in the background: their
	// sessions are being revoked.
	evicting int
	// spareTimer, when set, looks again for a user idle for spareIdle.
	spareTimer *time.Timer
}

// poolEntry is one user's place in the pool.
type poolEntry struct {
	id     string
	digest string // names the user in logs
	// lock is held by the one call of this user that checks, renews or
	// mints its session, and by whoever takes the entry out of the pool to
	// end it. A channel so that a waiter can give up with its context, and
	// so that eviction can try it without waiting.
	lock chan struct{}

	// Guarded by Pool.mu.
	sess     *Session
	deadline time.Time // on the pool's clock; the session is not used past it
	lastCall uint64
	lastAt   time.Time // when lastCall was, on the pool's clock
	gone     bool      // taken out of the pool; whoever holds lock starts over
	// place says the entry holds one of the MaxCallers places: its
	// session is live, being minted or being revoked. It is given up only
	// once the session that used it is revoked or known gone.
	place bool
	busy  int // calls given the session and not yet released
	// extra are keys this user's session was widened to (decrypt_file),
	// beyond the grant's objects; a renewal or replacement keeps them.
	// Changed with lock and Pool.mu held.
	extra []string
}

func (e *poolEntry) acquire(ctx context.Context) error {
	select {
	case e.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for this user's session: %w", ctx.Err())
	}
}

func (e *poolEntry) tryAcquire() bool {
	select {
	case e.lock <- struct{}{}:
		return true
	default:
		return false
	}
}

func (e *poolEntry) release() { <-e.lock }

// taken is a session taken out of the pool, to revoke.
type taken struct {
	entry *poolEntry
	sess  *Session
}

// NewPool checks cfg and returns an empty pool. It sends nothing.
func NewPool(cfg PoolConfig) (*Pool, error) {
	if cfg.Minter == nil {
		return nil, errors.New("session pool: no minter; give the service's gateway client")
	}
	if len(cfg.Objects) == 0 {
		return nil, errors.New("session pool: no objects; a scoped session must cover at least one of the grant's keys")
	}
	if len(cfg.Objects) > api.MaxObjects {
		return nil, fmt.Errorf("session pool: %d objects, but a scoped session covers at most %d", len(cfg.Objects), api.MaxObjects)
	}
	if slices.Contains(cfg.Objects, "") {
		return nil, errors.New("session pool: an object is empty; list only the grant's t-Tags")
	}
	if cfg.MaxCallers < 0 {
		return nil, fmt.Errorf("session pool: MaxCallers %d is negative", cfg.MaxCallers)
	}
	if cfg.MaxRetryWait < 0 {
		return nil, fmt.Errorf("session pool: MaxRetryWait %s is negative", cfg.MaxRetryWait)
	}
	if cfg.MaxPlaceWait < 0 {
		return nil, fmt.Errorf("session pool: MaxPlaceWait %s is negative", cfg.MaxPlaceWait)
	}
	if cfg.SpareIdle < 0 {
		return nil, fmt.Errorf("session pool: SpareIdle %s is negative", cfg.SpareIdle)
	}
	p := &Pool{
		minter:       cfg.Minter,
		objects:      slices.Clone(cfg.Objects),
		maxCallers:   cmp.Or(cfg.MaxCallers, DefaultMaxCallers),
		maxPlaceWait: cmp.Or(cfg.MaxPlaceWait, DefaultMaxPlaceWait),
		notAfter:     cfg.NotAfter,
		maxRetryWait: cmp.Or(cfg.MaxRetryWait, DefaultMaxRetryWait),
		spareIdle:    cmp.Or(cfg.SpareIdle, DefaultSpareIdle),
		now:          cfg.Now,
		log:          cfg.Logger,
		callers:      map[string]*poolEntry{},
		freed:        make(chan struct{}),
	}
	if p.now == nil {
		p.now = time.Now
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	return p, nil
}

// Session is Acquire for a caller that does not say when it is done: the
// session counts as idle at once (and so may be ended to make room for
// another user).
func (p *Pool) Session(ctx context.Context, callerID string, subject SubjectSource) (*Session, error) {
	s, release, err := p.Acquire(ctx, callerID, subject)
	if err != nil {
		return nil, err
	}
	release()
	return s, nil
}

// Acquire returns the scoped session of the user callerID (their verified
// identity, for example auth.Caller.ID()): the one they hold while more
// than PoolReuseMargin of it remains, or a new one minted from subject,
// living min(api.MaxScopedTTL, the subject token's remaining life, the time
// to NotAfter). The session it replaces is revoked first. The user counts
// as busy, and is never evicted, until release is called.
//
// A mint refused IDP_UNAVAILABLE with a Retry-After of at most MaxRetryWait
// is tried once more after that wait; any other failure is returned as it
// is and leaves nothing cached for the user. Refusals are *api.Error.
func (p *Pool) Acquire(ctx context.Context, callerID string, subject SubjectSource) (_ *Session, release func(), _ error) {
	if callerID == "" {
		return nil, nil, errors.New("session pool: empty caller id")
	}
	if subject == nil {
		return nil, nil, errors.New("session pool: no subject token source")
	}
	for {
		e, err := p.entry(callerID)
		if err != nil {
			return nil, nil, err
		}
		if err := e.acquire(ctx); err != nil {
			return nil, nil, err
		}
		s, again, err := p.serve(ctx, e, subject)
		e.release()
		if !again {
			if err != nil {
				return nil, nil, err
			}
			var once sync.Once
			return s, func() { once.Do(func() { p.idle(e) }) }, nil
		}
		// The entry left the pool while this call waited for it or
		// minted: start over with the user's current entry.
	}
}

// ScopeFullError refuses widening a session past api.MaxObjects keys.
type ScopeFullError struct {
	Count int // how many keys the session would cover
	Max   int
}

func (e *ScopeFullError) Error() string {
	return fmt.Sprintf("a session would cover %d keys, over the limit of %d", e.Count, e.Max)
}

// Widen is AcquireWidened for a caller that does not say when it is done.
func (p *Pool) Widen(ctx context.Context, callerID string, subject SubjectSource, ttag string) (*Session, error) {
	s, release, err := p.AcquireWidened(ctx, callerID, subject, ttag)
	if err != nil {
		return nil, err
	}
	release()
	return s, nil
}

// AcquireWidened is Acquire of the user's session covering ttag too. A
// session that already covers it is returned as it is; otherwise the
// user's session is revoked first and a new one minted over the grant's
// objects, the keys this user's session was widened to before, and ttag,
// so the user holds one session. Past api.MaxObjects keys it is a
// *ScopeFullError and the session is left as it was.
func (p *Pool) AcquireWidened(ctx context.Context, callerID string, subject SubjectSource, ttag string) (_ *Session, release func(), _ error) {
	if callerID == "" || ttag == "" {
		return nil, nil, errors.New("session pool: widen needs a caller and a t-Tag")
	}
	if subject == nil {
		return nil, nil, errors.New("session pool: no subject token source")
	}
	for {
		e, err := p.entry(callerID)
		if err != nil {
			return nil, nil, err
		}
		if err := e.acquire(ctx); err != nil {
			return nil, nil, err
		}
		p.mu.Lock()
		if !e.gone && !slices.Contains(p.objects, ttag) && !slices.Contains(e.extra, ttag) {
			if n := len(p.objects) + len(e.extra) + 1; n > api.MaxObjects {
				p.mu.Unlock()
				e.release()
				return nil, nil, &ScopeFullError{Count: n, Max: api.MaxObjects}
			}
			e.extra = append(e.extra, ttag)
		}
		if s := e.sess; s != nil && !slices.Contains(s.Objects(), ttag) {
			// Renewed by serve: revoked first, then minted wider.
			e.deadline = time.Time{}
		}
		p.mu.Unlock()
		s, again, err := p.serve(ctx, e, subject)
		e.release()
		if !again {
			if err != nil {
				return nil, nil, err
			}
			var once sync.Once
			return s, func() { once.Do(func() { p.idle(e) }) }, nil
		}
	}
}

// idle ends one call's use of e's session.
func (p *Pool) idle(e *poolEntry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e.busy--
	if e.busy == 0 {
		p.signalLocked()
		p.armSpareLocked()
	}
}

// signalLocked wakes every waiter for a place. p.mu is held.
func (p *Pool) signalLocked() {
	close(p.freed)
	p.freed = make(chan struct{})
}

// givePlaceLocked gives up e's place. p.mu is held.
func (p *Pool) givePlaceLocked(e *poolEntry) {
	if e.place {
		e.place = false
		p.places--
		p.signalLocked()
	}
}

// givePlace is givePlaceLocked taking p.mu.
func (p *Pool) givePlace(e *poolEntry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.givePlaceLocked(e)
}

// entry is the user's entry, made when they have none, marked as called now.
func (p *Pool) entry(id string) (*poolEntry, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrPoolClosed
	}
	e := p.callers[id]
	if e == nil {
		e = &poolEntry{id: id, digest: callerDigest(id), lock: make(chan struct{}, 1)}
		p.callers[id] = e
		// A newcomer will need a place: free one now, while their subject
		// token is fetched, rather than after.
		p.evictAheadLocked(0)
	}
	p.tick++
	e.lastCall, e.lastAt = p.tick, p.now()
	return e, nil
}

// serve runs with e.lock held: it reuses, or renews, the user's session,
// and marks the call busy. again says the entry left the pool meanwhile and
// the call must start over.
func (p *Pool) serve(ctx context.Context, e *poolEntry, subject SubjectSource) (_ *Session, again bool, _ error) {
	p.mu.Lock()
	if e.gone {
		p.mu.Unlock()
		return nil, true, nil
	}
	if s := e.sess; s != nil && s.Live() && p.now().Add(PoolReuseMargin).Before(e.deadline) {
		e.busy++
		p.mu.Unlock()
		return s, false, nil
	}
	old := e.sess
	e.sess = nil
	p.mu.Unlock()
	if old != nil {
		// Revoked before the next is minted, so that a user never holds
		// two sessions.
		p.revoke(ctx, taken{e, old}, "renewed")
	}
	// No place is held while the subject token is fetched: a slow
	// provider for one user never keeps a place from another.
	p.givePlace(e)
	tok, err := p.subjectToken(ctx, e, subject)
	if err != nil {
		p.forget(e)
		return nil, false, err
	}
	if again, err := p.takePlace(ctx, e); again || err != nil {
		if err != nil {
			p.forget(e)
		}
		return nil, again, err
	}

	s, deadline, err := p.mint(ctx, e, tok)

	p.mu.Lock()
	if err != nil {
		p.givePlaceLocked(e)
		if !e.gone {
			delete(p.callers, e.id)
			e.gone = true
		}
		p.mu.Unlock()
		return nil, false, err
	}
	if e.gone {
		// End or EndAll took the user out while this session was being
		// minted: it must not outlive them.
		p.mu.Unlock()
		p.revoke(ctx, taken{e, s}, "ended")
		p.givePlace(e)
		return nil, true, nil
	}
	e.sess, e.deadline = s, deadline
	e.busy++
	p.tick++
	e.lastCall, e.lastAt = p.tick, p.now()
	// The pool may be full now: free a place ahead of the next newcomer.
	if !p.evictAheadLocked(p.spareIdle) {
		p.armSpareLocked()
	}
	p.mu.Unlock()

	p.log.LogAttrs(ctx, slog.LevelInfo, "gateway session pool: session minted",
		slog.String("caller", e.digest), slog.String("session", s.HandleDigest()),
		slog.Time("expiresAt", s.ExpiresAt()))
	return s, false, nil
}

// forget takes e out of the pool after a failure before its mint, giving
// up its place.
func (p *Pool) forget(e *poolEntry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.givePlaceLocked(e)
	if !e.gone {
		delete(p.callers, e.id)
		e.gone = true
	}
}

// takePlace makes sure e holds a place before it mints: a free one, or the
// place of the least recent user with no call in flight, whose session is
// revoked first; else it waits, up to MaxPlaceWait, for either. e.lock is
// held. again says e left the pool meanwhile (its place, if any, is given
// up).
func (p *Pool) takePlace(ctx context.Context, e *poolEntry) (again bool, _ error) {
	var timer *time.Timer
	for {
		p.mu.Lock()
		switch {
		case p.closed:
			p.givePlaceLocked(e)
			p.mu.Unlock()
			return false, ErrPoolClosed
		case e.gone:
			p.givePlaceLocked(e)
			p.mu.Unlock()
			return true, nil
		case e.place:
			p.mu.Unlock()
			return false, nil
		case p.places < p.maxCallers:
			e.place = true
			p.places++
			p.mu.Unlock()
			return false, nil
		}
		if p.evicting > 0 {
			// A place is being freed in the background: wait for it
			// rather than end another user.
			freed := p.freed
			p.mu.Unlock()
			select {
			case <-freed:
				continue
			case <-ctx.Done():
				return false, fmt.Errorf("waiting for a place in the session pool: %w", ctx.Err())
			}
		}
		if v := p.idlestLocked(e, time.Time{}); v != nil {
			// v's place passes to e once v's session is revoked: e mints
			// only after that, so the count at the Gateway never rises.
			delete(p.callers, v.id)
			vs := v.sess
			v.gone, v.sess, v.place, e.place = true, nil, false, true
			p.mu.Unlock()
			if vs != nil {
				p.revoke(ctx, taken{v, vs}, "evicted")
			}
			v.release()
			return false, nil
		}
		freed := p.freed
		p.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(p.maxPlaceWait)
			defer timer.Stop()
			p.log.LogAttrs(ctx, slog.LevelInfo, "gateway session pool: every place busy; waiting",
				slog.String("caller", e.digest), slog.Int("maxCallers", p.maxCallers))
		}
		select {
		case <-freed:
		case <-timer.C:
			p.log.LogAttrs(ctx, slog.LevelWarn, "gateway session pool: every place stayed busy; call refused SESSIONS_BUSY",
				slog.String("caller", e.digest), slog.Int("maxCallers", p.maxCallers))
			return false, p.busyRefusal()
		case <-ctx.Done():
			return false, fmt.Errorf("waiting for a place in the session pool: %w", ctx.Err())
		}
	}
}

// busyRefusal is the retryable refusal when every place stays busy.
func (p *Pool) busyRefusal() *api.Error {
	wait := max(p.maxPlaceWait, time.Second)
	return &api.Error{Layer: api.LayerAdapter, Code: api.CodeSessionsBusy, Status: http.StatusServiceUnavailable,
		RetryAfter: wait,
		Detail: fmt.Sprintf("every one of this server's %d Gateway sessions is in use by other calls in flight; "+
			"nothing was sent; retry after %d seconds", p.maxCallers, int((wait+time.Second-1)/time.Second))}
}

// idlestLocked takes out of use, and locks, the entry holding a place that
// called least recently among those with no call in flight and not being
// served, never keep, and (when calledBefore is set) whose last call was
// before calledBefore; nil when there is none. p.mu is held.
func (p *Pool) idlestLocked(keep *poolEntry, calledBefore time.Time) *poolEntry {
	var candidates []*poolEntry
	for _, e := range p.callers {
		if e != keep && e.place && e.busy == 0 && !e.gone && (calledBefore.IsZero() || e.lastAt.Before(calledBefore)) {
			candidates = append(candidates, e)
		}
	}
	slices.SortFunc(candidates, func(a, b *poolEntry) int { return cmp.Compare(a.lastCall, b.lastCall) })
	for _, e := range candidates {
		if e.tryAcquire() {
			return e
		}
	}
	return nil
}

// evictAheadLocked frees a place in the background when every place is
// taken and none is being freed: the least recent idle user who has not
// called for minIdle (any, when zero) is taken out of the pool, and their
// place is given up once their session is revoked, so the count at the
// Gateway never rises. It reports whether a place is free or being freed.
// p.mu is held.
func (p *Pool) evictAheadLocked(minIdle time.Duration) bool {
	if p.closed {
		return false
	}
	if p.places < p.maxCallers || p.evicting > 0 {
		return true
	}
	var before time.Time
	if minIdle > 0 {
		before = p.now().Add(-minIdle)
	}
	v := p.idlestLocked(nil, before)
	if v == nil {
		return false
	}
	delete(p.callers, v.id)
	vs := v.sess
	v.gone, v.sess = true, nil
	p.evicting++
	p.bg.Go(func() {
		if vs != nil {
			p.revoke(context.Background(), taken{v, vs}, "evicted ahead of need")
		}
		p.mu.Lock()
		p.evicting--
		p.givePlaceLocked(v)
		p.mu.Unlock()
		v.release()
	})
	return true
}

// armSpareLocked looks again, once the least recent idle user has been
// idle for SpareIdle, whether a place should be freed ahead of need. p.mu
// is held.
func (p *Pool) armSpareLocked() {
	if p.closed || p.spareTimer != nil || p.places < p.maxCallers || p.evicting > 0 {
		return
	}
	var oldest *poolEntry
	for _, e := range p.callers {
		if e.place && e.busy == 0 && !e.gone && (oldest == nil || e.lastAt.Before(oldest.lastAt)) {
			oldest = e
		}
	}
	if oldest == nil {
		return
	}
	wait := max(oldest.lastAt.Add(p.spareIdle).Sub(p.now()), 10*time.Millisecond)
	p.spareTimer = time.AfterFunc(wait, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.spareTimer = nil
		if !p.evictAheadLocked(p.spareIdle) {
			p.armSpareLocked()
		}
	})
}

// Drop forgets dead, the user's session, when the Gateway said it no
// longer knows it (IsSessionGone) and it is still the one the pool holds:
// its holder key is destroyed, nothing is sent, and its place is free.
// The user's next call mints a new session covering the same keys.
func (p *Pool) Drop(ctx context.Context, callerID string, dead *Session) {
	p.mu.Lock()
	e := p.callers[callerID]
	if e == nil || e.sess == nil || e.sess != dead {
		p.mu.Unlock()
		return
	}
	e.sess = nil
	p.givePlaceLocked(e) // the Gateway holds nothing for it any more
	p.mu.Unlock()
	dead.Discard()
	p.log.LogAttrs(ctx, slog.LevelInfo, "gateway session pool: session dropped; the Gateway no longer knows it",
		slog.String("caller", e.digest), slog.String("session", dead.HandleDigest()))
}

// subjectToken gets the user's subject token.
func (p *Pool) subjectToken(ctx context.Context, e *poolEntry, subject SubjectSource) (SubjectToken, error) {
	tok, err := subject(ctx)
	if err != nil {
		p.log.LogAttrs(ctx, slog.LevelInfo, "gateway session pool: no subject token",
			slog.String("caller", e.digest), slog.String("code", refusalCode(err)))
		return SubjectToken{}, fmt.Errorf("subject token for the Gateway: %w", err)
	}
	if tok.Token == "" {
		return SubjectToken{}, errors.New("subject token for the Gateway: the source gave an empty token")
	}
	return tok, nil
}

// mint mints a session from tok, waiting out one short IDP_UNAVAILABLE.
// It returns the session and the time, on the pool's clock, past which it
// is not used.
func (p *Pool) mint(ctx context.Context, e *poolEntry, tok SubjectToken) (*Session, time.Time, error) {
	p.mu.Lock()
	scope := append(slices.Clone(p.objects), e.extra...)
	p.mu.Unlock()
	s, deadline, err := p.mintOnce(ctx, tok, scope)
	var ae *api.Error
	if err == nil || !errors.As(err, &ae) || !isRefusal(err, api.CodeIdPUnavailable) ||
		ae.RetryAfter <= 0 || ae.RetryAfter > p.maxRetryWait {
		p.logOutcome(ctx, e, err)
		return s, deadline, err
	}
	p.log.LogAttrs(ctx, slog.LevelInfo, "gateway session pool: waiting out IDP_UNAVAILABLE once",
		slog.String("caller", e.digest), slog.Duration("retryAfter", ae.RetryAfter))
	t := time.NewTimer(ae.RetryAfter)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, time.Time{}, fmt.Errorf("%w (gave up waiting for its Retry-After: %w)", err, ctx.Err())
	}
	s, deadline, err = p.mintOnce(ctx, tok, scope)
	p.logOutcome(ctx, e, err)
	return s, deadline, err
}

// mintOnce asks for one session bound to tok, living no longer than tok.
func (p *Pool) mintOnce(ctx context.Context, tok SubjectToken, scope []string) (*Session, time.Time, error) {
	start := p.now()
	ttl := min(api.MaxScopedTTL, tok.Expiry.Sub(start)-subjectTTLMargin).Truncate(time.Second)
	if tok.Expiry.IsZero() || ttl < time.Second {
		return nil, time.Time{}, fmt.Errorf("subject token for the Gateway: %w", ErrSubjectTokenExpired)
	}
	if !p.notAfter.IsZero() {
		left := p.notAfter.Sub(start)
		if left < time.Second {
			return nil, time.Time{}, ErrPastNotAfter
		}
		ttl = min(ttl, left.Truncate(time.Second))
	}
	s, err := p.minter.Mint(ctx, MintRequest{Objects: slices.Clone(scope), SubjectToken: tok.Token, TTL: ttl})
	if err != nil {
		return nil, time.Time{}, err
	}
	return s, start.Add(ttl), nil
}

func (p *Pool) logOutcome(ctx context.Context, e *poolEntry, err error) {
	if err == nil {
		return
	}
	p.log.LogAttrs(ctx, slog.LevelInfo, "gateway session pool: mint failed",
		slog.String("caller", e.digest), slog.String("code", refusalCode(err)))
}

// revoke ends a session taken out of the pool. It is bounded and runs even
// when ctx is already cancelled: the session must end either way, and
// Session.Revoke destroys the holder key even when the Gateway cannot be
// told.
func (p *Pool) revoke(ctx context.Context, v taken, why string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), PoolRevokeTimeout)
	defer cancel()
	attrs := []slog.Attr{slog.String("caller", v.entry.digest), slog.String("session", v.sess.HandleDigest()),
		slog.String("why", why)}
	if err := v.sess.Revoke(rctx); err != nil {
		p.log.LogAttrs(ctx, slog.LevelWarn, "gateway session pool: revoke not confirmed; holder key destroyed",
			append(attrs, slog.String("code", refusalCode(err)))...)
		return
	}
	p.log.LogAttrs(ctx, slog.LevelInfo, "gateway session pool: session revoked", attrs...)
}

// End revokes the user's session, if they hold one, and destroys its
// holder key. A session being minted for them as End runs is revoked as
// soon as it arrives. Their next call is served by a new session.
func (p *Pool) End(ctx context.Context, callerID string) {
	p.mu.Lock()
	e := p.callers[callerID]
	if e == nil {
		p.mu.Unlock()
		return
	}
	delete(p.callers, callerID)
	v, locked := p.takeOutLocked(e)
	p.signalLocked() // a call of theirs waiting for a place starts over
	p.mu.Unlock()
	p.settle(ctx, v, locked, "ended")
}

// takeOutLocked marks e gone and takes its session. The caller settles e's
// place: when it took a session, or e holds a place with no call of the
// user serving it (locked: e.lock is then held); otherwise the call
// serving e gives the place up when it sees e gone. p.mu is held.
func (p *Pool) takeOutLocked(e *poolEntry) (v taken, locked bool) {
	e.gone = true
	v = taken{e, e.sess}
	e.sess = nil
	if v.sess == nil && e.place {
		locked = e.tryAcquire()
	}
	return v, locked
}

// settle revokes what takeOutLocked took and gives up the place.
func (p *Pool) settle(ctx context.Context, v taken, locked bool, why string) {
	if v.sess != nil {
		p.revoke(ctx, v, why)
	}
	if v.sess != nil || locked {
		p.givePlace(v.entry)
	}
	if locked {
		v.entry.release()
	}
}

// EndAll closes the pool (on SIGTERM or SIGINT): every session is revoked,
// in parallel, and every holder key destroyed; later calls of Session get
// ErrPoolClosed. It then waits, until ctx ends, for mints still in flight,
// which revoke what they minted.
func (p *Pool) EndAll(ctx context.Context) {
	p.mu.Lock()
	p.closed = true
	if p.spareTimer != nil {
		p.spareTimer.Stop()
		p.spareTimer = nil
	}
	type out struct {
		v      taken
		locked bool
	}
	var outs []out
	entries := make([]*poolEntry, 0, len(p.callers))
	for id, e := range p.callers {
		delete(p.callers, id)
		entries = append(entries, e)
		v, locked := p.takeOutLocked(e)
		outs = append(outs, out{v, locked})
	}
	p.signalLocked() // waiters for a place see the pool closed
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, o := range outs {
		wg.Go(func() { p.settle(ctx, o.v, o.locked, "shutdown") })
	}
	wg.Wait()
	// Sessions being ended in the background are revoked (each bounded by
	// PoolRevokeTimeout) before the pool counts as closed.
	p.bg.Wait()
	for _, e := range entries {
		if e.acquire(ctx) != nil {
			return
		}
		e.release()
	}
}

// Current is the user's live session, or nil when they hold none; it never
// mints and never waits on the Gateway.
func (p *Pool) Current(callerID string) *Session {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.callers[callerID]
	if e == nil || e.sess == nil || !p.now().Before(e.deadline) {
		return nil
	}
	return e.sess
}

// Places is how many of the MaxCallers places are held now: sessions
// live, being minted or being revoked.
func (p *Pool) Places() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.places
}

// Len is how many users hold a session now.
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, e := range p.callers {
		if e.sess != nil {
			n++
		}
	}
	return n
}

// callerDigest names a user in logs: the first 12 hex digits of the
// sha256 of their id, as HandleDigest names a session.
func callerDigest(id string) string { return handleDigest(id) }

// refusalCode is the refusal code behind err, for logs; "" when it is not
// a refusal.
func refusalCode(err error) string {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}
