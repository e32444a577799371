package reference

import (
	"context"
	"time"
)

// Key server audit.

// Outcomes of a key-server decision.
const (
	OutcomeOK     = "OK"
	OutcomeFailed = "FAILED"
)

// AuditRow is one key-server decision, as the key server's own audit keeps
// it. Link is the key's hidden link, "" when the key was not found. Code is
// "" for an OK row.
type AuditRow struct {
	Time        time.Time
	Principal   string
	SystemID    int64
	PrincipalID string
	Operation   string
	Link        string
	Outcome     string
	Code        string
	// TraceID is the W3C trace id (32 lower-case hex digits) of the
	// request's traceparent header, "" when it had none or a malformed one.
	TraceID string
}

func (s *store) insertAudit(ctx context.Context, q queryer, row AuditRow) error {
	_, err := q.ExecContext(ctx, `INSERT INTO keyserver_audit (at, principal, system_id, principal_id, operation, link, outcome, code, trace_id)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, row.Time.UnixNano(), row.Principal, row.SystemID, row.PrincipalID,
		row.Operation, row.Link, row.Outcome, row.Code, row.TraceID)
	return err
}

func (s *store) audit(ctx context.Context) ([]AuditRow, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT at, principal, system_id, principal_id, operation, link, outcome, code, trace_id
		FROM keyserver_audit ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []AuditRow
	for rows.Next() {
		var r AuditRow
		var at int64
		if err := rows.Scan(&at, &r.Principal, &r.SystemID, &r.PrincipalID, &r.Operation, &r.Link, &r.Outcome, &r.Code, &r.TraceID); err != nil {
			return nil, err
		}
		r.Time = time.Unix(0, at).UTC()
		out = append(out, r)
	}
	return out, rows.Err()
}
