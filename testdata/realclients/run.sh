#!/usr/bin/env bash
# Real MCP hosts and clients, installed from the npm registry at the versions
# package-lock.json pins, run against `pdmcp dev`: the MCP Inspector CLI, the
# TypeScript SDK's OAuth client, Claude Code's and Codex's `mcp` commands.
# It builds pdmcp, installs the clients (npm ci; a failed install fails the
# run), starts `pdmcp dev` on a fresh state folder, runs the *.test.mjs files
# with Node's test runner, stops `pdmcp dev` with SIGINT and checks it exited
# 0. Needs Go, Node >= 20 and npm. Exits non-zero on any failure.
#
# package.json: the four clients at exact versions; allowScripts lets only
# Claude Code's postinstall run (it links its native binary from the
# platform package); overrides pins vite (an Inspector web-UI dependency) to
# 8.3.8 because vite 8.4.0 names an optional dependency the registry does
# not serve, which leaves a lockfile `npm ci` refuses.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/pdmcp-realclients.XXXXXX")"
dev_pid=""

# stop_dev interrupts `pdmcp dev` as Ctrl-C would and waits for it (30s at
# most, then kills it). It sets dev_status to its exit status.
dev_status=""
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

tests_pid=""
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

echo "== npm ci (testdata/realclients)"
cd "$here"
# Every package comes from the registry, pinned by its integrity hash.
node -e '
const lock = require("./package-lock.json");
const bad = Object.entries(lock.packages).filter(([k, p]) => k !== "" &&
  (!p.integrity || !p.integrity.startsWith("sha512-") || (p.resolved && !p.resolved.startsWith("https://registry.npmjs.org/"))));
if (bad.length) { console.error("package-lock.json has entries not pinned to the npm registry:", bad.map(([k]) => k).join(", ")); process.exit(1); }
'
if ! npm ci --no-audit --no-fund --loglevel=error; then
  echo "npm ci failed: the real clients could not be installed" >&2
  exit 1
fi

echo "== pdmcp dev"
state="$tmp/state"
"$tmp/pdmcp" dev --state "$state" >"$tmp/dev.out" 2>"$tmp/dev.err" &
dev_pid=$!
for _ in $(seq 240); do
  if [ -s "$state/dev.json" ] && grep -q "Ctrl-C stops everything" "$tmp/dev.out"; then
    break
  fi
  if ! kill -0 "$dev_pid" 2>/dev/null; then
    echo "pdmcp dev exited before it was ready:" >&2
    tail -n 40 "$tmp/dev.err" >&2
    exit 1
  fi
  sleep 0.5
done
if ! grep -q "Ctrl-C stops everything" "$tmp/dev.out"; then
  echo "pdmcp dev was not ready after 120s:" >&2
  tail -n 40 "$tmp/dev.err" >&2
  exit 1
fi
ca="$(node -p 'require(process.argv[1]).caFile' "$state/dev.json")"

echo "== node --test"
mkdir -p "$tmp/t"
# In the background so that the traps can stop it (it stops the clients it
# started); bounded to 8 minutes as a whole.
PDMCP_BIN="$tmp/pdmcp" PDMCP_STATE="$state" PDMCP_DEV_JSON="$state/dev.json" PDMCP_DEV_OUT="$tmp/dev.out" \
  NODE_EXTRA_CA_CERTS="$ca" TMPDIR="$tmp/t" \
  timeout -k 10 480 node --test --test-timeout=300000 \
  --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=tap --test-reporter-destination="$tmp/results.tap" \
  ./*.test.mjs &
tests_pid=$!
tests_status=0
wait "$tests_pid" || tests_status=$?
tests_pid=""

stop_dev
if [ "$dev_status" -ne 0 ]; then
  echo "pdmcp dev exited $dev_status after SIGINT, want 0; its last lines:" >&2
  tail -n 40 "$tmp/dev.err" >&2
fi
if [ "$tests_status" -ne 0 ]; then
  echo "== pdmcp dev's last log lines" >&2
  tail -n 40 "$tmp/dev.err" >&2
fi

pass="$(awk '/^# pass /{print $3}' "$tmp/results.tap" 2>/dev/null || true)"
fail="$(awk '/^# fail /{print $3}' "$tmp/results.tap" 2>/dev/null || true)"
echo "${pass:-0} passed, ${fail:-?} failed"
if [ "$tests_status" -ne 0 ] || [ "$dev_status" -ne 0 ] || [ "${fail:-1}" != 0 ] || [ "${pass:-0}" = 0 ]; then
  echo "realclients: FAIL" >&2
  exit 1
fi
echo "realclients: OK"
