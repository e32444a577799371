package reference

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"unicode"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/proof"
)

// The administration routes: the admin's Basic credentials, or (principal
// and identity routes) a service session limited to its own prefix.

const maxNameLength = 256

// checkName refuses empty, over-long names and names holding spaces or
// control characters.
func checkName(field, s string) *api.Error {
	if s == "" || len(s) > maxNameLength {
		return badRequest(fmt.Sprintf("%s must be 1 to %d characters; fix it", field, maxNameLength))
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return badRequest(field + " must not hold spaces or control characters; fix it")
		}
	}
	return nil
}

func conflict(detail string) *api.Error {
	return gatewayError(api.CodeConflict, http.StatusConflict, detail)
}

func notFound(detail string) *api.Error {
	return gatewayError(api.CodeNotFound, http.StatusNotFound, detail)
}

func outsidePrefix() *api.Error {
	return gatewayError(api.CodeActingAsRefused, http.StatusForbidden,
		"a service may manage only principals inside its own prefix; use a name that starts with it")
}

func parseCertPEM(field, s string) (*x509.Certificate, *api.Error) {
	block, _ := pem.Decode([]byte(s))
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, badRequest(field + " must be one PEM CERTIFICATE block; send the certificate in PEM")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, badRequest(field + " does not parse as an X.509 certificate; send a valid one")
	}
	return c, nil
}

func (g *Gateway) registerService(ctx context.Context, c *call) (any, error) {
	var req api.RegisterServiceRequest
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	if e := checkName("name", req.Name); e != nil {
		return nil, e
	}
	cert, e := parseCertPEM("certificate", req.Certificate)
	if e != nil {
		return nil, e
	}
	if req.DelegatorCertificate != "" {
		if _, e := parseCertPEM("delegatorCertificate", req.DelegatorCertificate); e != nil {
			return nil, e
		}
	}
	senderKey, err := proof.ParsePublicP256(req.SenderJWK)
	if err != nil {
		return nil, badRequest("senderJwk must be a public P-256 JWK; send the sender key's public half")
	}
	jkt, err := proof.Thumbprint(senderKey)
	if err != nil {
		return nil, badRequest("senderJwk has no thumbprint; send a complete public P-256 JWK")
	}
	senderJSON, err := json.Marshal(senderKey)
	if err != nil {
		return nil, fmt.Errorf("encode sender key: %w", err)
	}
	prefix := req.Prefix
	if prefix == "" {
		prefix = "xa." + hex.EncodeToString(randomBytes(4)) + "."
	}
	if e := checkName("prefix", prefix); e != nil {
		return nil, e
	}
	sv := &service{
		ID:              "service-" + hex.EncodeToString(randomBytes(8)),
		Name:            req.Name,
		CertFingerprint: proof.CertFingerprint(cert),
		CertPEM:         string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})),
		SenderJKT:       jkt,
		SenderJWK:       string(senderJSON),
		DelegatorPEM:    req.DelegatorCertificate,
		AllowScoped:     req.AllowScoped,
		Prefix:          prefix,
	}
	what, err := g.store.serviceConflict(ctx, sv)
	if err != nil {
		return nil, err
	}
	if what != "" {
		return nil, conflict("a service with this " + what + " is already registered; reuse it or choose another " + what)
	}
	// System ids are random ten-digit numbers, as a real key server's are
	// not small counters; retry the rare collision.
	for attempt := 0; ; attempt++ {
		n, err := rand.Int(rand.Reader, big.NewInt(1_000_000_000))
		if err != nil {
			return nil, err
		}
		sv.SystemID = 1_000_000_000 + n.Int64()
		err = g.store.insertService(ctx, sv, c.now)
		if err == nil {
			break
		}
		if !errors.Is(err, errConflict) {
			return nil, err
		}
		if attempt == 4 {
			// Another registration took the same name, certificate or
			// prefix between the check and the insert.
			return nil, conflict("a service with this name, certificate or prefix was registered at the same time; retry")
		}
	}
	g.log.Info("service registered", "serviceId", sv.ID, "systemId", sv.SystemID, "allowScoped", sv.AllowScoped)
	return api.RegisterServiceResponse{ServiceID: sv.ID, SystemID: sv.SystemID, Prefix: sv.Prefix}, nil
}

// principalRequest decodes a principal route's body and finds the service
// the name belongs to: with a service session, that service (the name must
// be inside its prefix); with the admin's credentials, the service whose
// prefix starts the name.
func (g *Gateway) principalRequest(ctx context.Context, c *call) (api.PrincipalRequest, *service, error) {
	var req api.PrincipalRequest
	if err := c.decode(&req); err != nil {
		return req, nil, err
	}
	sv, err := g.principalService(ctx, c, req.Name)
	return req, sv, err
}

// principalService is the service the principal name belongs to, as
// principalRequest says.
func (g *Gateway) principalService(ctx context.Context, c *call, name string) (*service, error) {
	if e := checkName("name", name); e != nil {
		return nil, e
	}
	if c.service != nil {
		if !strings.HasPrefix(name, c.service.prefix) {
			return nil, outsidePrefix()
		}
		return g.store.serviceByID(ctx, c.service.serviceID)
	}
	sv, err := g.store.serviceForName(ctx, name)
	if errors.Is(err, errNotFound) {
		return nil, badRequest("the name starts with no registered service's prefix; prefix it with the service's")
	}
	return sv, err
}

func apiPrincipal(p *principal) api.Principal {
	return api.Principal{Name: p.Name, SystemID: p.SystemID, PrincipalID: p.PrincipalID, Roles: p.Roles, Disabled: p.Disabled}
}

func (g *Gateway) createPrincipal(ctx context.Context, c *call) (any, error) {
	req, sv, err := g.principalRequest(ctx, c)
	if err != nil {
		return nil, err
	}
	if len(req.Name) == len(sv.Prefix) {
		return nil, badRequest("the name is only the prefix; add the principal's own part after it")
	}
	roles, e := sortedRoles(req.Roles)
	if e != nil {
		return nil, e
	}
	p, err := g.store.createPrincipal(ctx, sv, req.Name, roles, req.Disabled)
	if errors.Is(err, errConflict) {
		return nil, conflict("a principal with this name already exists; get it, or delete it first")
	}
	if err != nil {
		return nil, err
	}
	return apiPrincipal(p), nil
}

// namedPrincipal is the principal a principal route's body names, inside
// the caller's reach.
func (g *Gateway) namedPrincipal(ctx context.Context, c *call) (*principal, error) {
	req, sv, err := g.principalRequest(ctx, c)
	if err != nil {
		return nil, err
	}
	p, err := g.store.principalByName(ctx, g.store.db, req.Name)
	if errors.Is(err, errNotFound) || (err == nil && p.ServiceID != sv.ID) {
		return nil, notFound("there is no principal with this name; create it first")
	}
	return p, err
}

func (g *Gateway) getPrincipal(ctx context.Context, c *call) (any, error) {
	p, err := g.namedPrincipal(ctx, c)
	if err != nil {
		return nil, err
	}
	return apiPrincipal(p), nil
}

func (g *Gateway) deletePrincipal(ctx context.Context, c *call) (any, error) {
	p, err := g.namedPrincipal(ctx, c)
	if err != nil {
		return nil, err
	}
	// Its identity mappings go with it; its ACL entries stay, and its id is
	// never given to another principal.
	if err := g.store.deletePrincipal(ctx, p.Name); errors.Is(err, errNotFound) {
		return nil, notFound("there is no principal with this name; nothing was deleted")
	} else if err != nil {
		return nil, err
	}
	return api.OKResponse{OK: true}, nil
}

// sortedRoles validates and normalises a role list; none means the default.
func sortedRoles(roles []string) ([]string, *api.Error) {
	if len(roles) == 0 {
		roles = api.DefaultRoles
	}
	set := map[string]bool{}
	for _, r := range roles {
		switch r {
		case api.RoleEncrypt, api.RoleDecrypt, api.RoleACL:
			set[r] = true
		default:
			return nil, badRequest("roles may hold only ENCRYPT, DECRYPT and ACL; fix the role list")
		}
	}
	out := make([]string, 0, len(set))
	for r := range set {
		out = append(out, r)
	}
	sort.Strings(out)
	return out, nil
}

func (g *Gateway) bindProvider(ctx context.Context, c *call) (any, error) {
	var req api.BindProviderRequest
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	if req.ServiceID == "" {
		return nil, badRequest("serviceId is required; name the service the provider is bound to")
	}
	if _, err := g.store.serviceByID(ctx, req.ServiceID); errors.Is(err, errNotFound) {
		return nil, notFound("there is no service with this serviceId; register it first")
	} else if err != nil {
		return nil, err
	}
	u, err := url.Parse(req.Issuer)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, badRequest("issuer must be an https URL with no query or fragment, exactly as the provider's tokens name it")
	}
	if req.Audience == "" || req.AllowedClient == "" {
		return nil, badRequest("audience (the Gateway's API audience) and allowedClient (the token's azp) are required")
	}
	if req.CAPEM != "" {
		if !x509.NewCertPool().AppendCertsFromPEM([]byte(req.CAPEM)) {
			return nil, badRequest("caPem holds no PEM certificate; send the CA that signs the provider's TLS certificate")
		}
	}
	b := providerBinding{ServiceID: req.ServiceID, Issuer: req.Issuer, Audience: req.Audience,
		AllowedClient: req.AllowedClient, CAPEM: req.CAPEM}
	if err := g.store.bindProvider(ctx, b); err != nil {
		return nil, err
	}
	g.providers.forget(req.Issuer)
	return api.OKResponse{OK: true}, nil
}

// identityService is the service an identity route acts for: the session's
// (a different serviceId is refused), the one named, or the one whose
// prefix starts the principal's name.
func (g *Gateway) identityService(ctx context.Context, c *call, serviceID, principalName string) (*service, error) {
	if c.service != nil {
		if serviceID != "" && serviceID != c.service.serviceID {
			return nil, gatewayError(api.CodeActingAsRefused, http.StatusForbidden,
				"a service may map identities only for itself; leave serviceId empty or name this service")
		}
		return g.store.serviceByID(ctx, c.service.serviceID)
	}
	if serviceID != "" {
		sv, err := g.store.serviceByID(ctx, serviceID)
		if errors.Is(err, errNotFound) {
			return nil, notFound("there is no service with this serviceId; register it first")
		}
		return sv, err
	}
	if principalName != "" {
		sv, err := g.store.serviceForName(ctx, principalName)
		if errors.Is(err, errNotFound) {
			return nil, badRequest("the principal starts with no registered service's prefix; name the serviceId")
		}
		return sv, err
	}
	return nil, badRequest("serviceId is required with the admin's credentials; name the service")
}

func (g *Gateway) mapIdentity(ctx context.Context, c *call) (any, error) {
	var req api.MapIdentityRequest
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	if req.Issuer == "" || req.Subject == "" || req.Principal == "" {
		return nil, badRequest("issuer, subject and principal are all required; send each")
	}
	sv, err := g.identityService(ctx, c, req.ServiceID, req.Principal)
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(req.Principal, sv.Prefix) {
		return nil, gatewayError(api.CodeActingAsRefused, http.StatusForbidden,
			"an identity may map only to a principal inside the service's prefix; name one inside it")
	}
	p, err := g.store.principalByName(ctx, g.store.db, req.Principal)
	if errors.Is(err, errNotFound) || (err == nil && p.ServiceID != sv.ID) {
		return nil, notFound("there is no principal with this name; create it before mapping an identity to it")
	}
	if err != nil {
		return nil, err
	}
	if err := g.store.mapIdentity(ctx, sv.ID, req.Issuer, req.Subject, p.Name, req.Disabled); err != nil {
		return nil, err
	}
	return api.OKResponse{OK: true}, nil
}

func (g *Gateway) unmapIdentity(ctx context.Context, c *call) (any, error) {
	var req api.MapIdentityRequest
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	if req.Issuer == "" || req.Subject == "" {
		return nil, badRequest("issuer and subject name the mapping to remove; send both")
	}
	sv, err := g.identityService(ctx, c, req.ServiceID, req.Principal)
	if err != nil {
		return nil, err
	}
	if err := g.store.unmapIdentity(ctx, sv.ID, req.Issuer, req.Subject); errors.Is(err, errNotFound) {
		return nil, notFound("there is no mapping for this issuer and subject; nothing was removed")
	} else if err != nil {
		return nil, err
	}
	return api.OKResponse{OK: true}, nil
}
