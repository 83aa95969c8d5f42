#!/usr/bin/env bash
# Before and after a change with wrk: this build's server against another worktree's release
# build, both preloaded with the same records and running side by side, fetch by ID at 64
# connections (or the cell given), alternating A B A B so the machine's drift falls on both.
# Prints each run and the medians. The issue-14 target: "after" within 5% of "before".
#
#   Benchmarks/wrk-ab.sh OTHER-WORKTREE [seconds] [rounds] [records] [kind:connections]
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
OTHER=$(cd "$1" && swift build -c release --show-bin-path)/nimbus
SECONDS_PER=${2:-10}
ROUNDS=${3:-5}
RECORDS=${4:-100000}
CELL=${5:-fetch:64}
KIND=${CELL%%:*}
CONNECTIONS=${CELL##*:}
[ -x "$OTHER" ] || { echo "no release build at $OTHER" >&2; exit 1; }
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
build_release

PIDS=()
DIRS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for dir in "${DIRS[@]}"; do rm -rf "$dir"; done
}
# start LABEL BINARY FLAGS: a preloaded server; sets ${LABEL}_URL
start() {
  NIMBUS=$2 SERVE_FLAGS=$3 start_server normal production
  trap cleanup EXIT
  PIDS+=("$PID")
  DIRS+=("$DATA")
  python3 Benchmarks/wrk/preload.py nimbus "$URL" "$C" "$ENVIRONMENT" "$TOKEN" "$WEB" "$RECORDS" >/dev/null
  local path=lookup
  [ "$KIND" = create ] && path=modify
  printf -v "${1}_URL" '%s' "$URL/database/1/$C/$ENVIRONMENT/private/records/$path?ckAPIToken=$TOKEN&ckWebAuthToken=$WEB"
  unset NIMBUS
}
start before "$OTHER" ""
start after "$BIN/nimbus" "--connections-per-client 0"
export RECORDS

rate() {  # rate URL → requests per second
  local threads=2
  [ "$CONNECTIONS" = 1 ] && threads=1
  wrk -t"$threads" -c"$CONNECTIONS" -d"${SECONDS_PER}s" -s "Benchmarks/wrk/nimbus-$KIND.lua" "$1" |
    python3 -c 'import re,sys; t=sys.stdin.read(); e=re.search(r"Non-2xx or 3xx responses: (\d+)", t)
if e: sys.exit("wrk saw error answers:\n" + t)
print(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1))'
}

echo "wrk $KIND at $CONNECTIONS connections, ${SECONDS_PER}s per run, $RECORDS records; before = $OTHER"
BEFORE=()
AFTER=()
for round in $(seq 1 "$ROUNDS"); do
  b=$(rate "$before_URL")
  a=$(rate "$after_URL")
  BEFORE+=("$b")
  AFTER+=("$a")
  echo "round $round: before $b req/s, after $a req/s"
done
python3 - "${BEFORE[*]}" "${AFTER[*]}" <<'PY'
import statistics, sys
before = [float(x) for x in sys.argv[1].split()]
after = [float(x) for x in sys.argv[2].split()]
b, a = statistics.median(before), statistics.median(after)
print(f"median: before {b:.0f} req/s, after {a:.0f} req/s, after/before {a / b:.3f}")
PY
