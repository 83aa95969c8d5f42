#!/usr/bin/env bash
# Server-core benchmark: builds Nimbus in release mode, starts it on a fresh data directory on
# loopback, and drives it with Benchmarks/NimbusBench next to raw SQLite, for each SQLite
# synchronous mode. Prints a table per mode and writes bench-results/server-core-<mode>.json.
#
#   Benchmarks/run.sh [seconds-per-scenario] [clients]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER=${1:-10}
CLIENTS=${2:-64}

swift build -c release --product nimbus
swift build -c release --product NimbusBench
BIN=$(swift build -c release --show-bin-path)

for MODE in normal full; do
  DATA=$(mktemp -d /tmp/nimbus-bench.XXXXXX)
  C=iCloud.bench.nimbus
  "$BIN/nimbus" containers create "$C" --data-dir "$DATA" >/dev/null
  TOKEN=$("$BIN/nimbus" tokens create --container "$C" --data-dir "$DATA")
  NIMBUS_PASSWORD_ROUNDS=1000 "$BIN/nimbus" users create bench --password bench-password --data-dir "$DATA" >/dev/null
  "$BIN/nimbus" serve --data-dir "$DATA" --port 0 --sync "$MODE" --log-level error > "$DATA/serve.log" 2>&1 &
  PID=$!
  trap 'kill $PID 2>/dev/null || true' EXIT
  for _ in $(seq 1 100); do grep -q "listening on" "$DATA/serve.log" && break; sleep 0.1; done
  URL=$(grep -o 'http://[0-9.:]*' "$DATA/serve.log" | head -1)
  AUTH=$(curl -s -X POST "$URL/auth/1/$C/development/signin?ckAPIToken=$TOKEN" -d '{"username":"bench","password":"bench-password"}')
  WEB=$(echo "$AUTH" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ckWebAuthToken"])')
  curl -s -X POST "$URL/database/1/$C/development/private/zones/modify?ckAPIToken=$TOKEN&ckWebAuthToken=$WEB" \
    -d '{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Bench"}}}]}' >/dev/null
  echo "== synchronous=$MODE"
  "$BIN/NimbusBench" --url "$URL" --container "$C" --api-token "$TOKEN" --web-auth-token "$WEB" \
    --clients "$CLIENTS" --seconds "$SECONDS_PER" --sync "$MODE" --raw-dir "$DATA" \
    --output "bench-results/server-core-$MODE.json"
  kill "$PID"; wait "$PID" 2>/dev/null || true
  trap - EXIT
  rm -rf "$DATA"
done
