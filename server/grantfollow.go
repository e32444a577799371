package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
)

// Regranter is a session source that follows a changed grant: objects are
// the new grant's keys and notAfter its end. A session that covers a key
// the new grant does not reach, or lives past its end, is ended, so a
// narrowed grant is never served by a wider session; the next call mints
// over the new keys.
type Regranter interface {
	Regrant(ctx context.Context, objects []string, notAfter time.Time) error
}

// errGrantNeedsRestart marks a changed grant that differs in what the
// server fixed at start.
var errGrantNeedsRestart = errors.New("the change needs a restart")

// sessionEnder is a session source that can end every session and still
// serve later calls (the HTTP pool; its EndAll closes it for good).
type sessionEnder interface {
	EndSessions(ctx context.Context)
}

// endSessions ends every Gateway session at the grant's end, leaving the
// source able to serve a renewed grant.
func (s *Server) endSessions(ctx context.Context) {
	if e, ok := s.cfg.Sessions.(sessionEnder); ok {
		e.EndSessions(context.WithoutCancel(ctx))
		return
	}
	s.cfg.Sessions.EndAll(context.WithoutCancel(ctx))
}

// grantNow is the grant in force.
func (s *Server) grantNow() *grant.Grant {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grant
}

// startKey reports whether the grant in force reaches ttag in the
// manifest: what the Gateway sessions are minted over.
func (s *Server) startKey(ttag string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startKeys[ttag]
}

// FollowGrant is the grant as grant.json says now, when Config.GrantPath
// is set: when the file changed (another file renamed into place, or the
// same file's size or modification time) since it was read, it is read
// again and checked, and a valid one is in force from this call on: a
// renewed grant (a later notAfter) keeps serving, a narrowed one (fewer
// documents, destinations or tools) ends the Gateway sessions that reach
// past it. One that does not load or check is logged at WARN once, with the
// reason, and the last valid one kept. What the server fixed at start (the
// identity, the steps, the file root, tools beyond those it started with)
// cannot change without a restart: such a grant is refused the same way.
func (s *Server) FollowGrant(ctx context.Context) *grant.Grant {
	if s.cfg.GrantPath == "" {
		return s.grantNow()
	}
	fi, statErr := os.Stat(s.cfg.GrantPath)
	if statErr == nil {
		// The common case, the grant unchanged, needs no manifest: every
		// tool that reads the manifest looks at its file itself.
		s.mu.Lock()
		g, same := s.grant, sameFile(fi, s.grantFile) || sameFile(fi, s.badGrantFile)
		s.mu.Unlock()
		if same {
			return g
		}
	}
	m := s.currentManifest()
	s.mu.Lock()
	if statErr != nil {
		if s.grantFile != nil {
			s.log.Warn("the grant cannot be read; serving the last valid one", "path", s.cfg.GrantPath, "err", statErr)
		}
		s.grantFile, s.badGrantFile = nil, nil
		defer s.mu.Unlock()
		return s.grant
	}
	if sameFile(fi, s.grantFile) || sameFile(fi, s.badGrantFile) {
		defer s.mu.Unlock()
		return s.grant
	}
	old := s.grant
	g, err := s.loadGrant(old, m)
	if err != nil {
		s.log.Warn("the changed grant is not valid; serving the last valid one", "path", s.cfg.GrantPath,
			"grant", old.ID, "err", err)
		s.badGrantFile = fi
		defer s.mu.Unlock()
		return s.grant
	}
	keys := grant.Keys(g, m)
	s.grant, s.grantFile, s.badGrantFile = g, fi, nil
	s.startKeys = map[string]bool{}
	for _, k := range keys {
		s.startKeys[k] = true
	}
	s.mu.Unlock()
	s.log.Info("the grant changed; serving the new one", "path", s.cfg.GrantPath, "grant", g.ID,
		"previous", old.ID, "documents", len(g.Documents), "destinations", len(g.Destinations),
		"tools", len(g.AllowedTools), "notAfter", g.NotAfter.UTC().Format(time.RFC3339))
	if r, ok := s.cfg.Sessions.(Regranter); ok {
		if err := r.Regrant(context.WithoutCancel(ctx), keys, g.NotAfter); err != nil {
			// Fail closed: no session may outlive the grant it was minted for.
			s.log.Error("the Gateway sessions could not follow the new grant; every one is ended", "err", err)
			s.cfg.Sessions.EndAll(context.WithoutCancel(ctx))
		}
	}
	if s.cfg.OnGrant != nil {
		s.cfg.OnGrant(g)
	}
	return g
}

// loadGrant reads grant.json and checks it as a start would, and against
// what the grant in force fixed at start.
func (s *Server) loadGrant(old *grant.Grant, m *grant.Manifest) (*grant.Grant, error) {
	g, err := grant.Load(s.cfg.GrantPath)
	if err != nil {
		return nil, err
	}
	if err := grant.Validate(g, m); err != nil {
		return nil, err
	}
	if err := grant.CheckApproved(g, m); err != nil {
		return nil, err
	}
	if g.Expired(s.cfg.Now()) {
		return nil, fmt.Errorf("it ended at %s", g.NotAfter.UTC().Format(time.RFC3339))
	}
	switch {
	case g.CallerIdentity != old.CallerIdentity || g.LocalUser != old.LocalUser:
		return nil, fmt.Errorf("%w: it names another identity", errGrantNeedsRestart)
	case !slices.Equal(g.Steps, old.Steps):
		return nil, fmt.Errorf("%w: it names other hand-off steps", errGrantNeedsRestart)
	case g.FileRoot != s.cfg.Grant.FileRoot:
		return nil, fmt.Errorf("%w: it names another file root", errGrantNeedsRestart)
	}
	for _, t := range g.AllowedTools {
		if !s.allowed[t] {
			return nil, fmt.Errorf("%w: it allows %s, which the server did not start with", errGrantNeedsRestart, t)
		}
	}
	if n := len(grant.Keys(g, m)); n == 0 {
		return nil, errors.New("it covers no key")
	} else if n > api.MaxObjects {
		return nil, fmt.Errorf("it covers %d keys, more than one Gateway session may (%d)", n, api.MaxObjects)
	}
	return g, nil
}

// toolGranted reports whether the grant in force still allows tool: a
// narrowed grant may drop tools the server registered at start.
func (s *Server) toolGranted(g *grant.Grant, tool string) bool {
	return slices.Contains(g.AllowedTools, tool)
}
