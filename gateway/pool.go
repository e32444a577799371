package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/internal/telemetry"
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
	// DefaultMinIdle is PoolConfig.MinIdle when it is zero: a user who
	// called within the last minute is between the calls of one task (a
	// host reads, thinks and reads again) and is never ended ahead of need.
	DefaultMinIdle = time.Minute
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
	// MinIdle: a user who called within this long is never ended ahead
	// of need, whoever is expected or arrives (DefaultMinIdle when zero);
	// only a newcomer's call that has its subject token in hand, and finds
	// no place free, ends them (see Pool), and not one whose mint the
	// Gateway refused finally before (see RefusedFor). A place reserved ahead of need
	// for a newcomer who has not called yet is kept for them this long too.
	MinIdle time.Duration
	// SpareIdle: once every place is taken, the user who called least
	// recently, with no call in flight and no call for at least this long,
	// is ended in the background, so that a place is free before a new
	// user needs it (MinIdle when zero; at least MinIdle). Users calling
	// more often than this keep their sessions however many places they
	// fill.
	SpareIdle time.Duration
	// Now is the clock that decides when a session is renewed (time.Now
	// when nil).
	Now func() time.Time
	// Logger gets the pool's events; callers appear only as a 12-hex
	// digest of their id. Nil discards.
	Logger *slog.Logger
	// OnPanic, when set, is told of a panic recovered in a revoke (which
	// runs on the pool's own goroutine for an eviction ahead of need), to
	// log and count it; when nil the pool logs it on Logger.
	OnPanic func(v any)
	// RefusedFor: a mint the Gateway refused finally (the identity not
	// mapped, the principal disabled or not the service's, scoped sessions
	// not allowed) is remembered this long for that caller (MinIdle when
	// zero), and their calls are answered the same refusal meanwhile,
	// without taking a place, ending anyone or asking the Gateway: else a
	// user who can never be served would end a recent user's session on
	// every call to free a place for a mint bound to fail. After it they
	// are tried again (an operator may have mapped them), but their call
	// ends only a user idle past MinIdle, until a mint of theirs succeeds.
	// MinIdle by default: the same span within which a user is held to be
	// still at work and is never ended ahead of need.
	RefusedFor time.Duration
	// MaxRefusedCallers bounds how many such callers are remembered
	// (DefaultMaxRefusedCallers when zero), the least recently refused
	// dropped first, so that a flood of distinct refused callers cannot
	// grow the pool's memory.
	MaxRefusedCallers int
}

// Pool keeps one scoped session per user for the HTTP transport: each
// minted from that user's subject token with its own holder key, renewed
// before it runs out, never past NotAfter, and never shared. It is safe for
// concurrent use.
//
// MaxCallers is a hard cap: never more sessions than that are live at the
// Gateway at once, counting those being minted and those being revoked.
//
// A place is freed ahead of need, in the background, so that a new user's
// first call does not wait on another user's revoke, but never at the cost
// of a user who called within MinIdle, and never for nobody: when a user
// with no entry is expected (Expect) or arrives, and every place is taken,
// the least recent user with no call in flight who has not called for
// MinIdle is ended, and their place, once their session is revoked (or
// its holder key destroyed), passes to that newcomer, reserved: no one
// else mints in it, and it is kept for them for MinIdle. Once every place
// is taken again, the least recent such user idle for SpareIdle is ended
// too, so that the next newcomer finds a place free. A call that has its
// subject token in hand and finds no place ends the least recent user
// with no call in flight, however recent (their place passes to it, the
// revoke confirmed first); when every place is busy, it waits up to
// MaxPlaceWait and is then refused SESSIONS_BUSY, retryable.
//
// A caller the Gateway refused finally (RefusedFor) is answered that
// refusal again for RefusedFor, with nothing taken, ended or sent; tried
// again after it, their call ends only a user idle past MinIdle, so that
// one user who cannot be served never keeps the pool turning over.
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
	minIdle      time.Duration
	spareIdle    time.Duration
	now          func() time.Time
	log          *slog.Logger
	onPanic      func(v any)
	refusedFor   time.Duration

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
	// refused are the callers whose mint was refused finally.
	refused refusedMemory
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
	// reserved says place was freed ahead of need for this user, who has
	// not minted in it yet: their first call keeps it while their subject
	// token is fetched, and no one else takes it within MinIdle of their
	// last request.
	reserved bool
	// heir, set while this entry's place is being freed ahead of need, is
	// the newcomer the place passes to once the session is revoked.
	heir *poolEntry
	busy int // calls given the session and not yet released
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
	if cfg.MinIdle < 0 {
		return nil, fmt.Errorf("session pool: MinIdle %s is negative", cfg.MinIdle)
	}
	minIdle := cmp.Or(cfg.MinIdle, DefaultMinIdle)
	if cfg.SpareIdle < 0 {
		return nil, fmt.Errorf("session pool: SpareIdle %s is negative", cfg.SpareIdle)
	}
	if cfg.SpareIdle != 0 && cfg.SpareIdle < minIdle {
		return nil, fmt.Errorf("session pool: SpareIdle %s is under MinIdle %s; a user who called within MinIdle is never ended ahead of need", cfg.SpareIdle, minIdle)
	}
	if cfg.RefusedFor < 0 {
		return nil, fmt.Errorf("session pool: RefusedFor %s is negative", cfg.RefusedFor)
	}
	if cfg.MaxRefusedCallers < 0 {
		return nil, fmt.Errorf("session pool: MaxRefusedCallers %d is negative", cfg.MaxRefusedCallers)
	}
	p := &Pool{
		minter:       cfg.Minter,
		objects:      slices.Clone(cfg.Objects),
		maxCallers:   cmp.Or(cfg.MaxCallers, DefaultMaxCallers),
		maxPlaceWait: cmp.Or(cfg.MaxPlaceWait, DefaultMaxPlaceWait),
		notAfter:     cfg.NotAfter,
		maxRetryWait: cmp.Or(cfg.MaxRetryWait, DefaultMaxRetryWait),
		minIdle:      minIdle,
		spareIdle:    cmp.Or(cfg.SpareIdle, minIdle),
		now:          cfg.Now,
		log:          cfg.Logger,
		onPanic:      cfg.OnPanic,
		refusedFor:   cmp.Or(cfg.RefusedFor, minIdle),
		refused:      newRefusedMemory(cmp.Or(cfg.MaxRefusedCallers, DefaultMaxRefusedCallers)),
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
	return releasedAtOnce(p.Acquire(ctx, callerID, subject))
}

// releasedAtOnce releases what Acquire or AcquireWidened gave, for the
// callers that do not say when they are done.
func releasedAtOnce(s *Session, release func(), err error) (*Session, error) {
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
// is and leaves no session cached for the user. A final refusal of the
// Gateway (see PoolConfig.RefusedFor) is remembered: the user's calls for
// RefusedFor after it are answered the same refusal, nothing sent.
// Refusals are *api.Error.
func (p *Pool) Acquire(ctx context.Context, callerID string, subject SubjectSource) (_ *Session, release func(), _ error) {
	if callerID == "" {
		return nil, nil, errors.New("session pool: empty caller id")
	}
	if subject == nil {
		return nil, nil, errors.New("session pool: no subject token source")
	}
	return p.acquire(ctx, callerID, subject, nil)
}

// acquire serves Acquire and AcquireWidened: prepare, when set, runs with
// the entry's lock held before serve, and a failure of it is returned.
func (p *Pool) acquire(ctx context.Context, callerID string, subject SubjectSource, prepare func(*poolEntry) error) (_ *Session, release func(), _ error) {
	for {
		e, err := p.entry(callerID)
		if err != nil {
			return nil, nil, err
		}
		if err := e.acquire(ctx); err != nil {
			return nil, nil, err
		}
		s, again, err := p.serveHeld(ctx, e, subject, prepare)
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

// serveHeld runs prepare, when set, then serve, with e's lock held, and
// releases it however they end. A panic in them (a subject source's, a
// mint's) is recovered by the tool call that asked, which then ends the
// user (End); a lock left held would keep End from giving their place up,
// and the place would be lost to every user.
func (p *Pool) serveHeld(ctx context.Context, e *poolEntry, subject SubjectSource, prepare func(*poolEntry) error) (*Session, bool, error) {
	defer e.release()
	if prepare != nil {
		if err := prepare(e); err != nil {
			return nil, false, err
		}
	}
	return p.serve(ctx, e, subject)
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
	return releasedAtOnce(p.AcquireWidened(ctx, callerID, subject, ttag))
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
	return p.acquire(ctx, callerID, subject, func(e *poolEntry) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		if !e.gone && !slices.Contains(p.objects, ttag) && !slices.Contains(e.extra, ttag) {
			if n := len(p.objects) + len(e.extra) + 1; n > api.MaxObjects {
				return &ScopeFullError{Count: n, Max: api.MaxObjects}
			}
			e.extra = append(e.extra, ttag)
		}
		if s := e.sess; s != nil && !slices.Contains(s.Objects(), ttag) {
			// Renewed by serve: revoked first, then minted wider.
			e.deadline = time.Time{}
		}
		return nil
	})
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
		// Answered before the user counts as arrived: a caller refused
		// finally a moment ago frees no place and ends no one.
		if err := p.refusedAnswerLocked(id); err != nil {
			return nil, err
		}
		e = &poolEntry{id: id, digest: callerDigest(id), lock: make(chan struct{}, 1)}
		p.callers[id] = e
		// A newcomer will need a place: free one for them now, while
		// their subject token is fetched, rather than after.
		p.evictAheadLocked(p.minIdle, e)
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
	// No place is held while the subject token is fetched, so that a slow
	// provider for one user never keeps a place from another; but a place
	// reserved for this user ahead of need is theirs (their exchange was
	// started ahead too), and giving it up would hand it to someone else.
	p.mu.Lock()
	if !e.reserved {
		p.givePlaceLocked(e)
	}
	p.mu.Unlock()
	tctx, span := telemetry.Child(ctx, SpanPoolSubject)
	tok, err := p.subjectToken(tctx, e, subject)
	endPoolSpan(span, err)
	if err != nil {
		p.forget(e)
		return nil, false, err
	}
	wctx, span := telemetry.Child(ctx, SpanPoolPlace)
	again, err = p.takePlace(wctx, e)
	endPoolSpan(span, err)
	if again || err != nil {
		if err != nil {
			p.forget(e)
		}
		return nil, again, err
	}

	mctx, span := telemetry.Child(ctx, SpanPoolMint)
	s, deadline, err := p.mint(mctx, e, tok)
	endPoolSpan(span, err)

	p.mu.Lock()
	if err != nil {
		p.givePlaceLocked(e)
		if !e.gone {
			delete(p.callers, e.id)
			e.gone = true
		}
		ae, final := finalMintRefusal(err)
		if final {
			p.refused.remember(e.id, ae, p.now())
		}
		p.mu.Unlock()
		if final {
			p.log.LogAttrs(ctx, slog.LevelInfo, "gateway session pool: mint refused finally; the caller's calls get the same answer for a while",
				slog.String("caller", e.digest), slog.String("code", ae.Code), slog.Duration("for", p.refusedFor))
		}
		return nil, false, err
	}
	p.refused.forget(e.id)
	if e.gone {
		// End or EndAll took the user out while this session was being
		// minted: it must not outlive them.
		p.mu.Unlock()
		p.revoke(ctx, taken{e, s}, "ended")
		p.givePlace(e)
		return nil, true, nil
	}
	e.sess, e.deadline, e.reserved = s, deadline, false
	e.busy++
	p.tick++
	e.lastCall, e.lastAt = p.tick, p.now()
	// The pool may be full now: free a place ahead of the next newcomer.
	if !p.evictAheadLocked(p.spareIdle, nil) {
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
// live, being minted or being revoked, and places reserved for a newcomer
// ahead of need.
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
