#!/usr/bin/env bash
# Notification benchmark (issue 5): save → WebSocket latency with and without idle connected
# clients, the server's memory per idle client, and the pipeline's matching cost per write at
# 10, 1,000 and 10,000 query subscriptions. Builds release binaries (NIMBUS_BENCH_BUILD=debug
# for a quick check of the script), starts a server on a fresh data directory, prints figures.
#
#   Benchmarks/notifications.sh [idle-clients] [samples]
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
IDLE=${1:-10000}
SAMPLES=${2:-1000}

# Each idle client is a socket in this script's benchmark process and one in the server.
ulimit -n "$(ulimit -Hn)"
if [ "$(ulimit -n)" -lt $((IDLE + 1000)) ]; then
  echo "open-file limit $(ulimit -n) is too low for $IDLE idle clients" >&2
  exit 1
fi

if [ "${NIMBUS_BENCH_BUILD:-release}" = debug ]; then
  swift build --product nimbus && swift build --product NimbusBench
  BIN=$(swift build --show-bin-path)
else
  build_release
fi
start_server normal
NIMBUS_PASSWORD_ROUNDS=1000 "$BIN/nimbus" users create idle --password idle-password --data-dir "$DATA" >/dev/null
echo "== save → notification latency and memory ($IDLE idle clients)"
"$BIN/NimbusBench" --scenario notify --url "$URL" --container "$C" --api-token "$TOKEN" --web-auth-token "$WEB" \
  --idle "$IDLE" --samples "$SAMPLES" --server-pid "$PID"
stop_server
echo "== matching cost per write"
"$BIN/NimbusBench" --scenario matching --samples "$SAMPLES" --raw-dir "${TMPDIR:-/tmp}"
