#!/usr/bin/env bash
# The real hosts signing in at Keycloak: run by deploy/keycloak/test/
# keycloak.sh run (which sets KEYCLOAK_INFO) after the Go Keycloak test, in
# the same Keycloak start. It builds pdmcp, starts `pdmcp dev --provider
# keycloak` on Keycloak's state folder (they share its CA), runs
# keycloak/*.test.mjs with Node's test runner (each host signs a user in
# through Keycloak's own login page, then its model reads a document and is
# refused one), stops `pdmcp dev` and checks it exited 0.
#
# The clients are the ones ../run.sh installed (npm ci in testdata/
# realclients, which .ci/run's realclients step does first); this script
# refuses to run without them. Needs Go, Node >= 20. Exits non-zero on any
# failure. The test files are bounded to 8 minutes as a whole. Arguments go
# to node --test (for example --test-name-pattern=Codex).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
clients="$(cd "$here/.." && pwd)"
root="$(cd "$clients/../.." && pwd)"

[ -n "${KEYCLOAK_INFO:-}" ] && [ -s "$KEYCLOAK_INFO" ] ||
  { echo "keycloak/run.sh: KEYCLOAK_INFO names no keycloak.json: run it through deploy/keycloak/test/keycloak.sh run" >&2; exit 1; }
export KEYCLOAK_INFO # the tests read it too
for b in claude codex gemini opencode mcp-remote; do
  [ -x "$clients/node_modules/.bin/$b" ] ||
    { echo "keycloak/run.sh: $b is not installed: run npm ci in testdata/realclients (testdata/realclients/run.sh does)" >&2; exit 1; }
done

# keycloak.sh's state folder: <state>/keycloak/keycloak.json.
state="$(cd "$(dirname "$KEYCLOAK_INFO")/.." && pwd)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/pdmcp-kc-hosts.XXXXXX")"
. "$clients/dev.sh"

echo "== pdmcp dev --provider keycloak"
# A dev.json left by an earlier stack on this folder is not this one's.
rm -f "$state/dev.json"
start_dev --provider keycloak --keycloak-info "$KEYCLOAK_INFO"

echo "== node --test keycloak/"
cd "$clients"
run_tests keycloak 480 "$@" ./keycloak/*.test.mjs
finish "keycloak hosts" 1
