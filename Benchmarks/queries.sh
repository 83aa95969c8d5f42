#!/usr/bin/env bash
# Query benchmark: loads N records of one type (default 1,000,000) over HTTP, then times an
# indexed equality filter + sort, a text search and a NEAR query, one client, p50/p99.
# Writes bench-results/queries.json.
#
#   Benchmarks/queries.sh [records]
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
RECORDS=${1:-1000000}

build_release
start_server normal
"$BIN/NimbusBench" --scenario query --records "$RECORDS" --url "$URL" --container "$C" --api-token "$TOKEN" \
  --web-auth-token "$WEB" --output bench-results/queries.json
stop_server
