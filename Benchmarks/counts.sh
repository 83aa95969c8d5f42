#!/usr/bin/env bash
# What a request costs in events rather than time: system calls (by kind), futex calls, context
# switches and SQLite statements per request, for one wrk cell against a preloaded Nimbus (as
# wrk.sh starts it), counted by `perf stat` on the server over the cell's seconds. Two builds
# whose throughput differs but whose counts agree differ in the work between the events (the
# fifty-third session's executor experiment, docs/benchmarks.md); counts that differ say where.
#
#   Benchmarks/counts.sh [cell=fetch:64] [seconds=5] [records=20000]
#
# NIMBUS=binary counts another build. SQLite statements are counted with a uprobe on
# `sqlite3_step` in the system's libsqlite3 (added for the run, removed after; needs root), and
# left out when it cannot be placed. Counting slows the server a little; the rate printed is
# under counting, so compare counts, not rates.
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
CELL=${1:-fetch:64}
SECONDS_PER=${2:-5}
RECORDS=${3:-20000}
export RECORDS
require_wrk
require_perf
binary=${NIMBUS:-}
unset NIMBUS
build_release >/dev/null
start_preloaded nimbus "$binary"
cell_target "$CELL"

events=(context-switches)
for call in read writev write epoll_wait epoll_ctl futex pread64 pwrite64 fcntl; do
  events+=("syscalls:sys_enter_$call")
done
sqlite=$(ldconfig -p | awk '/libsqlite3\.so\.0 /{print $NF; exit}')
probe_added=
if [ -n "$sqlite" ] && perf probe -q -x "$sqlite" -a sqlite3_step 2>/dev/null; then
  probe_added=1
  events+=(probe_libsqlite3:sqlite3_step)
fi
remove_probe() { [ -n "$probe_added" ] && perf probe -q -d 'probe_libsqlite3:sqlite3_step' 2>/dev/null || true; }
trap 'remove_probe; stop_preloaded' EXIT

wrk -t"$threads" -c"$connections" -d2s "${script[@]}" "$url" >/dev/null  # warm up
wait_idle
stat=$(mktemp)
event_flags=()
for event in "${events[@]}"; do event_flags+=(-e "$event"); done
perf stat -x, "${event_flags[@]}" -p "$nimbus_PID" -o "$stat" -- sleep "$SECONDS_PER" &
counter=$!
requests=$(wrk -t"$threads" -c"$connections" -d"${SECONDS_PER}s" "${script[@]}" "$url" | awk '/requests in/{print $1}')
wait "$counter"
echo "$CELL: $requests requests in ${SECONDS_PER}s (under counting)"
# perf stat -x, lines: count,unit,event,...
awk -F, -v n="$requests" '$3 != "" && $1 ~ /^[0-9]+$/ { printf "  %-40s %12d  %8.2f a request\n", $3, $1, $1 / n }' "$stat"
rm -f "$stat"
