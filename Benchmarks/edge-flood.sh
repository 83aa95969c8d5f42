#!/usr/bin/env bash
# Maximal bodies with a public API token against a release server (issue 42): six and twelve
# clients at once, each from its own loopback address, posting the largest body a public token
# gets read (records/query's, 1 MiB), for SECONDS each; a fresh server per cell, so each peak RSS is that cell's. Prints the
# answers by status, /health's p50/p99/max while it runs, and the server's peak RSS.
#
#   Benchmarks/edge-flood.sh [seconds] [body-bytes] [endpoint]
#
# NIMBUS=<binary> runs another build (an older one took 16 MiB bodies, at records/modify too).
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
SECONDS_PER=${1:-15}
BODY=${2:-1048576}
ENDPOINT=${3:-records/query}
if [ -z "${NIMBUS:-}" ]; then build_release; fi
for concurrency in 6 12; do
  start_server normal development
  python3 Benchmarks/edge/flood.py "$URL" "$C" "$TOKEN" "$PID" "$BODY" "$concurrency" "$SECONDS_PER" "$ENDPOINT"
  stop_server
done
