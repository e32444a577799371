package auth

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// wellKnownPRM is the RFC 9728 well-known suffix.
const wellKnownPRM = "/.well-known/oauth-protected-resource"

// MetadataHandler serves the RFC 9728 protected-resource metadata for
// resource: the resource exactly as hosts call it, the issuer as the one
// authorization server, scopes as scopes_supported (the scopes a host's
// client should ask for), and bearer tokens in the header only. Mount it at
// MetadataPath(resource).
func MetadataHandler(resource, issuer string, scopes []string) http.Handler {
	return sdkauth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource:               resource,
		AuthorizationServers:   []string{issuer},
		ScopesSupported:        slices.Clone(scopes),
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "pdmcp",
	})
}

// MetadataPath is the path the metadata is served at for resource: the
// well-known suffix inserted before the resource's path (RFC 9728 §3.1),
// e.g. /.well-known/oauth-protected-resource/mcp.
func MetadataPath(resource string) (string, error) {
	u, err := parseResource(resource)
	if err != nil {
		return "", err
	}
	return wellKnownPRM + strings.TrimSuffix(u.EscapedPath(), "/"), nil
}

// MetadataURL is the absolute URL of the metadata for resource, as named
// in the resource_metadata parameter of every challenge.
func MetadataURL(resource string) (string, error) {
	u, err := parseResource(resource)
	if err != nil {
		return "", err
	}
	p, _ := MetadataPath(resource)
	return u.Scheme + "://" + u.Host + p, nil
}

// parseResource requires an https URL without query or fragment (RFC 9728
// §1.2).
func parseResource(resource string) (*url.URL, error) {
	if resource == "" {
		return nil, errors.New("resource is empty")
	}
	u, err := url.Parse(resource)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("resource %q is not an https URL", resource)
	}
	if u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(resource, "?#") {
		return nil, fmt.Errorf("resource %q has a query or fragment", resource)
	}
	return u, nil
}
