#!/usr/bin/env bash
# Writes on one partition and on two (issue 40's capacity model; docs/scale-out.md, "Capacity").
# Two PostgreSQL clusters (durable: fsync on, synchronous_commit on), and two Nimbus
# deployments, each one node serving two users who create records in a zone of their own:
#   one: the home on cluster A, no partitions: both users' databases on A;
#   two: the home on cluster A and partition p2 on cluster B: one user's database on each.
# Measured under wrk, in rotation, medians of the rounds:
#   both:  both users at once, 32 connections each: the writes per second of the two together;
#   quiet: one user's single connection while the other floods with 63, against the same
#          connection with nobody else writing: how much a flood on one partition costs a
#          writer on the other (the quiet user is the one on A's home in "one", and whichever
#          is on the other partition than the flood in "two").
#   move:  user 2 of "two" moved to the other partition and back (`nimbus partitions move`)
#          while one connection of theirs creates records: the rows copied, how long their
#          writes waited (the fence), and the creates refused meanwhile (TRY_AGAIN_LATER,
#          counted by wrk as non-2xx) against the same connection's rate and p99.
# Every process shares this machine's cores: a second partition adds a WAL and an fsync stream
# of its own, not CPU, so the figures say what partitions isolate here, not how far writes
# grow on machines of their own.
#
#   Benchmarks/partitions.sh [seconds=6] [rounds=3]   (MOVE_SECONDS=40: the writer beside a move)
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
SECONDS_PER=${1:-6}
ROUNDS=${2:-3}
MOVE_SECONDS=${MOVE_SECONDS:-40}
PSQL=/usr/lib/postgresql/15/bin/psql
PORT_A=54340
PORT_B=54341
require_wrk
build_release

PIDS=()
DIRS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  for dir in "${DIRS[@]}"; do rm -rf "$dir"; done
  NIMBUS_PG_PORT=$PORT_A scripts/postgres.sh stop >/dev/null 2>&1 || true
  NIMBUS_PG_PORT=$PORT_B scripts/postgres.sh stop >/dev/null 2>&1 || true
}
trap cleanup EXIT
NIMBUS_PG_DURABLE=1 NIMBUS_PG_PORT=$PORT_A scripts/postgres.sh start >/dev/null
NIMBUS_PG_DURABLE=1 NIMBUS_PG_PORT=$PORT_B scripts/postgres.sh start >/dev/null
url() { echo "postgres://postgres@127.0.0.1:$1/$2?sslmode=disable"; }
"$PSQL" "$(url $PORT_A postgres)" -qc "CREATE DATABASE part_one" -c "CREATE DATABASE part_two_home" >/dev/null
"$PSQL" "$(url $PORT_B postgres)" -qc "CREATE DATABASE part_two_p2" >/dev/null

# A deployment: its home, its partitions added before it starts, a node serving it, two users
# each with a zone Bench. Sets LABEL_URL, LABEL_PID and, per user N (1, 2), LABEL_AUTHN and
# LABEL_WHEREN (the partition the user's private database is on).
deploy() {
  local label=$1 home=$2 partition=${3:-}
  export NIMBUS_DATABASE=$home
  if [ -n "$partition" ]; then
    "$BIN/nimbus" partitions add p2 "$partition" >/dev/null
  fi
  NIMBUS=$BIN/nimbus start_server normal development
  PIDS+=("$PID")
  DIRS+=("$DATA")
  trap cleanup EXIT
  NIMBUS_PASSWORD_ROUNDS=1000 "$BIN/nimbus" users create second --password second-password --data-dir "$DATA" >/dev/null
  local web2
  web2=$(curl -s -X POST "$URL/auth/1/$C/development/signin?ckAPIToken=$TOKEN" -d '{"username":"second","password":"second-password"}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["ckWebAuthToken"])')
  curl -s -X POST "$URL/database/1/$C/development/private/zones/modify?ckAPIToken=$TOKEN&ckWebAuthToken=$web2" \
    -d '{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Bench"}}}]}' >/dev/null
  printf -v "${label}_URL" '%s' "$URL/database/1/$C/development/private/records/modify"
  printf -v "${label}_PID" '%s' "$PID"
  printf -v "${label}_AUTH1" '%s' "ckAPIToken=$TOKEN&ckWebAuthToken=$WEB"
  printf -v "${label}_AUTH2" '%s' "ckAPIToken=$TOKEN&ckWebAuthToken=$web2"
  local where
  where=$("$PSQL" "$home" -Atc "SELECT string_agg(partition, ' ' ORDER BY owner_id) FROM placements WHERE scope = 'private'" 2>/dev/null || true)
  echo "$label: private databases placed on: ${where:-home home (no partitions)}"
  unset NIMBUS_DATABASE
}
deploy one "$(url $PORT_A part_one)"
deploy two "$(url $PORT_A part_two_home)" "$(url $PORT_B part_two_p2)"

# run LABEL "USER CONNECTIONS[ USER CONNECTIONS]" → per user "rate p50 p99 errors", one line each
run() {
  local label=$1 url=${1}_URL out=() pids=() user connections i=0
  set -- $2
  while [ $# -gt 0 ]; do
    user=$1 connections=$2
    local auth=${label}_AUTH$user
    wrk --latency -t$((connections > 1 ? 2 : 1)) -c"$connections" -d"${SECONDS_PER}s" -s Benchmarks/wrk/nimbus-create.lua \
      "${!url}?${!auth}" > "/tmp/partitions-wrk-$i.out" &
    pids+=($!)
    out+=("/tmp/partitions-wrk-$i.out")
    i=$((i + 1))
    shift 2
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
  python3 - "${out[@]}" <<'PARSE'
import re, sys
for path in sys.argv[1:]:
    text = open(path).read()
    def ms(p):
        m = re.search(r"\s" + p + r"%\s+([\d.]+)(us|ms|s)\b", text)
        value, unit = float(m.group(1)), m.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    print(f"{rate:.0f} {ms('50'):.3f} {ms('99'):.3f} {int(errors.group(1)) if errors else 0}")
PARSE
}

echo "writes on one and two partitions: wrk creates, ${SECONDS_PER}s per run, $ROUNDS rounds"
RESULTS=()
for label in one two; do run "$label" "1 8 2 8" >/dev/null; done  # warm
for round in $(seq 1 "$ROUNDS"); do
  for label in one two; do
    wait_idle
    mapfile -t both < <(run "$label" "1 32 2 32")
    read -r r1 p50a p99a e1 <<<"${both[0]}"
    read -r r2 p50b p99b e2 <<<"${both[1]}"
    echo "round $round, $label, both users at 32 connections: $r1 + $r2 = $((r1 + r2)) creates/s (p99 $p99a, $p99b ms; errors $e1, $e2)"
    RESULTS+=("both,$label,$((r1 + r2)),$p99a,$p99b")
    wait_idle
    read -r rate p50 p99 errors <<<"$(run "$label" "2 1")"
    echo "round $round, $label, user 2 alone, 1 connection: $rate creates/s, p50 $p50 ms, p99 $p99 ms (errors $errors)"
    RESULTS+=("alone,$label,$rate,$p50,$p99")
    wait_idle
    mapfile -t flood < <(run "$label" "2 1 1 63")
    read -r rate p50 p99 errors <<<"${flood[0]}"
    read -r fr fp50 fp99 fe <<<"${flood[1]}"
    echo "round $round, $label, user 2's 1 connection beside user 1's flood of 63: $rate creates/s, p50 $p50 ms, p99 $p99 ms" \
      "(errors $errors); the flood $fr creates/s (errors $fe)"
    RESULTS+=("flooded,$label,$rate,$p50,$p99")
  done
done
python3 - "${RESULTS[@]}" <<'PY'
import statistics, sys
from collections import defaultdict
cells = defaultdict(list)
for arg in sys.argv[1:]:
    kind, label, *values = arg.split(",")
    cells[(kind, label)].append([float(v) for v in values])
med = {key: [statistics.median(column) for column in zip(*rows)] for key, rows in cells.items()}
for label in ("one", "two"):
    rate, p99a, p99b = med[("both", label)]
    print(f"median, {label} partition(s), both users at 32 connections: {rate:.0f} creates/s (p99 {p99a:.1f}, {p99b:.1f} ms)")
for label in ("one", "two"):
    alone, flooded = med[("alone", label)], med[("flooded", label)]
    print(f"median, {label} partition(s), user 2 alone: {alone[0]:.0f}/s p50 {alone[1]:.2f} p99 {alone[2]:.2f} ms;"
          f" beside the flood: {flooded[0]:.0f}/s p50 {flooded[1]:.2f} p99 {flooded[2]:.2f} ms (p99 {flooded[2] / alone[2]:.1f}x alone)")
print(f"two partitions / one, both users: {med[('both', 'two')][0] / med[('both', 'one')][0]:.2f}x")
PY

# A move while its user writes. User 2's database grows first (creates at 8 connections).
run two "2 8" >/dev/null
HOME_TWO=$(url $PORT_A part_two_home)
where=$("$PSQL" "$HOME_TWO" -Atc "SELECT partition FROM placements WHERE scope = 'private' ORDER BY owner_id DESC LIMIT 1")
for round in $(seq 1 "$ROUNDS"); do
  target=$([ "$where" = home ] && echo p2 || echo home)
  wait_idle
  # The writer spans the whole move (its first copy, the fence, the switch and the clean-up).
  SECONDS_PER=$MOVE_SECONDS run two "2 1" > /tmp/partitions-move-wrk.out &
  writer=$!
  sleep 1
  moved=$(NIMBUS_DATABASE=$HOME_TWO "$BIN/nimbus" partitions move --user second --to "$target")
  wait "$writer"
  read -r rate p50 p99 errors < /tmp/partitions-move-wrk.out
  echo "round $round, move $where -> $target: $moved"
  echo "round $round, the user's 1 connection meanwhile: $rate creates/s, p50 $p50 ms, p99 $p99 ms, refused $errors"
  where=$target
done
