package serve

import (
	"net/http"
	"sync"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Bounds of the MCP sessions of the HTTP transport, when mcp-http.json
// does not set them. Several hosts never end their session (no DELETE), so
// without bounds one signed-in user could hold memory without end.
const (
	DefaultMaxSessionsPerUser = 8
	DefaultMaxSessions        = 256
	// SessionIdleTimeout ends an MCP session no request has used for this
	// long. A host whose session ended gets 404 and starts a new one.
	SessionIdleTimeout = 10 * time.Minute
)

// sessionHeader names the MCP session of a request (protocol revisions
// before 2026-07-28).
const sessionHeader = "Mcp-Session-Id"

// mcpSessionLimiter keeps the stateful handler's MCP sessions within bounds: at
// most perUser for one verified user and total for everyone. When a new
// session needs room, the least recently used idle session (no request in
// flight) goes first: the user's own when the user is at their bound, anyone's
// when the server is at its bound. It also refuses, with its own audit
// class, a request that names another user's session.
type mcpSessionLimiter struct {
	perUser, total int
	srv            *mcp.Server
	onMismatch     func(r *http.Request, user string)

	mu   sync.Mutex
	byID map[string]*mcpSession
	// pending counts initializes under way, per user and in all, so that
	// concurrent ones cannot pass the bounds together.
	pending      map[string]int
	pendingTotal int
	tick         uint64
}

type mcpSession struct {
	id, user string
	lastUse  uint64
	busy     int // requests in flight
}

func newMCPSessionLimiter(srv *mcp.Server, perUser, total int, onMismatch func(*http.Request, string)) *mcpSessionLimiter {
	if perUser < 1 {
		perUser = DefaultMaxSessionsPerUser
	}
	if total < 1 {
		total = DefaultMaxSessions
	}
	return &mcpSessionLimiter{perUser: perUser, total: total, srv: srv, onMismatch: onMismatch,
		byID: map[string]*mcpSession{}, pending: map[string]int{}}
}

// Len is how many MCP sessions are live.
func (t *mcpSessionLimiter) Len() int {
	t.prune()
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID)
}

// wrap puts next (the stateful go-sdk handler) behind the bounds.
func (t *mcpSessionLimiter) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user := ""
		if ti := sdkauth.TokenInfoFromContext(r.Context()); ti != nil {
			user = ti.UserID
		}
		if id := r.Header.Get(sessionHeader); id != "" {
			// A GET is the host's listening stream, open as long as the
			// host runs: it does not make the session busy.
			busy := r.Method != http.MethodGet
			known, mine := t.begin(id, user, busy)
			if known && !mine {
				t.onMismatch(r, user)
				http.Error(w, "Forbidden: this MCP session belongs to another user; start your own session", http.StatusForbidden)
				return
			}
			if known && busy {
				defer t.end(id)
			}
			next.ServeHTTP(w, r)
			if known && r.Method == http.MethodDelete {
				t.forget(id)
			}
			return
		}
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		// A POST without a session may open one: make room first.
		if status := t.reserve(user); status != 0 {
			w.Header().Set("Retry-After", "5")
			http.Error(w, "Too many MCP sessions are busy; retry shortly", status)
			return
		}
		next.ServeHTTP(w, r)
		t.settle(user, w.Header().Get(sessionHeader))
	})
}

// begin marks a request on session id in flight; known is false for an id
// this server does not track (the go-sdk answers it), mine is false when
// the session belongs to another user.
func (t *mcpSessionLimiter) begin(id, user string, busy bool) (known, mine bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.byID[id]
	if s == nil {
		return false, false
	}
	if s.user != user {
		return true, false
	}
	t.tick++
	s.lastUse = t.tick
	if busy {
		s.busy++
	}
	return true, true
}

func (t *mcpSessionLimiter) end(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.byID[id]; s != nil {
		s.busy--
		t.tick++
		s.lastUse = t.tick
	}
}

func (t *mcpSessionLimiter) forget(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.byID, id)
}

// reserve makes room for one more session of user, closing least recently
// used idle sessions as needed, and holds the place until settle. It
// returns 0, or the status to refuse with when every session in the way
// is busy: 429 when it is the user's own bound, 503 the server's.
func (t *mcpSessionLimiter) reserve(user string) int {
	t.prune()
	var evict []string
	defer func() {
		for _, id := range evict {
			t.close(id)
		}
	}()
	t.mu.Lock()
	defer t.mu.Unlock()
	count := map[string]int{}
	for _, s := range t.byID {
		count[s.user]++
	}
	for count[user]+t.pending[user] >= t.perUser {
		s := t.lruIdle(func(s *mcpSession) bool { return s.user == user })
		if s == nil {
			return http.StatusTooManyRequests
		}
		delete(t.byID, s.id)
		count[user]--
		evict = append(evict, s.id)
	}
	for len(t.byID)+t.pendingTotal >= t.total {
		s := t.lruIdle(func(*mcpSession) bool { return true })
		if s == nil {
			return http.StatusServiceUnavailable
		}
		delete(t.byID, s.id)
		evict = append(evict, s.id)
	}
	t.pending[user]++
	t.pendingTotal++
	return 0
}

// settle ends a reservation: the session the request opened, if it is
// live, is tracked from now on.
func (t *mcpSessionLimiter) settle(user, id string) {
	live := id != "" && t.find(id) != nil
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending[user]--; t.pending[user] <= 0 {
		delete(t.pending, user)
	}
	t.pendingTotal--
	if live {
		t.tick++
		t.byID[id] = &mcpSession{id: id, user: user, lastUse: t.tick}
	}
}

func (t *mcpSessionLimiter) lruIdle(match func(*mcpSession) bool) *mcpSession {
	var best *mcpSession
	for _, s := range t.byID {
		if s.busy == 0 && match(s) && (best == nil || s.lastUse < best.lastUse) {
			best = s
		}
	}
	return best
}

// prune forgets sessions the go-sdk has ended (idle timeout, a failed
// initialize, DELETE).
func (t *mcpSessionLimiter) prune() {
	live := map[string]bool{}
	for ss := range t.srv.Sessions() {
		live[ss.ID()] = true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, s := range t.byID {
		if !live[id] && s.busy == 0 {
			delete(t.byID, id)
		}
	}
}

func (t *mcpSessionLimiter) find(id string) *mcp.ServerSession {
	for ss := range t.srv.Sessions() {
		if ss.ID() == id {
			return ss
		}
	}
	return nil
}

// close ends session id; its host gets 404 on its next request and starts
// a new session.
func (t *mcpSessionLimiter) close(id string) {
	if ss := t.find(id); ss != nil {
		_ = ss.Close()
	}
}
