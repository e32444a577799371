#!/usr/bin/env bash
# Tracing against a real backend (docs/operating.md "Tracing"): builds
# Jaeger v1.75.0 from the module in testdata/tracing/jaeger (its v2 binary;
# the Go build cache keeps its compiled packages between runs), starts it
# with deploy/tracing/jaeger.yaml on free loopback ports, starts `pdmcp dev`
# with OTEL_EXPORTER_OTLP_ENDPOINT pointing at it, and runs
# tracing/*.test.mjs: the TypeScript SDK calls a tool with a traceparent in
# _meta and the test reads the whole trace back from Jaeger's query API.
# Uses the clients testdata/realclients/run.sh installed (npm ci there
# first). Exits non-zero on any failure.
#
# Time on the 2-core machine (measured): the first Jaeger build about 20
# minutes while other builds ran (6 min 40 s of CPU; its module downloads
# 3 more), a cached one the link, 23 s; Jaeger ready in seconds; the test
# under 2 s; 48 s in all with a warm cache.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
clients="$(cd "$here/.." && pwd)"
root="$(cd "$clients/../.." && pwd)"

[ -d "$clients/node_modules/@modelcontextprotocol/sdk" ] ||
  { echo "tracing/run.sh: the TypeScript SDK is not installed: run npm ci in testdata/realclients (testdata/realclients/run.sh does)" >&2; exit 1; }

tmp="$(mktemp -d "${TMPDIR:-/tmp}/pdmcp-tracing.XXXXXX")"
state="$tmp/state"
jaeger_pid=""
. "$clients/dev.sh"

# stop_jaeger ends the Jaeger this script started, by its process id.
stop_jaeger() {
  [ -n "$jaeger_pid" ] || return 0
  kill -TERM "$jaeger_pid" 2>/dev/null || true
  for _ in $(seq 40); do
    kill -0 "$jaeger_pid" 2>/dev/null || break
    sleep 0.25
  done
  kill -KILL "$jaeger_pid" 2>/dev/null || true
  wait "$jaeger_pid" 2>/dev/null || true
  jaeger_pid=""
}
# dev.sh's cleanup exits with the status it finds in $?: Jaeger is stopped
# first and the status handed on.
trap 'st=$?; stop_jaeger; (exit "$st"); cleanup' EXIT

echo "== build Jaeger v1.75.0 (testdata/tracing/jaeger)"
start=$(date +%s)
(cd "$root/testdata/tracing/jaeger" && go build -o "$tmp/jaeger" github.com/jaegertracing/jaeger/cmd/jaeger)
echo "Jaeger built in $(( $(date +%s) - start )) s"

# Four free loopback ports, so a Jaeger already running here is left alone.
read -r otlp query grpc health < <(node -e '
const net = require("net");
(async () => {
  const ports = [];
  const servers = [];
  for (let i = 0; i < 4; i++) {
    const s = net.createServer();
    await new Promise((res) => s.listen(0, "127.0.0.1", res));
    ports.push(s.address().port);
    servers.push(s);
  }
  servers.forEach((s) => s.close());
  console.log(ports.join(" "));
})();')

echo "== Jaeger on 127.0.0.1 (OTLP/HTTP $otlp, query $query)"
JAEGER_OTLP_HTTP="127.0.0.1:$otlp" JAEGER_QUERY_HTTP="127.0.0.1:$query" JAEGER_QUERY_GRPC="127.0.0.1:$grpc" \
  JAEGER_HEALTH_HTTP="127.0.0.1:$health" "$tmp/jaeger" --config "$root/deploy/tracing/jaeger.yaml" >"$tmp/jaeger.log" 2>&1 &
jaeger_pid=$!
ready=""
for _ in $(seq 240); do
  if node -e 'fetch(process.argv[1]).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))' \
    "http://127.0.0.1:$query/api/services" 2>/dev/null; then
    ready=1
    break
  fi
  if ! kill -0 "$jaeger_pid" 2>/dev/null; then
    echo "Jaeger exited before it was ready:" >&2
    tail -n 40 "$tmp/jaeger.log" >&2
    exit 1
  fi
  sleep 0.5
done
if [ -z "$ready" ]; then
  echo "Jaeger was not ready after 120 s:" >&2
  tail -n 40 "$tmp/jaeger.log" >&2
  exit 1
fi

echo "== pdmcp dev exporting to Jaeger"
export OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$otlp" OTEL_SERVICE_NAME="pdmcp-ci"
export OTEL_BSP_SCHEDULE_DELAY=500 # the SDK's batch interval, ms: the test waits less
export JAEGER_QUERY_URL="http://127.0.0.1:$query"
start_dev

echo "== node --test tracing/"
cd "$clients"
run_tests tracing 300 "$@" ./tracing/*.test.mjs
finish "tracing (Jaeger)" 1
