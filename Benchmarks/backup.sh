#!/usr/bin/env bash
# What an online backup costs the writers beside it (docs/benchmarks.md, issue 37): one release
# server preloaded with RECORDS records; wrk creates records at 64 connections for SECONDS,
# alternately alone and while `nimbus backup --to` runs back to back against the same data
# directory. Prints each backup's time and size, and the creates per second with and without.
#
#   Benchmarks/backup.sh [seconds=10] [rounds=3] [records=100000]
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
SECONDS_PER=${1:-10}
ROUNDS=${2:-3}
RECORDS=${3:-100000}
require_wrk
build_release
export RECORDS
# Info-level access lines, so error answers can be named.
start_preloaded server "$BIN/nimbus" "--connections-per-client 0 --request-limits off --log-level info"
URL="${server_RECORDS}/modify?${server_AUTH}"
BACKUPS=$(mktemp -d /tmp/nimbus-backups.XXXXXX)
DIRS+=("$BACKUPS")

# creates → requests per second of one wrk run.
creates() {
  wrk -t2 -c64 -d"${SECONDS_PER}s" -s Benchmarks/wrk/nimbus-create.lua "$URL" > /tmp/wrk-backup.out
  if grep -q "Non-2xx or 3xx responses" /tmp/wrk-backup.out; then
    cat /tmp/wrk-backup.out >&2
    grep -o 'serverErrorCode=[A-Z_]*' "$DATA/serve.log" | sort | uniq -c >&2
    touch /tmp/wrk-backup.stop
    exit 1
  fi
  awk '/Requests\/sec/ {printf "%.0f", $2}' /tmp/wrk-backup.out
}

# Backups back to back until the file /tmp/wrk-backup.stop appears; one line per backup.
backups() {
  local n=0
  while [ ! -e /tmp/wrk-backup.stop ]; do
    n=$((n + 1))
    local start end
    start=$(date +%s.%N)
    "$BIN/nimbus" backup --to "$BACKUPS/b$n" --data-dir "$DATA" >/dev/null
    end=$(date +%s.%N)
    echo "$(python3 -c "print(f'{$end - $start:.2f}')") $(du -sm "$BACKUPS/b$n" | cut -f1)"
    rm -rf "$BACKUPS/b$n"
  done
}

creates >/dev/null  # warm
ALONE=()
BESIDE=()
for round in $(seq 1 "$ROUNDS"); do
  ALONE+=("$(creates)")
  rm -f /tmp/wrk-backup.stop
  backups > /tmp/wrk-backup.times &
  LOOP=$!
  BESIDE+=("$(creates)") || { wait "$LOOP"; exit 1; }
  touch /tmp/wrk-backup.stop
  wait "$LOOP"
  echo "round $round: alone ${ALONE[-1]} creates/s; beside backups ${BESIDE[-1]} creates/s; backups (s MB): $(tr '\n' ';' < /tmp/wrk-backup.times)"
done
rm -f /tmp/wrk-backup.stop
python3 - "${ALONE[*]}" "${BESIDE[*]}" <<'PY'
import statistics, sys
alone = [float(x) for x in sys.argv[1].split()]
beside = [float(x) for x in sys.argv[2].split()]
a, b = statistics.median(alone), statistics.median(beside)
print(f"median: alone {a:.0f} creates/s, beside back-to-back backups {b:.0f} creates/s ({b / a:.2f}x)")
PY
