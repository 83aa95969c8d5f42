#!/usr/bin/env bash
# Where a wrk cell's server time goes: a preloaded Nimbus (as wrk.sh starts it), one cell under
# wrk while `perf record -g` samples the server, then the report's heaviest symbols, by self
# time and by the time under each (children).
#
#   Benchmarks/profile.sh [cell=create:1] [seconds=10] [records=20000]
#
# POSTGRES=1 runs the server on PostgreSQL (a private durable cluster, synchronous_commit off,
# as wrk-ab.sh runs it); the recording is then the whole machine's (`perf record -a`), the report
# is of the node alone, and a second one, written beside it with `-cluster` in its name, is of
# the cluster's processes (its backends, the WAL writer, the checkpointer) over the same seconds,
# by PostgreSQL's own functions. `perf script -i … --pid` reads one process's samples.
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
cluster_pids=
if [ -n "${POSTGRES:-}" ]; then
  # Every process of this cluster as it stands after the warm-up (the node's pool is open by
  # then): the postmaster named in its data folder, and its children.
  postmaster=$(head -1 "${NIMBUS_PG_DIR:-/tmp/nimbus-pg-${NIMBUS_PG_PORT:-54329}}/data/postmaster.pid")
  cluster_pids=$(pgrep -d, -P "$postmaster")
  # The whole machine in one recording, reported by process below. `perf record -p` on the
  # node, whose tasks run on Swift's pool here (threads that come and go), climbed to a whole
  # core within seconds of the load, even at 1 Hz, taking it from the node and the cluster it
  # was measuring (docs/benchmarks.md, "The allocator the benchmarks ran on, …").
  perf record -a -F ${FREQ:-1999} ${CALLGRAPH:--g} -o "$out.data" -- sleep "$SECONDS_PER" 2>/dev/null &
else
  perf record -F ${FREQ:-1999} ${CALLGRAPH:--g} -p "$nimbus_PID" -o "$out.data" -- sleep "$SECONDS_PER" 2>/dev/null &
fi
recorder=$!
wrk -t"$threads" -c"$connections" -d"${SECONDS_PER}s" "${script[@]}" "$url" | grep -E "Requests/sec|Latency"
wait "$recorder"
# report PIDS TEXT: the recording's heaviest symbols in those processes into TEXT.
report() {
  {
    echo "== self"
    perf report -i "$out.data" --pid="$1" --percentage relative --no-children --percent-limit 0.7 --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$'
    echo "== children"
    perf report -i "$out.data" --pid="$1" --percentage relative --children --percent-limit 3 --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$'
  } >"$2"
  echo "report: $2"
}
report "$nimbus_PID" "$out.txt"
if [ -n "$cluster_pids" ]; then
  report "$cluster_pids" "$out-cluster.txt"
  echo "the recording is the whole machine's: node $nimbus_PID, cluster $cluster_pids (perf script -i $out.data --pid …)"
fi
