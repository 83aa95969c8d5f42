#!/usr/bin/env bash
# Server-core benchmark: builds Nimbus in release mode, starts it on a fresh data directory on
# loopback, and drives it with Benchmarks/NimbusBench next to raw SQLite, for each SQLite
# synchronous mode. Prints a table per mode and writes bench-results/server-core-<mode>.json.
#
#   Benchmarks/run.sh [seconds-per-scenario] [clients]
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
SECONDS_PER=${1:-10}
CLIENTS=${2:-64}

build_release
for MODE in normal full; do
  start_server "$MODE"
  echo "== synchronous=$MODE"
  "$BIN/NimbusBench" --url "$URL" --container "$C" --api-token "$TOKEN" --web-auth-token "$WEB" \
    --clients "$CLIENTS" --seconds "$SECONDS_PER" --sync "$MODE" --raw-dir "$DATA" \
    --output "bench-results/server-core-$MODE.json"
  stop_server
done
