#!/usr/bin/env bash
# A real Keycloak on 127.0.0.1 for tests and for `pdmcp dev --provider
# keycloak`: the pinned distribution fetched through Maven (kept in the local
# Maven repository, so a second run downloads nothing), unpacked into the
# state folder, started over HTTPS with a certificate from the development CA,
# with deploy/keycloak's realm imported, and stopped again.
#
#   keycloak.sh fetch
#   keycloak.sh start --state DIR [--realm FILE] [--port N]
#   keycloak.sh stop  --state DIR
#   keycloak.sh run   --state DIR [--realm FILE] -- COMMAND [ARG...]
#
# start uses DIR/ca as the CA (made there when missing; `pdmcp dev --state
# DIR` uses the same one), writes everything under DIR/keycloak and, once the
# realm's discovery document is served, DIR/keycloak/keycloak.json:
#   {"version","url","issuer","realm","caFile","adminUser","adminPasswordFile","pid","log"}
# run starts, runs COMMAND with KEYCLOAK_INFO naming that file, stops, and
# exits with COMMAND's status. Keycloak runs in development mode (start-dev)
# with an in-memory database: nothing outlives the run but the log.
#
# Needs Java 17 or later, Maven, Go (for the certificate helper) and curl.
# KEYCLOAK_START_TIMEOUT (seconds, default 900) bounds the wait for readiness.
set -euo pipefail

KEYCLOAK_VERSION=26.7.3
ARTIFACT="org.keycloak:keycloak-quarkus-dist:${KEYCLOAK_VERSION}:zip"
DEP_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.6.1
REALM_NAME=pdmcp

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"

die() { echo "keycloak.sh: $*" >&2; exit 1; }

# fetch makes sure the distribution is in the local Maven repository: offline
# first, so a cached copy is used without asking the registry.
fetch() {
  command -v mvn >/dev/null || die "mvn is not installed"
  if (cd "${TMPDIR:-/tmp}" && mvn -B -q -o "$DEP_PLUGIN:get" -Dartifact="$ARTIFACT" -Dtransitive=false >/dev/null 2>&1); then
    echo "keycloak.sh: Keycloak $KEYCLOAK_VERSION is in the local Maven repository"
    return 0
  fi
  echo "keycloak.sh: fetching Keycloak $KEYCLOAK_VERSION through Maven"
  (cd "${TMPDIR:-/tmp}" && mvn -B -q "$DEP_PLUGIN:get" -Dartifact="$ARTIFACT" -Dtransitive=false) ||
    die "could not fetch $ARTIFACT"
}

check_java() {
  command -v java >/dev/null || die "java is not installed (Keycloak $KEYCLOAK_VERSION needs Java 17 or later)"
  local v
  v="$(java -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')"
  [ "${v%%.*}" -ge 17 ] 2>/dev/null || die "java $v is too old: Keycloak $KEYCLOAK_VERSION needs Java 17 or later"
}

# unpack puts a fresh copy of the distribution in $1 (from the local Maven
# repository, offline).
unpack() {
  local dest="$1"
  rm -rf "$dest"
  mkdir -p "$dest"
  # The plugin remembers what it unpacked in a markers folder and skips it
  # next time; that folder lives (and dies) with the copy. It runs in
  # $dest so that nothing lands in the caller's working folder.
  (cd "$dest" && mvn -B -q -o "$DEP_PLUGIN:unpack" -Dartifact="$ARTIFACT" -DoutputDirectory="$dest" \
    -DmarkersDirectory="$dest/.markers" >/dev/null) ||
    die "could not unpack $ARTIFACT (run: keycloak.sh fetch)"
  [ -x "$dest/keycloak-$KEYCLOAK_VERSION/bin/kc.sh" ] || die "the unpacked distribution has no bin/kc.sh"
}

json_string() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }

start() {
  local state="$1" realm="$2" port="$3"
  local kc="$state/keycloak"
  [ -f "$realm" ] || die "no realm file $realm"
  if [ -f "$kc/keycloak.pid" ] && kill -0 "$(cat "$kc/keycloak.pid")" 2>/dev/null; then
    die "a Keycloak from $state is already running (pid $(cat "$kc/keycloak.pid")); stop it first"
  fi
  check_java
  fetch
  mkdir -p "$kc"
  chmod 700 "$state" "$kc"
  rm -f "$kc/keycloak.json"

  local t0=$SECONDS
  unpack "$kc/dist"
  local home="$kc/dist/keycloak-$KEYCLOAK_VERSION"

  # The certificate, from the development CA, built with the project's own
  # helper; and the ports (HTTPS, the management interface Keycloak 25+
  # opens beside it, and plain HTTP).
  local helper="$kc/devcert"
  (cd "$root" && go build -o "$helper" ./deploy/keycloak/test/devcert)
  local pki ca cert key
  pki="$("$helper" -ca "$state/ca" -out "$kc" -name keycloak-tls)"
  ca="$(sed -n 1p <<<"$pki")"; cert="$(sed -n 2p <<<"$pki")"; key="$(sed -n 3p <<<"$pki")"
  # start-dev opens plain HTTP whatever --http-enabled says: it gets a free
  # loopback port too, so that it never collides with another 8080.
  local ports mport hport
  ports="$("$helper" -ports 3)"
  [ "$port" != 0 ] || port="$(sed -n 1p <<<"$ports")"
  mport="$(sed -n 2p <<<"$ports")"
  hport="$(sed -n 3p <<<"$ports")"

  # The bootstrap administrator, for the tests' admin calls.
  local pwfile="$kc/admin-password"
  if [ ! -s "$pwfile" ]; then
    (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$pwfile")
  fi

  mkdir -p "$home/data/import"
  cp "$realm" "$home/data/import/realm-$REALM_NAME.json"

  local log="$kc/keycloak.log"
  echo "keycloak.sh: starting Keycloak $KEYCLOAK_VERSION on https://127.0.0.1:$port (log: $log)"
  # setsid: Keycloak and its JVM get a process group of their own, which
  # stop signals as a whole. Every descriptor above stderr is closed first:
  # a long-lived Keycloak must not keep what its caller holds open, such as
  # the lock of `flock LOCKFILE keycloak.sh start`, which would otherwise
  # stay taken until Keycloak stops.
  (
    if [ -d /proc/self/fd ]; then
      for fd in /proc/self/fd/*; do
        n="${fd##*/}"
        if [ "$n" -gt 2 ] 2>/dev/null; then eval "exec $n>&-" 2>/dev/null || true; fi
      done
    fi
    KC_BOOTSTRAP_ADMIN_USERNAME=admin KC_BOOTSTRAP_ADMIN_PASSWORD="$(cat "$pwfile")" \
    exec setsid "$home/bin/kc.sh" start-dev --import-realm \
      --db=dev-mem \
      --http-enabled=false --http-host=127.0.0.1 --http-port="$hport" --https-port="$port" \
      --http-management-port="$mport" \
      --hostname="https://127.0.0.1:$port" \
      --https-certificate-file="$cert" --https-certificate-key-file="$key" \
      >"$log" 2>&1 </dev/null
  ) &
  local pid=$!
  echo "$pid" >"$kc/keycloak.pid"

  local issuer="https://127.0.0.1:$port/realms/$REALM_NAME"
  local deadline=$((SECONDS + ${KEYCLOAK_START_TIMEOUT:-900}))
  until curl -fsS --cacert "$ca" -o /dev/null "$issuer/.well-known/openid-configuration" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "keycloak.sh: Keycloak exited before it was ready; the end of its log:" >&2
      tail -n 40 "$log" >&2
      rm -f "$kc/keycloak.pid"
      exit 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "keycloak.sh: Keycloak was not ready within ${KEYCLOAK_START_TIMEOUT:-900}s; the end of its log:" >&2
      tail -n 40 "$log" >&2
      stop "$state"
      exit 1
    fi
    sleep 1
  done
  {
    printf '{\n'
    printf '  "version": %s,\n' "$(json_string "$KEYCLOAK_VERSION")"
    printf '  "url": %s,\n' "$(json_string "https://127.0.0.1:$port")"
    printf '  "issuer": %s,\n' "$(json_string "$issuer")"
    printf '  "realm": %s,\n' "$(json_string "$REALM_NAME")"
    printf '  "caFile": %s,\n' "$(json_string "$ca")"
    printf '  "adminUser": "admin",\n'
    printf '  "adminPasswordFile": %s,\n' "$(json_string "$pwfile")"
    printf '  "pid": %d,\n' "$pid"
    printf '  "log": %s\n' "$(json_string "$log")"
    printf '}\n'
  } >"$kc/keycloak.json.tmp"
  mv "$kc/keycloak.json.tmp" "$kc/keycloak.json"
  echo "keycloak.sh: ready after $((SECONDS - t0))s: issuer $issuer"
}

stop() {
  local state="$1"
  local kc="$state/keycloak"
  if [ -f "$kc/keycloak.pid" ]; then
    local pid
    pid="$(cat "$kc/keycloak.pid")"
    if kill -0 "$pid" 2>/dev/null; then
      # The whole process group: kc.sh and the JVM it started.
      kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 60); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
      done
      if kill -0 "$pid" 2>/dev/null; then
        echo "keycloak.sh: Keycloak did not stop on SIGTERM within 30s; killing it" >&2
        kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
      fi
    fi
    rm -f "$kc/keycloak.pid"
  fi
  rm -f "$kc/keycloak.json"
  # The unpacked distribution is 190 MB; the Maven repository keeps the zip.
  rm -rf "$kc/dist"
}

cmd="${1:-}"
[ -n "$cmd" ] || die "usage: keycloak.sh fetch | start --state DIR [--realm FILE] [--port N] | stop --state DIR | run --state DIR [--realm FILE] -- COMMAND..."
shift
state="" realm="$root/deploy/keycloak/realm-pdmcp.json" port=0
while [ $# -gt 0 ]; do
  case "$1" in
    --state) state="$2"; shift 2 ;;
    --realm) realm="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --) shift; break ;;
    *) die "unknown argument $1" ;;
  esac
done
if [ "$cmd" != fetch ]; then
  [ -n "$state" ] || die "--state DIR is required"
  mkdir -p "$state"
  state="$(cd "$state" && pwd)"
fi
realm="$(cd "$(dirname "$realm")" && pwd)/$(basename "$realm")"

case "$cmd" in
  fetch) fetch ;;
  start) start "$state" "$realm" "$port" ;;
  stop) stop "$state" ;;
  run)
    [ $# -gt 0 ] || die "run needs a command after --"
    trap 'stop "$state"' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    start "$state" "$realm" "$port"
    status=0
    KEYCLOAK_INFO="$state/keycloak/keycloak.json" "$@" || status=$?
    exit "$status"
    ;;
  *) die "unknown command $cmd" ;;
esac
