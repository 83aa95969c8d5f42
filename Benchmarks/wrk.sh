#!/usr/bin/env bash
# Nimbus against PocketBase with wrk (Debian's), a load generator independent of the project,
# beside the Swift load generator of compare.sh. Nimbus in production (the comparison's
# deployed schema, see lib.sh), a private custom zone, a signed-in user; PocketBase with public
# rules and the same index; both preloaded with the same records. Fetch by ID and create, at
# 64 connections and at 1, each for a number of seconds; prints a Markdown table.
#
#   Benchmarks/wrk.sh [seconds] [records]
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
SECONDS_PER=${1:-10}
RECORDS=${2:-100000}
export RECORDS
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }

stop_all() {
  [ -n "${PID:-}" ] && kill "$PID" 2>/dev/null || true
  [ -n "${PBPID:-}" ] && kill "$PBPID" 2>/dev/null || true
}

# run NAME URL SCRIPT CONNECTIONS → "requests/s p50 p99"
run() {
  local url=$1 script=$2 connections=$3 threads=2
  [ "$connections" = 1 ] && threads=1
  wrk -t"$threads" -c"$connections" -d"${SECONDS_PER}s" --latency -s "Benchmarks/wrk/$script" "$url" |
    python3 -c '
import re, sys
text = sys.stdin.read()
rate = re.search(r"Requests/sec:\s+([\d.]+)", text).group(1)
def pct(p):
    m = re.search(r"\s" + p + r"%\s+([\d.]+)(us|ms|s)", text)
    value, unit = float(m.group(1)), m.group(2)
    return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value
errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
if errors: sys.exit(f"wrk saw {errors.group(1)} error answers:\n{text}")
p50, p99 = pct("50"), pct("99")
print(f"{float(rate):.0f} {p50:.2f} {p99:.2f}")'
}

build_release
trap stop_all EXIT
start_server normal production
start_pocketbase
trap stop_all EXIT
python3 Benchmarks/wrk/preload.py nimbus "$URL" "$C" "$ENVIRONMENT" "$TOKEN" "$WEB" "$RECORDS"
python3 Benchmarks/wrk/preload.py pocketbase "$PBURL" "$RECORDS"
NIMBUS="$URL/database/1/$C/$ENVIRONMENT/private/records"
Q="ckAPIToken=$TOKEN&ckWebAuthToken=$WEB"

echo "wrk, ${SECONDS_PER}s per cell, $RECORDS records, synchronous=NORMAL on both"
echo
echo "| scenario | Nimbus req/s (p50, p99 ms) | PocketBase req/s (p50, p99 ms) | N/PB |"
echo "|---|---|---|---|"
for cell in "fetch by ID:fetch:64" "fetch by ID:fetch:1" "create:create:64" "create:create:1"; do
  IFS=: read -r label kind connections <<<"$cell"
  path=lookup; [ "$kind" = create ] && path=modify
  read -r n n50 n99 <<<"$(run "$NIMBUS/$path?$Q" "nimbus-$kind.lua" "$connections")"
  read -r p p50 p99 <<<"$(run "$PBURL" "pocketbase-$kind.lua" "$connections")"
  ratio=$(python3 -c "print(f'{$n / $p:.2f}')")
  echo "| $label, $connections connections | $n ($n50, $n99) | $p ($p50, $p99) | ${ratio}× |"
done
