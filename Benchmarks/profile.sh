#!/usr/bin/env bash
# Where a wrk cell's server time goes: a preloaded Nimbus (as wrk.sh starts it), one cell under
# wrk while `perf record -g` samples the server, then the report's heaviest symbols, by self
# time and by the time under each (children).
#
#   Benchmarks/profile.sh [cell=create:1] [seconds=10] [records=20000]
#
# POSTGRES=1 runs the server on PostgreSQL (a private durable cluster, synchronous_commit off,
# as wrk-ab.sh runs it); the report is then of the node alone, and a second one, written beside
# it with `-cluster` in its name, samples the cluster's processes (its backends, the WAL writer,
# the checkpointer) over the same seconds, by PostgreSQL's own functions.
#
# Writes bench-results/profile-<kind>-<connections>.{data,txt}.
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
CELL=${1:-create:1}
SECONDS_PER=${2:-10}
RECORDS=${3:-20000}
export RECORDS
require_wrk
require_perf
build_release
mkdir -p bench-results
SERVERS=(nimbus)
if [ -n "${POSTGRES:-}" ]; then
  admin=$(NIMBUS_PG_DURABLE=1 scripts/postgres.sh start)
  /usr/lib/postgresql/15/bin/psql "$admin" -qc "CREATE DATABASE nimbus_profile" \
    -c "ALTER DATABASE nimbus_profile SET synchronous_commit = off" >/dev/null
  export NIMBUS_DATABASE=${admin/\/postgres\?/\/nimbus_profile?}
  trap 'stop_preloaded; scripts/postgres.sh stop >/dev/null' EXIT
fi
start_preloaded nimbus
# start_preloaded sets a trap of its own (its servers only): the cluster's stop goes back in.
[ -n "${POSTGRES:-}" ] && trap 'stop_preloaded; scripts/postgres.sh stop >/dev/null' EXIT
cell_target "$CELL"
out=bench-results/profile-$kind-$connections${POSTGRES:+-postgres}
wrk -t"$threads" -c"$connections" -d2s "${script[@]}" "$url" >/dev/null  # warm up
wait_idle
perf record -F ${FREQ:-1999} ${CALLGRAPH:--g} -p "$nimbus_PID" -o "$out.data" -- sleep "$SECONDS_PER" 2>/dev/null &
recorder=$!
cluster_recorder=
if [ -n "${POSTGRES:-}" ]; then
  # Every process of this cluster as it stands after the warm-up (the node's pool is open by
  # then): the postmaster named in its data folder, and its children.
  postmaster=$(head -1 "${NIMBUS_PG_DIR:-/tmp/nimbus-pg-${NIMBUS_PG_PORT:-54329}}/data/postmaster.pid")
  cluster_pids=$(pgrep -d, -P "$postmaster")
  perf record -F ${FREQ:-1999} -g -p "$cluster_pids" -o "$out-cluster.data" -- sleep "$SECONDS_PER" 2>/dev/null &
  cluster_recorder=$!
fi
wrk -t"$threads" -c"$connections" -d"${SECONDS_PER}s" "${script[@]}" "$url" | grep -E "Requests/sec|Latency"
wait "$recorder"
if [ -n "$cluster_recorder" ]; then wait "$cluster_recorder"; fi
# report NAME: NAME.data's heaviest symbols into NAME.txt.
report() {
  {
    echo "== self"
    perf report -i "$1.data" --no-children --percent-limit 0.7 --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$'
    echo "== children"
    perf report -i "$1.data" --children --percent-limit 3 --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$'
  } >"$1.txt"
  echo "report: $1.txt"
}
report "$out"
if [ -n "$cluster_recorder" ]; then report "$out-cluster"; fi
