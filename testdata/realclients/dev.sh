# Sourced by run.sh and keycloak/run.sh: one `pdmcp dev` under test and the
# node --test rounds against it. The sourcing script sets root (the
# repository), tmp (a fresh folder this removes on exit) and state (the
# state folder) first; this builds pdmcp into $tmp and installs the traps.

dev_pid="" tests_pid="" dev_status="" tests_status=0

# stop_dev interrupts `pdmcp dev` as Ctrl-C would and waits for it (30s at
# most, then kills it). It sets dev_status to its exit status.
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

# stop_dev_checked stops `pdmcp dev` and fails, with its last log lines,
# unless it exited 0.
stop_dev_checked() {
  stop_dev
  if [ "$dev_status" -ne 0 ]; then
    echo "pdmcp dev exited $dev_status after SIGINT, want 0; its last lines:" >&2
    tail -n 40 "$tmp/dev.err" >&2
    return 1
  fi
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

# start_dev starts `pdmcp dev` on $state with any further flags given and
# waits until it printed its instructions (120s at most). It writes dev.out
# afresh and adds to dev.err; it sets ca to the CA file dev.json names.
start_dev() {
  "$tmp/pdmcp" dev "$@" --state "$state" >"$tmp/dev.out" 2>>"$tmp/dev.err" &
  dev_pid=$!
  for _ in $(seq 240); do
    if [ -s "$state/dev.json" ] && grep -q "Ctrl-C stops everything" "$tmp/dev.out"; then
      ca="$(node -p 'require(process.argv[1]).caFile' "$state/dev.json")"
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

# run_tests runs node --test with the given arguments in the background, so
# that the traps can stop them (they stop the clients they started),
# bounded to limit seconds as a whole, with TAP results in
# $tmp/results-<name>.tap. A failure sets tests_status.
run_tests() {
  local name="$1" limit="$2"
  shift 2
  mkdir -p "$tmp/t" "$tmp/keep"
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

# finish stops `pdmcp dev`, prints the tally of every round's results and
# exits: 0 only if pdmcp dev exited 0 and want_rounds rounds ($2) all ran
# and passed. $1 names the suite in the last line.
finish() {
  local suite="$1" want_rounds="$2"
  stop_dev_checked || true
  if [ "$tests_status" -ne 0 ]; then
    echo "== pdmcp dev's last log lines" >&2
    tail -n 40 "$tmp/dev.err" >&2
  fi
  local pass fail rounds
  pass="$(cat "$tmp"/results-*.tap 2>/dev/null | awk '/^# pass /{n+=$3} END{print n+0}')"
  fail="$(cat "$tmp"/results-*.tap 2>/dev/null | awk '/^# fail /{n+=$3; seen=1} END{if (seen) print n+0; else print "?"}')"
  rounds="$(cat "$tmp"/results-*.tap 2>/dev/null | grep -c '^# fail ' || true)"
  echo "${pass:-0} passed, ${fail:-?} failed"
  if [ "$tests_status" -ne 0 ] || [ "$dev_status" -ne 0 ] || [ "${fail:-1}" != 0 ] || [ "${pass:-0}" = 0 ] ||
    [ "$rounds" != "$want_rounds" ]; then
    echo "$suite: FAIL" >&2
    exit 1
  fi
  echo "$suite: OK"
}
