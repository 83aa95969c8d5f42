#!/usr/bin/env bash
# Expensive requests beside lookups: a one-record lookup's latency alone and while CLIENTS
# clients loop on a query that must walk every record, or with AGAINST=signin on sign-ins with
# a wrong password (ContentionBenchmark.swift), on RECORDS public records. With OTHER (a
# binary), the same run against it too, for a before/after in one run. For sign-ins the
# server's own limits are raised out of the way (SERVE_FLAGS), so every attempt is hashed.
# With AGAINST=flood the clients are one signed-in user sending lookups as fast as they come
# back, ignoring THROTTLED, with the server's request budgets on; the measured lookups are
# paced at 8 a second (issue 17: their p99 within 2x of alone).
#
#   [AGAINST=signin|flood] Benchmarks/contention.sh [records=20000] [clients=2] [seconds=10] [OTHER-BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
RECORDS=${1:-20000}
CLIENTS=${2:-2}
SECONDS_EACH=${3:-10}
OTHER=${4:-}
AGAINST=${AGAINST:-query}

build_release
run_one() {
  # The server's sign-in limits out of the way: every guess is hashed (an older build has none).
  if [ "$AGAINST" = signin ] && "$1" serve --help 2>&1 | grep -q sign-in-attempts; then
    SERVE_FLAGS="--connections-per-client 0 --sign-in-attempts-per-minute 1000000 --sign-in-failures-per-minute 1000000"
  elif [ "$AGAINST" = flood ]; then
    SERVE_FLAGS="--connections-per-client 0"  # the budgets on
  else
    unset SERVE_FLAGS
  fi
  NIMBUS=$1 start_server normal
  echo "== $1"
  "$BIN/NimbusBench" --scenario contention --records "$RECORDS" --clients "$CLIENTS" --seconds "$SECONDS_EACH" \
    --url "$URL" --container "$C" --api-token "$TOKEN" --web-auth-token "$WEB" --against "$AGAINST"
  stop_server
  unset NIMBUS
}
run_one "$BIN/nimbus"
if [ -n "$OTHER" ]; then run_one "$OTHER"; fi
