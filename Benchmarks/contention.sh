#!/usr/bin/env bash
# Slow queries beside lookups: a one-record lookup's latency alone and while CLIENTS clients
# loop on a query that must walk every record (ContentionBenchmark.swift), on RECORDS public
# records. With OTHER (a binary), the same run against it too, for a before/after in one run.
#
#   Benchmarks/contention.sh [records=20000] [clients=2] [seconds=10] [OTHER-BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
RECORDS=${1:-20000}
CLIENTS=${2:-2}
SECONDS_EACH=${3:-10}
OTHER=${4:-}

build_release
run_one() {
  NIMBUS=$1 start_server normal
  echo "== $1"
  "$BIN/NimbusBench" --scenario contention --records "$RECORDS" --clients "$CLIENTS" --seconds "$SECONDS_EACH" \
    --url "$URL" --container "$C" --api-token "$TOKEN" --web-auth-token "$WEB"
  stop_server
  unset NIMBUS
}
run_one "$BIN/nimbus"
if [ -n "$OTHER" ]; then run_one "$OTHER"; fi
