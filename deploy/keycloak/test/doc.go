// Package keycloaktest is the end-to-end test of pdmcp against a real
// Keycloak: the realm in deploy/keycloak, a host's sign-in on Keycloak's own
// login page, token exchange at Keycloak and the reference Gateway bound to
// it. The test is behind the build tag keycloak and needs a running Keycloak
// that keycloak.sh started (it names it in KEYCLOAK_INFO):
//
//	deploy/keycloak/test/keycloak.sh run --state /tmp/kc -- \
//	    go test -tags keycloak -count=1 ./deploy/keycloak/test/
//
// Without the tag the package holds no test, so `go test ./...` neither
// runs nor skips it; with the tag and no Keycloak it fails.
package keycloaktest
