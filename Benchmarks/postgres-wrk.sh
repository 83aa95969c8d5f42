#!/usr/bin/env bash
# One Nimbus node on PostgreSQL under wrk: single-record creates into the private zone "Bench"
# (production schema, as Benchmarks/ab.sh) at 64 connections and at 1, after a 3-second warm-up
# and a second's rest (so the warm-up's abandoned requests are done). PostgreSQL as in
# Benchmarks/postgres.sh (fsync on, synchronous_commit off). With OTHER, another build's binary,
# the two alternate A B A B on fresh databases, for a before/after in one run. LOGSQL=1 logs
# every statement with its duration to bench-results/postgres-wrk-LABEL.log.
#
#   Benchmarks/postgres-wrk.sh [OTHER-BINARY] [seconds=5] [rounds=2]
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
OTHER=${1:-}
SECONDS_PER=${2:-5}
ROUNDS=${3:-2}
PSQL=/usr/lib/postgresql/15/bin/psql
build_release
mkdir -p bench-results

run() {  # run LABEL BINARY
  local admin
  admin=$(NIMBUS_PG_DURABLE=1 scripts/postgres.sh start)
  "$PSQL" "$admin" -qc "DROP DATABASE IF EXISTS nimbus_bench_wrk" -c "CREATE DATABASE nimbus_bench_wrk" \
    -c "ALTER DATABASE nimbus_bench_wrk SET synchronous_commit = off" >/dev/null
  if [ "${LOGSQL:-}" = 1 ]; then "$PSQL" "$admin" -qc "ALTER DATABASE nimbus_bench_wrk SET log_min_duration_statement = 0" >/dev/null; fi
  NIMBUS_DATABASE="${admin/\/postgres\?/\/nimbus_bench_wrk?}" NIMBUS=$2 start_server normal production
  local target="$URL/database/1/$C/$ENVIRONMENT/private/records/modify?ckAPIToken=$TOKEN&ckWebAuthToken=$WEB"
  local connections threads
  for connections in 64 1; do
    threads=$((connections < 2 ? 1 : 2))
    wrk -t$threads -c$connections -d3s -s Benchmarks/wrk/nimbus-create.lua "$target" >/dev/null
    sleep 1
    echo "$1: create, $connections connection(s): $(wrk -t$threads -c$connections -d"${SECONDS_PER}s" --latency \
      -s Benchmarks/wrk/nimbus-create.lua "$target" | awk '/Requests\/sec/ {r=$2} /^ *50%/ {p50=$2} /^ *99%/ {p99=$2}
        /Non-2xx/ {e=$NF} END {printf "%s/s, p50 %s, p99 %s, non-2xx %s", r, p50, p99, e+0}')"
  done
  stop_server
  if [ "${LOGSQL:-}" = 1 ]; then cp /tmp/nimbus-pg-54329/server.log "bench-results/postgres-wrk-$1.log"; fi
  scripts/postgres.sh stop >/dev/null
}

for _ in $(seq 1 "$ROUNDS"); do
  run after "$BIN/nimbus"
  if [ -n "$OTHER" ]; then run before "$OTHER"; fi
done
