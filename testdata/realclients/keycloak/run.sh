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
for b in claude codex gemini opencode mcp-remote; do
  [ -x "$clients/node_modules/.bin/$b" ] ||
    { echo "keycloak/run.sh: $b is not installed: run npm ci in testdata/realclients (testdata/realclients/run.sh does)" >&2; exit 1; }
done

# keycloak.sh's state folder: <state>/keycloak/keycloak.json.
state="$(cd "$(dirname "$KEYCLOAK_INFO")/.." && pwd)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/pdmcp-kc-hosts.XXXXXX")"
dev_pid="" tests_pid="" dev_status=""

stop_dev() {
  [ -n "$dev_pid" ] || return 0
  kill -INT "$dev_pid" 2>/dev/null || true
  for _ in $(seq 60); do
    kill -0 "$dev_pid" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$dev_pid" 2>/dev/null; then
    echo "pdmcp dev did not stop on SIGINT within 30s; killing it" >&2
    kill -KILL "$dev_pid" 2>/dev/null || true
  fi
  dev_status=0
  wait "$dev_pid" || dev_status=$?
  dev_pid=""
}
cleanup() {
  local status=$?
  if [ -n "$tests_pid" ]; then
    kill -TERM "$tests_pid" 2>/dev/null || true
    wait "$tests_pid" 2>/dev/null || true
  fi
  stop_dev
  rm -rf "$tmp"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "== build pdmcp"
(cd "$root" && go build -o "$tmp/pdmcp" ./cmd/pdmcp)

echo "== pdmcp dev --provider keycloak"
# A dev.json left by an earlier stack on this folder is not this one's.
rm -f "$state/dev.json"
"$tmp/pdmcp" dev --provider keycloak --keycloak-info "$KEYCLOAK_INFO" --state "$state" >"$tmp/dev.out" 2>"$tmp/dev.err" &
dev_pid=$!
for _ in $(seq 240); do
  if [ -s "$state/dev.json" ] && grep -q "Ctrl-C stops everything" "$tmp/dev.out"; then break; fi
  if ! kill -0 "$dev_pid" 2>/dev/null; then
    echo "pdmcp dev exited before it was ready:" >&2
    tail -n 40 "$tmp/dev.err" >&2
    exit 1
  fi
  sleep 0.5
done
grep -q "Ctrl-C stops everything" "$tmp/dev.out" || { echo "pdmcp dev was not ready after 120s:" >&2; tail -n 40 "$tmp/dev.err" >&2; exit 1; }
ca="$(node -p 'require(process.argv[1]).caFile' "$state/dev.json")"

echo "== node --test keycloak/"
mkdir -p "$tmp/t" "$tmp/keep"
cd "$clients"
status=0
PDMCP_BIN="$tmp/pdmcp" PDMCP_STATE="$state" PDMCP_DEV_JSON="$state/dev.json" PDMCP_DEV_OUT="$tmp/dev.out" \
  PDMCP_KEEP="$tmp/keep" KEYCLOAK_INFO="$KEYCLOAK_INFO" NODE_EXTRA_CA_CERTS="$ca" TMPDIR="$tmp/t" \
  timeout -k 10 480 node --test --test-timeout=300000 \
  --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=tap --test-reporter-destination="$tmp/results.tap" \
  "$@" ./keycloak/*.test.mjs &
tests_pid=$!
wait "$tests_pid" || status=$?
tests_pid=""

stop_dev
if [ "$dev_status" -ne 0 ] || [ "$status" -ne 0 ]; then
  echo "== pdmcp dev exited $dev_status; its last log lines" >&2
  tail -n 40 "$tmp/dev.err" >&2
fi
pass="$(awk '/^# pass /{print $3}' "$tmp/results.tap" 2>/dev/null)"
fail="$(awk '/^# fail /{print $3}' "$tmp/results.tap" 2>/dev/null)"
echo "${pass:-0} passed, ${fail:-?} failed"
if [ "$status" -ne 0 ] || [ "$dev_status" -ne 0 ] || [ "${fail:-1}" != 0 ] || [ "${pass:-0}" = 0 ]; then
  echo "keycloak hosts: FAIL" >&2
  exit 1
fi
echo "keycloak hosts: OK"
