#!/usr/bin/env bash
# Where a PostgreSQL node's processor time goes, per request: the node's and the cluster's
# (every backend, the WAL writer, the checkpointer), read from /proc around each wrk cell, for
# one or more builds, alternating, each on a fresh database of a private durable cluster
# (synchronous_commit off, as wrk-ab.sh runs PostgreSQL).
#
#   Benchmarks/postgres-cpu.sh [seconds=10] [rounds=2] CELL... [-- BUILD...]
#   e.g. Benchmarks/postgres-cpu.sh 10 2 batch:64 create:64 -- /tmp/before/nimbus .build/release/nimbus
#
# Without builds, this checkout's release build. Prints a line per build, round and cell:
# requests/s, p50, node µs and PostgreSQL µs of processor time per request.
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
SECONDS_PER=${1:-10}
ROUNDS=${2:-2}
shift 2 || true
CELLS=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do CELLS+=("$1"); shift; done
[ $# -gt 0 ] && shift
BUILDS=("$@")
[ ${#CELLS[@]} -gt 0 ] || CELLS=(batch:64)
export RECORDS=${RECORDS:-20000}
require_wrk
if [ ${#BUILDS[@]} -eq 0 ]; then
  build_release
  BUILDS=("$BIN/nimbus")
fi
admin=$(NIMBUS_PG_DURABLE=1 scripts/postgres.sh start)
trap 'stop_preloaded 2>/dev/null || true; scripts/postgres.sh stop >/dev/null' EXIT
postmaster=$(head -1 "${NIMBUS_PG_DIR:-/tmp/nimbus-pg-${NIMBUS_PG_PORT:-54329}}/data/postmaster.pid")
# Clock ticks of the cluster's processes alive now (the node's pool stays open through a cell).
cluster_ticks() {
  local sum=0 pid
  for pid in $(pgrep -P "$postmaster"); do
    sum=$((sum + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)))
  done
  echo "$sum"
}
ticks=$(getconf CLK_TCK)
database=0
for round in $(seq "$ROUNDS"); do
  for build in "${BUILDS[@]}"; do
    database=$((database + 1))
    /usr/lib/postgresql/15/bin/psql "$admin" -qc "CREATE DATABASE nimbus_cpu_$database" \
      -c "ALTER DATABASE nimbus_cpu_$database SET synchronous_commit = off" >/dev/null
    export NIMBUS_DATABASE=${admin/\/postgres\?/\/nimbus_cpu_$database?}
    start_preloaded nimbus "$build"
    trap 'stop_preloaded 2>/dev/null || true; scripts/postgres.sh stop >/dev/null' EXIT
    for cell in "${CELLS[@]}"; do
      kind=${cell%%:*}
      connections=${cell##*:}
      threads=2
      [ "$connections" = 1 ] && threads=1
      url="$(cell_url "$nimbus_RECORDS" "$kind" "$nimbus_AUTH")"
      wrk -t"$threads" -c"$connections" -d2s -s "Benchmarks/wrk/nimbus-$kind.lua" "$url" >/dev/null
      wait_idle
      node0=$(awk '{print $14 + $15}' "/proc/$nimbus_PID/stat")
      cluster0=$(cluster_ticks)
      out=$(wrk --latency -t"$threads" -c"$connections" -d"${SECONDS_PER}s" -s "Benchmarks/wrk/nimbus-$kind.lua" "$url")
      node1=$(awk '{print $14 + $15}' "/proc/$nimbus_PID/stat")
      cluster1=$(cluster_ticks)
      rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
      p50=$(echo "$out" | awk '/ 50%/ {print $2}')
      python3 -c "
requests = $rps * $SECONDS_PER
print('round $round  $build  $cell: %.1f req/s, p50 $p50, node %.0f µs, PostgreSQL %.0f µs per request'
      % ($rps, ($node1 - $node0) / $ticks / requests * 1e6, ($cluster1 - $cluster0) / $ticks / requests * 1e6))"
    done
    stop_preloaded
    PIDS=()
    DIRS=()
  done
done
