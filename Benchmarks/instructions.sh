#!/usr/bin/env bash
# Instructions a request costs the server, counted rather than timed: each build's release
# server runs under valgrind's callgrind, set up as every benchmark sets its server up
# (Benchmarks/lib.sh's start_preloaded), and answers the same requests in the same order from
# one client, one after the other (Benchmarks/instructions-client.py, seeded). Callgrind counts the
# instructions the whole server executes while those requests run, and again over as long a
# wait with no requests (its timers, its pipeline's polls); the difference, divided by the
# requests, is the figure. Timed comparisons on a shared two-core machine move by a tenth
# between rounds of one build; this does not depend on the machine's speed, only on what the
# code does, so a change of 1–2% shows.
#
#   Benchmarks/instructions.sh [cell=fetch] [requests=300] [rounds=3] [records=2000] [binary…]
#
# cell: fetch, list, create or batch (200 creates in one atomic request; its figure is a
# request's, not a record's). With binaries, each is counted as well as this build (a binary
# from another checkout's release build, as Benchmarks/wrk-ab.sh takes one), rounds alternating.
# Prints each round's figures and the medians; writes bench-results/instructions-<cell>.json.
# KEEP=1 also keeps each build's last counted dump (the requests', idle not subtracted) as
# bench-results/callgrind-<cell>-<build>.out, for `callgrind_annotate --inclusive=yes`: where the
# instructions went, function by function.
#
# What it does not see: time spent waiting (the kernel, other processes, locks), and the cost
# of an instruction (a cache miss counts as one). A change that trades instructions for memory
# traffic, or for threads waking, still needs the timed comparison.
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
CELL=${1:-fetch}
REQUESTS=${2:-300}
ROUNDS=${3:-3}
RECORDS=${4:-2000}
export RECORDS
shift $(( $# < 4 ? $# : 4 ))
case $CELL in fetch | list | create | batch) ;; *) echo "instructions.sh: cell is fetch, list, create or batch" >&2; exit 2 ;; esac
command -v valgrind >/dev/null || { apt-get update -qq && apt-get install -y -qq valgrind; }
build_release >/dev/null
mkdir -p bench-results
WORK=$(mktemp -d /tmp/nimbus-instructions.XXXXXX)
cleanup() { stop_preloaded; rm -rf "$WORK"; }
trap cleanup EXIT

# Each build as valgrind can read it: Valgrind 3.19 cannot read the DWARF 5 Swift writes, and the
# symbol table is all it needs. Only `serve` runs under callgrind, with instrumentation off until
# asked for (the setup and the preload run at full speed).
LABELS=(this)
BINARIES=("$BIN/nimbus")
for other in "$@"; do LABELS+=("$(basename "$other")"); BINARIES+=("$other"); done
for index in "${!BINARIES[@]}"; do
  strip -g -o "$WORK/nimbus-$index" "${BINARIES[$index]}"
  cat > "$WORK/serve-$index" <<WRAPPER
#!/usr/bin/env bash
if [ "\$1" = serve ] && [ "\${2:-}" != --help ]; then
  exec valgrind --tool=callgrind --instr-atstart=no --demangle=no --callgrind-out-file="$WORK/callgrind-$index.%p" \
    "$WORK/nimbus-$index" "\$@"
fi
exec "$WORK/nimbus-$index" "\$@"
WRAPPER
  chmod +x "$WORK/serve-$index"
done

# instructions PID SECONDS-OR-COMMAND…: the instructions the server executes meanwhile (from a
# dump of what was counted since the last one).
instructions() {
  local pid=$1; shift
  callgrind_control -z "$pid" >/dev/null
  callgrind_control -i on "$pid" >/dev/null
  "$@"
  callgrind_control -i off "$pid" >/dev/null
  callgrind_control -d "$pid" >/dev/null
  local dump
  dump=$(ls -t "$WORK"/callgrind-*."$pid".* 2>/dev/null | head -1)
  awk '/^totals:/ {print $2; exit}' "$dump"
  [ -n "${KEEP_AS:-}" ] && cp "$dump" "$KEEP_AS"
  rm -f "$WORK"/callgrind-*."$pid".*
}

echo "instructions: $CELL, $REQUESTS requests a round, $ROUNDS rounds, $RECORDS records"
RESULTS=()
for round in $(seq 1 "$ROUNDS"); do
  for index in "${!BINARIES[@]}"; do
    SERVERS=(counted)
    START_SECONDS=300 start_preloaded counted "$WORK/serve-$index" 2>/dev/null
    # start_preloaded's own trap stops its servers only.
    trap cleanup EXIT
    client=(python3 Benchmarks/instructions-client.py "$counted_RECORDS" "$counted_AUTH" "$CELL")
    "${client[@]}" 50 "$RECORDS" warm
    started=$(date +%s.%N)
    busy=$(KEEP_AS=${KEEP:+bench-results/callgrind-$CELL-${LABELS[$index]}.out} \
      instructions "$counted_PID" "${client[@]}" "$REQUESTS" "$RECORDS" counted)
    elapsed=$(python3 -c "import time; print(time.time() - $started)")
    idle=$(instructions "$counted_PID" sleep "$elapsed")
    # Killed outright first: what is wanted is dumped, and a server under valgrind can take
    # minutes to wind down from stop_preloaded's SIGTERM.
    kill -9 "$counted_PID" 2>/dev/null || true
    stop_preloaded
    rm -f "$WORK"/callgrind-*
    PIDS=()
    DIRS=()
    per=$(python3 -c "print(round(($busy - $idle) / $REQUESTS))")
    printf 'round %s: %-12s %9s instructions a request (counted %s with the requests, %s idle over %.1f s)\n' \
      "$round" "${LABELS[$index]}" "$per" "$busy" "$idle" "$elapsed"
    RESULTS+=("${LABELS[$index]} $per")
  done
done
printf '%s\n' "${RESULTS[@]}" | python3 -c '
import json, statistics, sys
by = {}
for line in sys.stdin:
    label, value = line.split()
    by.setdefault(label, []).append(int(value))
medians = {label: statistics.median(values) for label, values in by.items()}
for label, values in by.items():
    spread = (max(values) - min(values)) / medians[label]
    print(f"median {label}: {medians[label]:,.0f} instructions a request (spread {spread:.1%})")
first = next(iter(medians))
for label in list(medians)[1:]:
    print(f"{first}/{label}: {medians[first] / medians[label]:.3f}")
json.dump({"cell": sys.argv[1], "rounds": by, "medians": medians}, open(f"bench-results/instructions-{sys.argv[1]}.json", "w"), indent=1)
' "$CELL"
