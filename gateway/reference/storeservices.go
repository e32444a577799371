package reference

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Services.

type service struct {
	ID              string
	Name            string
	CertFingerprint string
	CertPEM         string
	SenderJKT       string
	SenderJWK       string
	DelegatorPEM    string
	AllowScoped     bool
	Prefix          string
	SystemID        int64
}

const serviceColumns = `service_id, name, cert_fingerprint, cert_pem, sender_jkt, sender_jwk, delegator_pem, allow_scoped, prefix, system_id`

func scanService(row interface{ Scan(...any) error }) (*service, error) {
	var sv service
	err := row.Scan(&sv.ID, &sv.Name, &sv.CertFingerprint, &sv.CertPEM, &sv.SenderJKT, &sv.SenderJWK,
		&sv.DelegatorPEM, &sv.AllowScoped, &sv.Prefix, &sv.SystemID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	return &sv, nil
}

func (s *store) insertService(ctx context.Context, sv *service, now time.Time) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO services (`+serviceColumns+`, next_principal_id, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		sv.ID, sv.Name, sv.CertFingerprint, sv.CertPEM, sv.SenderJKT, sv.SenderJWK, sv.DelegatorPEM,
		sv.AllowScoped, sv.Prefix, sv.SystemID, firstPrincipalID, now.UnixNano())
	if isUniqueViolation(err) {
		return fmt.Errorf("%w: %v", errConflict, err)
	}
	return err
}

func (s *store) serviceByFingerprint(ctx context.Context, fp string) (*service, error) {
	return scanService(s.db.QueryRowContext(ctx, `SELECT `+serviceColumns+` FROM services WHERE cert_fingerprint = ?`, fp))
}

func (s *store) serviceByID(ctx context.Context, id string) (*service, error) {
	return scanService(s.db.QueryRowContext(ctx, `SELECT `+serviceColumns+` FROM services WHERE service_id = ?`, id))
}

// serviceForName finds the service whose prefix starts name, the longest
// prefix winning.
func (s *store) serviceForName(ctx context.Context, name string) (*service, error) {
	return scanService(s.db.QueryRowContext(ctx, `SELECT `+serviceColumns+` FROM services
		WHERE substr(?, 1, length(prefix)) = prefix ORDER BY length(prefix) DESC LIMIT 1`, name))
}

// serviceConflict reports which unique field of a new service is taken.
func (s *store) serviceConflict(ctx context.Context, sv *service) (string, error) {
	checks := []struct{ where, val, what string }{
		{`cert_fingerprint = ?1`, sv.CertFingerprint, "certificate"},
		{`name = ?1`, sv.Name, "name"},
		// One prefix may not start another: a principal's name must
		// belong to one service only.
		{`substr(?1, 1, length(prefix)) = prefix OR substr(prefix, 1, length(?1)) = ?1`, sv.Prefix, "prefix"},
	}
	for _, c := range checks {
		var n int
		if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM services WHERE `+c.where, c.val).Scan(&n); err != nil {
			return "", err
		}
		if n > 0 {
			return c.what, nil
		}
	}
	return "", nil
}

// Principals.

// firstPrincipalID is where each service's principal ids start.
const firstPrincipalID = 1001

type principal struct {
	Name        string
	ServiceID   string
	SystemID    int64
	PrincipalID string
	Roles       []string
	Disabled    bool
}

func (p *principal) hasRole(role string) bool {
	for _, r := range p.Roles {
		if r == role {
			return true
		}
	}
	return false
}

const principalColumns = `name, service_id, system_id, principal_id, roles, disabled`

func scanPrincipal(row interface{ Scan(...any) error }) (*principal, error) {
	var p principal
	var roles string
	err := row.Scan(&p.Name, &p.ServiceID, &p.SystemID, &p.PrincipalID, &roles, &p.Disabled)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	p.Roles = splitList(roles)
	return &p, nil
}

// createPrincipal allocates the service's next principal id; ids are never
// reused, so a new principal never inherits a deleted one's ACL entries.
func (s *store) createPrincipal(ctx context.Context, sv *service, name string, roles []string, disabled bool) (*principal, error) {
	var p *principal
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var next int64
		if err := tx.QueryRowContext(ctx, `SELECT next_principal_id FROM services WHERE service_id = ?`, sv.ID).Scan(&next); err != nil {
			return err
		}
		p = &principal{Name: name, ServiceID: sv.ID, SystemID: sv.SystemID,
			PrincipalID: fmt.Sprint(next), Roles: roles, Disabled: disabled}
		_, err := tx.ExecContext(ctx, `INSERT INTO principals (`+principalColumns+`) VALUES (?, ?, ?, ?, ?, ?)`,
			p.Name, p.ServiceID, p.SystemID, p.PrincipalID, joinList(roles), disabled)
		if isUniqueViolation(err) {
			return fmt.Errorf("%w: %v", errConflict, err)
		}
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE services SET next_principal_id = ? WHERE service_id = ?`, next+1, sv.ID)
		return err
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (s *store) principalByName(ctx context.Context, q queryer, name string) (*principal, error) {
	return scanPrincipal(q.QueryRowContext(ctx, `SELECT `+principalColumns+` FROM principals WHERE name = ?`, name))
}

func (s *store) principalByID(ctx context.Context, q queryer, systemID int64, principalID string) (*principal, error) {
	return scanPrincipal(q.QueryRowContext(ctx, `SELECT `+principalColumns+` FROM principals
		WHERE system_id = ? AND principal_id = ?`, systemID, principalID))
}

func (s *store) deletePrincipal(ctx context.Context, name string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM principals WHERE name = ?`, name)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errNotFound
	}
	return nil
}

// OpenID provider bindings and identity mappings.

type providerBinding struct {
	ServiceID     string
	Issuer        string
	Audience      string
	AllowedClient string
	CAPEM         string
}

func (s *store) bindProvider(ctx context.Context, b providerBinding) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO providers (service_id, issuer, audience, allowed_client, ca_pem)
		VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (service_id, issuer) DO UPDATE SET audience = excluded.audience,
			allowed_client = excluded.allowed_client, ca_pem = excluded.ca_pem`,
		b.ServiceID, b.Issuer, b.Audience, b.AllowedClient, b.CAPEM)
	return err
}

func (s *store) binding(ctx context.Context, serviceID, issuer string) (*providerBinding, error) {
	var b providerBinding
	err := s.db.QueryRowContext(ctx, `SELECT service_id, issuer, audience, allowed_client, ca_pem FROM providers
		WHERE service_id = ? AND issuer = ?`, serviceID, issuer).
		Scan(&b.ServiceID, &b.Issuer, &b.Audience, &b.AllowedClient, &b.CAPEM)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	return &b, nil
}

func (s *store) mapIdentity(ctx context.Context, serviceID, issuer, subject, principalName string, disabled bool) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO identities (service_id, issuer, subject, principal, disabled)
		VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (service_id, issuer, subject) DO UPDATE SET principal = excluded.principal,
			disabled = excluded.disabled`,
		serviceID, issuer, subject, principalName, disabled)
	return err
}

func (s *store) unmapIdentity(ctx context.Context, serviceID, issuer, subject string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM identities WHERE service_id = ? AND issuer = ? AND subject = ?`,
		serviceID, issuer, subject)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errNotFound
	}
	return nil
}

// mappedPrincipal is the principal an enabled mapping names, or errNotFound.
func (s *store) mappedPrincipal(ctx context.Context, serviceID, issuer, subject string) (*principal, error) {
	var name string
	err := s.db.QueryRowContext(ctx, `SELECT principal FROM identities
		WHERE service_id = ? AND issuer = ? AND subject = ? AND disabled = 0`, serviceID, issuer, subject).Scan(&name)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	return s.principalByName(ctx, s.db, name)
}
