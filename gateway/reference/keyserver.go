package reference

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/pdmcp/pdmcp/gateway/api"
)

// Operations as the key server's audit names them.
const (
	OpEncrypt   = "encrypt"
	OpMint      = "mint"
	OpDecrypt   = "decrypt"
	OpACLGet    = "acl.get"
	OpACLGrant  = "acl.grant"
	OpACLUpdate = "acl.update"
	OpACLRevoke = "acl.revoke"
	OpKeyExpire = "key.expire"
	OpKeyRemove = "key.remove"
)

// rightsNeeded is what the acting principal's live ACL entry must hold.
type rightsNeeded int

const (
	needAnyRight rightsNeeded = iota // READ, WRITE or OWNER
	needWrite                        // WRITE or OWNER
	needOwner                        // OWNER
)

// keyOp is one key-server operation on an existing key.
type keyOp struct {
	op    string
	ttag  string
	role  string // "" when no role is needed
	needs rightsNeeded
	// spend takes one use of a limited entry when the operation succeeds.
	spend bool
	// onExpired lets the operation run on an expired key (removal: an
	// expired key can still be deleted by its owner, never used).
	onExpired bool
	// do runs inside the decision's transaction once every check passed.
	// A returned *api.Error is a refusal: its writes are undone and a
	// FAILED row is kept.
	do func(tx *sql.Tx, d *decision) error
}

// decision is what the key server found before running an operation: the
// key and the acting principal's live entry on it.
type decision struct {
	key   *keyRecord
	entry *aclEntry
}

// actorOf starts an audit row naming whom a scoped session acts as.
func actorOf(s *scopedSession) AuditRow {
	return AuditRow{Principal: s.principal, SystemID: s.systemID, PrincipalID: s.principalID}
}

// runKeyOp makes the key server's decision on op for the session's
// principal and keeps one audit row for it, in one transaction.
func (g *Gateway) runKeyOp(ctx context.Context, s *scopedSession, now time.Time, op keyOp) error {
	row := actorOf(s)
	row.Time, row.Operation = now, op.op
	var refusal *api.Error
	err := g.store.inTx(ctx, func(tx *sql.Tx) error {
		refusal = nil
		d, e, err := g.decide(ctx, tx, s, now, op)
		if err != nil {
			return err
		}
		if d != nil && d.key != nil {
			row.Link = d.key.Link
		}
		if e == nil {
			if _, err := tx.ExecContext(ctx, "SAVEPOINT keyop"); err != nil {
				return err
			}
			err := op.do(tx, d)
			if !errors.As(err, &e) && err != nil {
				return err
			}
			if e != nil {
				if _, err := tx.ExecContext(ctx, "ROLLBACK TO keyop"); err != nil {
					return err
				}
			} else if op.spend {
				if err := g.store.useEntry(ctx, tx, op.ttag, d.entry); err != nil {
					return err
				}
			}
			if _, err := tx.ExecContext(ctx, "RELEASE keyop"); err != nil {
				return err
			}
		}
		refusal = e
		return g.keepAudit(ctx, tx, row, e)
	})
	return keyServerAnswer(op.op, err, refusal)
}

// keepAudit records row in tx with the outcome of the decision: OK, or
// FAILED with the refusal's code.
func (g *Gateway) keepAudit(ctx context.Context, tx *sql.Tx, row AuditRow, refusal *api.Error) error {
	row.Outcome, row.Code = OutcomeOK, ""
	if sc := trace.SpanContextFromContext(ctx); sc.TraceID().IsValid() {
		row.TraceID = sc.TraceID().String()
	}
	if refusal != nil {
		row.Outcome, row.Code = OutcomeFailed, refusal.Code
	}
	return g.store.insertAudit(ctx, tx, row)
}

// keyServerAnswer is the end of a key-server transaction for op: its
// failure, if it failed; else the refusal it decided, if any.
func keyServerAnswer(op string, err error, refusal *api.Error) error {
	if err != nil {
		return fmt.Errorf("key server %s: %w", op, err)
	}
	if refusal != nil {
		return refusal
	}
	return nil
}

// decide runs the key server's checks in order: the key exists, is not
// expired, the principal holds the role, and holds a live entry with the
// rights needed.
func (g *Gateway) decide(ctx context.Context, tx *sql.Tx, s *scopedSession, now time.Time, op keyOp) (*decision, *api.Error, error) {
	k, err := g.store.keyByTTag(ctx, tx, op.ttag)
	if errors.Is(err, errNotFound) {
		return nil, keyServerError(api.CodeKeyNotFound, http.StatusNotFound,
			"the key server has no key with this t-Tag (it was never made or was removed); do not retry"), nil
	}
	if err != nil {
		return nil, nil, err
	}
	d := &decision{key: k}
	if k.Expired && !op.onExpired {
		return d, keyServerError(api.CodeKeyExpired, http.StatusGone,
			"the key was expired; it can never be used again; do not retry"), nil
	}
	p, e, err := g.principalWithRole(ctx, tx, s, op.role)
	if e != nil || err != nil {
		return d, e, err
	}
	entry, err := g.store.entry(ctx, tx, op.ttag, p.SystemID, p.PrincipalID)
	if err != nil && !errors.Is(err, errNotFound) {
		return d, nil, err
	}
	if entry == nil || !entry.live(now) || !entry.has(api.RightRead, api.RightWrite, api.RightOwner) {
		return d, keyServerError(api.CodeACLDenied, http.StatusForbidden,
			"the principal holds no live entry on this key's access control list; ask the key's owner for access, do not retry"), nil
	}
	d.entry = entry
	switch op.needs {
	case needWrite:
		if !entry.has(api.RightWrite, api.RightOwner) {
			return d, keyServerError(api.CodeACLDenied, http.StatusForbidden,
				"the principal does not have write privilege on this key (it holds READ only); ask the key's owner, do not retry"), nil
		}
	case needOwner:
		if !entry.has(api.RightOwner) {
			return d, keyServerError(api.CodeACLDenied, http.StatusForbidden,
				"only the key's OWNER may do this; ask the owner, do not retry"), nil
		}
	}
	return d, nil, nil
}

// principalWithRole reloads the session's principal: deleted, disabled or
// without the role, it is ACCESS_DENIED.
func (g *Gateway) principalWithRole(ctx context.Context, q queryer, s *scopedSession, role string) (*principal, *api.Error, error) {
	p, err := g.store.principalByID(ctx, q, s.systemID, s.principalID)
	if errors.Is(err, errNotFound) || (err == nil && p.Name != s.principal) {
		return nil, keyServerError(api.CodeAccessDenied, http.StatusForbidden,
			"the principal this session acts as no longer exists; do not retry"), nil
	}
	if err != nil {
		return nil, nil, err
	}
	if p.Disabled {
		return nil, keyServerError(api.CodeAccessDenied, http.StatusForbidden,
			"the principal this session acts as is disabled; do not retry"), nil
	}
	if role != "" && !p.hasRole(role) {
		return nil, keyServerError(api.CodeAccessDenied, http.StatusForbidden,
			"the principal does not hold the "+role+" role at the key server; ask its administrator, do not retry"), nil
	}
	return p, nil, nil
}

// mintKey creates a key owned by the session's principal (an OWNER entry
// with no end and unlimited uses) and runs seal under it, in one
// transaction with its audit row.
func (g *Gateway) mintKey(ctx context.Context, s *scopedSession, now time.Time, seal func(k *keyRecord) error) (*keyRecord, error) {
	row := actorOf(s)
	row.Time, row.Operation = now, OpMint
	var refusal *api.Error
	var minted *keyRecord
	err := g.store.inTx(ctx, func(tx *sql.Tx) error {
		refusal, minted = nil, nil
		p, e, err := g.principalWithRole(ctx, tx, s, api.RoleEncrypt)
		if err != nil {
			return err
		}
		if e == nil {
			k := &keyRecord{TTag: randomTTag(), Link: randomLink(), Bytes: randomBytes(32),
				OwnerSys: p.SystemID, OwnerPID: p.PrincipalID}
			if err := g.store.insertKey(ctx, tx, k, now); err != nil {
				return err
			}
			owner := &aclEntry{SystemID: p.SystemID, PrincipalID: p.PrincipalID, Rights: []string{api.RightOwner}}
			if err := g.store.insertEntry(ctx, tx, k.TTag, owner); err != nil {
				return err
			}
			if err := seal(k); err != nil {
				return err
			}
			row.Link = k.Link
			minted = k
		}
		refusal = e
		return g.keepAudit(ctx, tx, row, e)
	})
	if err := keyServerAnswer(OpMint, err, refusal); err != nil {
		return nil, err
	}
	return minted, nil
}
