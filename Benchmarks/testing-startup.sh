#!/usr/bin/env bash
# What a test pays for a Nimbus of its own (issue 41, docs/testing.md): NimbusTestServer started,
# a first signed-in request answered, stopped, SAMPLES times in one process (median and p90);
# beside it, in the same run, the alternative a test has without NimbusTesting: a `nimbus serve`
# process on a fresh data directory, started until /health answers, then stopped.
#
#   Benchmarks/testing-startup.sh [samples=20]
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
SAMPLES=${1:-20}
build_release

"$BIN/NimbusBench" --scenario testing-startup --samples "$SAMPLES"

# The baseline: a server process per test.
times=()
for _ in $(seq "$SAMPLES"); do
  dir=$(mktemp -d)
  began=$(date +%s%N)
  "$BIN/nimbus" serve --data-dir "$dir" --port 0 > "$dir/out" 2>&1 &
  pid=$!
  port=""
  for _ in $(seq 1000); do
    port=$(sed -n 's|^Nimbus listening on http://[^:]*:\([0-9]*\)$|\1|p' "$dir/out" | head -1)
    [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" > /dev/null && break
    sleep 0.005
  done
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  ended=$(date +%s%N)
  times+=($(( (ended - began) / 1000000 )))
  rm -rf "$dir"
done
sorted=$(printf '%s\n' "${times[@]}" | sort -n)
median=$(sed -n "$(( (SAMPLES + 1) / 2 ))p" <<<"$sorted")
p90=$(sed -n "$(( (SAMPLES * 9 + 9) / 10 ))p" <<<"$sorted")
echo "| nimbus serve process until /health answers, then stopped, $SAMPLES rounds | $median | $p90 |"
