#!/usr/bin/env bash
# Before and after a change with wrk: this build's server against another worktree's release
# build, both preloaded with the same records and running side by side, fetch by ID at 64
# connections (or the cell given), alternating A B A B so the machine's drift falls on both.
# Prints each run's requests per second, p99 latency and the server's CPU time per request
# (utime + stime from /proc, less sensitive to the load generator's share of the two cores),
# then medians.
# The issue-14 target: "after" within 5% of "before".
#
#   Benchmarks/wrk-ab.sh OTHER-WORKTREE-OR-BINARY [seconds] [rounds] [records] [kind:connections]
#   (kind: fetch, list, create, update, batch, feed: the zone's change feed in pages of 200,
#   or health: the HTTP stack alone, GET /health)
#
# AFTER=binary (and AFTER_FLAGS, BEFORE_FLAGS: flags instead of the defaults, no connection cap
# and budgets off) replaces this build as "after"; AFTER=the same binary as
# before measures the method's own bias (the two positions should come out equal).
# POSTGRES=1 runs both servers on PostgreSQL (a private cluster, a database each).
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
OTHER=$(other_binary "$1")
SECONDS_PER=${2:-10}
ROUNDS=${3:-5}
RECORDS=${4:-100000}
CELL=${5:-fetch:64}
KIND=${CELL%%:*}
CONNECTIONS=${CELL##*:}
[ -x "$OTHER" ] || { echo "no release build at $OTHER" >&2; exit 1; }
require_wrk
build_release

# start LABEL BINARY [FLAGS]: a preloaded server (lib.sh); sets LABEL_URL to the cell's endpoint.
start() {
  start_preloaded "$@"
  local records=${1}_RECORDS auth=${1}_AUTH url=${1}_URL
  if [ "$KIND" = health ]; then
    printf -v "${1}_URL" '%s' "${!url}/health"
  else
    printf -v "${1}_URL" '%s' "$(cell_url "${!records}" "$KIND" "${!auth}")"
  fi
}
export RECORDS
if [ -n "${POSTGRES:-}" ]; then
  # Each server on a database of its own on one private cluster, as Benchmarks/postgres-anchor.sh
  # runs PostgreSQL (durable, synchronous_commit off like SQLite's NORMAL, statistics kept fresh).
  PGBIN=/usr/lib/postgresql/15/bin
  ADMIN=$(NIMBUS_PG_DURABLE=1 scripts/postgres.sh start)
  "$PGBIN/psql" "$ADMIN" -qc "ALTER SYSTEM SET autovacuum_naptime = 1" -c "SELECT pg_reload_conf()" \
    -c "CREATE DATABASE nimbus_ab_before" -c "ALTER DATABASE nimbus_ab_before SET synchronous_commit = off" \
    -c "CREATE DATABASE nimbus_ab_after" -c "ALTER DATABASE nimbus_ab_after SET synchronous_commit = off" >/dev/null
  trap 'scripts/postgres.sh stop >/dev/null' EXIT
  BEFORE_DATABASE=${ADMIN/\/postgres\?/\/nimbus_ab_before?}
  AFTER_DATABASE=${ADMIN/\/postgres\?/\/nimbus_ab_after?}
fi
# on DATABASE COMMAND…: COMMAND with NIMBUS_DATABASE set when the run is on PostgreSQL.
on() {
  local database=$1
  shift
  if [ -n "${POSTGRES:-}" ]; then NIMBUS_DATABASE=$database "$@"; else "$@"; fi
}
if [ -n "${BEFORE_FLAGS+x}" ]; then on "${BEFORE_DATABASE:-}" start before "$OTHER" "$BEFORE_FLAGS"; else on "${BEFORE_DATABASE:-}" start before "$OTHER"; fi
if [ -n "${AFTER_FLAGS+x}" ]; then on "${AFTER_DATABASE:-}" start after "${AFTER:-$BIN/nimbus}" "$AFTER_FLAGS"; else on "${AFTER_DATABASE:-}" start after "${AFTER:-$BIN/nimbus}"; fi
[ -n "${POSTGRES:-}" ] && trap 'stop_preloaded; scripts/postgres.sh stop >/dev/null' EXIT

# measure URL PID → "requests/s p99-ms server-µs-per-request"
measure() {
  local threads=2
  [ "$CONNECTIONS" = 1 ] && threads=1
  wait_idle
  local script=(-s "Benchmarks/wrk/nimbus-$KIND.lua")
  [ "$KIND" = health ] && script=()
  WRK_STRICT=1 wrk_cell "$2" -t"$threads" -c"$CONNECTIONS" -d"${SECONDS_PER}s" "${script[@]}" "$1" |
    cut -d' ' -f1,3,4
}

# Warm both (page cache, statement caches) before measuring.
SECONDS_PER_RUN=$SECONDS_PER
SECONDS_PER=3
measure "$before_URL" "$before_PID" >/dev/null
measure "$after_URL" "$after_PID" >/dev/null
SECONDS_PER=$SECONDS_PER_RUN

echo "wrk $KIND at $CONNECTIONS connections, ${SECONDS_PER}s per run, $RECORDS records; before = $OTHER"
RESULTS=()
for round in $(seq 1 "$ROUNDS"); do
  read -r br bp bc <<<"$(measure "$before_URL" "$before_PID")"
  read -r ar ap ac <<<"$(measure "$after_URL" "$after_PID")"
  RESULTS+=("$br,$bp,$bc,$ar,$ap,$ac")
  echo "round $round: before $br req/s (p99 $bp ms, $bc µs CPU/request), after $ar req/s (p99 $ap ms, $ac µs CPU/request)"
done
python3 - "${RESULTS[@]}" <<'PY'
import statistics, sys
rows = [[float(x) for x in arg.split(",")] for arg in sys.argv[1:]]
br, bp, bc, ar, ap, ac = (statistics.median(column) for column in zip(*rows))
print(f"median: before {br:.0f} req/s, p99 {bp:.2f} ms, {bc:.1f} µs/request; after {ar:.0f} req/s, p99 {ap:.2f} ms, {ac:.1f} µs/request")
print(f"after/before: throughput {ar / br:.3f}, p99 {ap / bp:.3f}, CPU per request {ac / bc:.3f}")
PY
