#!/usr/bin/env bash
# Writers of one database's zones on two nodes of one PostgreSQL (issue 35: order only where
# CloudKit orders; ZonesBenchmark.swift): creates into zones of their own from 64 clients split
# between the nodes (nothing may fail), the same clients into one zone (the contrast), and a
# quiet zone's writer, 8 creates a second, alone and beside a flood into another zone. The
# same on one SQLite node first, as the reference. PostgreSQL as in Benchmarks/postgres.sh.
# NIMBUS=/path/to/nimbus runs another build (before/after in one run of the load generator).
#
#   Benchmarks/zones.sh [seconds=8] [clients=64]
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
SECONDS_PER=${1:-8}
CLIENTS=${2:-64}
PSQL=/usr/lib/postgresql/15/bin/psql
build_release

ADMIN=$(NIMBUS_PG_DURABLE=1 scripts/postgres.sh start)
SECOND_PID=""
cleanup() {
  [ -n "$SECOND_PID" ] && kill "$SECOND_PID" 2>/dev/null || true
  [ -n "${PID:-}" ] && kill "$PID" 2>/dev/null || true
  scripts/postgres.sh stop >/dev/null
}
trap cleanup EXIT

bench() {  # bench URLS
  "$BIN/NimbusBench" --scenario zones --url "$1" --container "$C" --api-token "$TOKEN" --web-auth-token "$WEB" \
    --environment "$ENVIRONMENT" --seconds "$SECONDS_PER" --warmup 2 --clients "$CLIENTS"
}

echo "== SQLite, one node"
start_server normal; trap cleanup EXIT
bench "$URL"
stop_server; trap cleanup EXIT

echo "== PostgreSQL, two nodes"
"$PSQL" "$ADMIN" -qc "CREATE DATABASE nimbus_bench_zones" -c "ALTER DATABASE nimbus_bench_zones SET synchronous_commit = off" >/dev/null
export NIMBUS_DATABASE=${ADMIN/\/postgres\?/\/nimbus_bench_zones?}
start_server normal; trap cleanup EXIT
"${NIMBUS:-$BIN/nimbus}" serve --data-dir "$DATA" --port 0 --log-level error --connections-per-client 0 --request-limits off > "$DATA/serve-2.log" 2>&1 &
SECOND_PID=$!
for _ in $(seq 1 100); do grep -q "listening on" "$DATA/serve-2.log" && break; sleep 0.1; done
URL2=$(grep -o 'http://[0-9.:]*' "$DATA/serve-2.log" | head -1)
bench "$URL,$URL2"
kill "$SECOND_PID"; wait "$SECOND_PID" 2>/dev/null || true; SECOND_PID=""
stop_server; trap cleanup EXIT
