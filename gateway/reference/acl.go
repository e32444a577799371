package reference

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"time"

	"github.com/pdmcp/pdmcp/gateway/api"
)

// The ACL and key routes: the gateway checks the body and the scope, then
// the key server decides. ACL routes check that the caller's entry is live
// but do not spend its uses; only encrypt and decrypt use a key.

// ttagInScope refuses an empty t-Tag or one outside the session's scope.
func ttagInScope(s *scopedSession, ttag string) *api.Error {
	if ttag == "" {
		return badRequest("ttag is required; name the key")
	}
	if !s.inScope(ttag) {
		return notInScope()
	}
	return nil
}

// decodeInScope decodes the body into v, then refuses an empty t-Tag or
// one outside the session's scope; ttag points at v's t-Tag.
func (c *call) decodeInScope(v any, ttag *string) error {
	if err := c.decode(v); err != nil {
		return err
	}
	if e := ttagInScope(c.scoped, *ttag); e != nil {
		return e
	}
	return nil
}

// changeACL runs op, a change of a key's access list or life, under the
// ACL role, and answers OK.
func (g *Gateway) changeACL(ctx context.Context, c *call, op keyOp) (any, error) {
	op.role = api.RoleACL
	if err := g.runKeyOp(ctx, c.scoped, c.now, op); err != nil {
		return nil, err
	}
	return api.OKResponse{OK: true}, nil
}

func (g *Gateway) aclGet(ctx context.Context, c *call) (any, error) {
	var req api.TTagRequest
	if err := c.decodeInScope(&req, &req.TTag); err != nil {
		return nil, err
	}
	ans := api.ACLGetResponse{TTag: req.TTag, Entries: []api.ACLEntry{}}
	err := g.runKeyOp(ctx, c.scoped, c.now, keyOp{op: OpACLGet, ttag: req.TTag, needs: needAnyRight,
		do: func(tx *sql.Tx, _ *decision) error {
			entries, err := g.store.entries(ctx, tx, req.TTag)
			if err != nil {
				return err
			}
			for _, e := range entries {
				name := ""
				p, err := g.store.principalByID(ctx, tx, e.SystemID, e.PrincipalID)
				if err == nil {
					name = p.Name
				} else if !errors.Is(err, errNotFound) {
					return err
				}
				ans.Entries = append(ans.Entries, api.ACLEntry{SystemID: e.SystemID, PrincipalID: e.PrincipalID,
					Principal: name, Rights: e.Rights, EndTime: e.EndTime, Uses: e.Uses})
			}
			return nil
		}})
	if err != nil {
		return nil, err
	}
	return ans, nil
}

// changeEntry runs a grant or update: it reads the body, in scope, and
// the entry it asks for, valid, before anything is asked of the key
// server; then change writes the entry, the caller needing WRITE.
func (g *Gateway) changeEntry(ctx context.Context, c *call, op string,
	change func(tx *sql.Tx, d *decision, ttag string, entry *aclEntry) error) (any, error) {
	var req api.ACLGrantRequest
	if err := c.decodeInScope(&req, &req.TTag); err != nil {
		return nil, err
	}
	entry, e := checkGrant(&req, c.now)
	if e != nil {
		return nil, e
	}
	return g.changeACL(ctx, c, keyOp{op: op, ttag: req.TTag, needs: needWrite,
		do: func(tx *sql.Tx, d *decision) error { return change(tx, d, req.TTag, entry) }})
}

// checkGrant validates a grant or update body before anything is asked.
func checkGrant(req *api.ACLGrantRequest, now time.Time) (*aclEntry, *api.Error) {
	if req.SystemID == 0 || req.PrincipalID == "" {
		return nil, badRequest("systemId and principalId name the grantee; send both")
	}
	if len(req.Rights) == 0 {
		return nil, badRequest("rights must hold at least one of READ, WRITE and OWNER; name the rights to grant")
	}
	set := map[string]bool{}
	rights := []string{}
	for _, r := range req.Rights {
		switch r {
		case api.RightRead, api.RightWrite, api.RightOwner:
		default:
			return nil, badRequest("rights may hold only READ, WRITE and OWNER; fix the rights")
		}
		if !set[r] {
			set[r] = true
			rights = append(rights, r)
		}
	}
	if req.Uses != nil && *req.Uses <= 0 {
		return nil, badRequest("uses must be at least 1, or absent for unlimited uses; fix it")
	}
	var end *time.Time
	if req.EndTime != nil {
		if !req.EndTime.After(now) {
			return nil, badRequest("endTime is not in the future by the Gateway's clock; send a later time or none")
		}
		t := req.EndTime.UTC()
		end = &t
	}
	return &aclEntry{SystemID: req.SystemID, PrincipalID: req.PrincipalID, Rights: rights, EndTime: end, Uses: req.Uses}, nil
}

func granteeNotFound() *api.Error {
	return keyServerError(api.CodeNotFound, http.StatusNotFound,
		"the key server knows no principal with this systemId and principalId; check the grantee's ids")
}

func ownerOnly() *api.Error {
	return keyServerError(api.CodeACLDenied, http.StatusForbidden,
		"only the key's OWNER may grant, change or take away OWNER; ask the owner, do not retry")
}

// existingEntry is the principal's entry on ttag, refused NOT_FOUND with
// the hint missing when there is none.
func (g *Gateway) existingEntry(ctx context.Context, tx *sql.Tx, ttag string, systemID int64, principalID, missing string) (*aclEntry, error) {
	old, err := g.store.entry(ctx, tx, ttag, systemID, principalID)
	if errors.Is(err, errNotFound) {
		return nil, keyServerError(api.CodeNotFound, http.StatusNotFound, missing)
	}
	return old, err
}

func (g *Gateway) aclGrant(ctx context.Context, c *call) (any, error) {
	return g.changeEntry(ctx, c, OpACLGrant, func(tx *sql.Tx, d *decision, ttag string, entry *aclEntry) error {
		if entry.has(api.RightOwner) && !d.entry.has(api.RightOwner) {
			return ownerOnly()
		}
		if _, err := g.store.principalByID(ctx, tx, entry.SystemID, entry.PrincipalID); errors.Is(err, errNotFound) {
			return granteeNotFound()
		} else if err != nil {
			return err
		}
		err := g.store.insertEntry(ctx, tx, ttag, entry)
		if errors.Is(err, errConflict) {
			return keyServerError(api.CodeConflict, http.StatusConflict,
				"the grantee already has an entry on this key; use update to change it")
		}
		return err
	})
}

func (g *Gateway) aclUpdate(ctx context.Context, c *call) (any, error) {
	return g.changeEntry(ctx, c, OpACLUpdate, func(tx *sql.Tx, d *decision, ttag string, entry *aclEntry) error {
		old, err := g.existingEntry(ctx, tx, ttag, entry.SystemID, entry.PrincipalID,
			"the principal has no entry on this key to update; use grant to add one")
		if err != nil {
			return err
		}
		if (entry.has(api.RightOwner) || old.has(api.RightOwner)) && !d.entry.has(api.RightOwner) {
			return ownerOnly()
		}
		return g.store.updateEntry(ctx, tx, ttag, entry)
	})
}

func (g *Gateway) aclRevoke(ctx context.Context, c *call) (any, error) {
	var req api.ACLRevokeRequest
	if err := c.decodeInScope(&req, &req.TTag); err != nil {
		return nil, err
	}
	if req.SystemID == 0 || req.PrincipalID == "" {
		return nil, badRequest("systemId and principalId name the entry to revoke; send both")
	}
	return g.changeACL(ctx, c, keyOp{op: OpACLRevoke, ttag: req.TTag, needs: needWrite,
		do: func(tx *sql.Tx, d *decision) error {
			old, err := g.existingEntry(ctx, tx, req.TTag, req.SystemID, req.PrincipalID,
				"the principal has no entry on this key; there is nothing to revoke")
			if err != nil {
				return err
			}
			if old.has(api.RightOwner) && !d.entry.has(api.RightOwner) {
				return ownerOnly()
			}
			return g.store.deleteEntry(ctx, tx, req.TTag, req.SystemID, req.PrincipalID)
		}})
}

func (g *Gateway) keyExpire(ctx context.Context, c *call) (any, error) {
	return g.keyLifecycle(ctx, c, OpKeyExpire, false, g.store.expireKey)
}

// keyRemove deletes a key and its ACL. Unlike every other operation it
// accepts an expired key: expiry stops all use, and removal is how the
// owner then cleans up.
func (g *Gateway) keyRemove(ctx context.Context, c *call) (any, error) {
	return g.keyLifecycle(ctx, c, OpKeyRemove, true, g.store.removeKey)
}

// keyLifecycle expires or removes a key: OWNER only, and the ACL role.
func (g *Gateway) keyLifecycle(ctx context.Context, c *call, op string, onExpired bool,
	apply func(ctx context.Context, tx *sql.Tx, ttag string) error) (any, error) {
	var req api.TTagRequest
	if err := c.decodeInScope(&req, &req.TTag); err != nil {
		return nil, err
	}
	return g.changeACL(ctx, c, keyOp{op: op, ttag: req.TTag, needs: needOwner,
		onExpired: onExpired, do: func(tx *sql.Tx, _ *decision) error { return apply(ctx, tx, req.TTag) }})
}
