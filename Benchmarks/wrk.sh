#!/usr/bin/env bash
# Nimbus against PocketBase with wrk (Debian's), a load generator independent of the project,
# and, with BASELINE, against an earlier build of Nimbus in the same run: issue 36's yardstick.
# Nimbus in production (the comparison's deployed schema, see lib.sh), a private custom zone, a
# signed-in user; PocketBase with public rules and the same (category, count) index; all
# preloaded with the same records, all running side by side, SQLite synchronous=NORMAL on all.
#
# Cells: the health endpoint (the HTTP stack's own ceiling), fetch by ID, a filtered sorted list
# of 20, and single-record creates, at 64 connections (two wrk threads) and at 1; then, Nimbus
# alone (PocketBase has neither), the zone's change feed paged through by one client (pages of
# 200, nimbus-feed.lua) and 200-record atomic batches from 4, in records per second. Each cell
# warms every server up for 2 s, then runs ROUNDS rounds, the servers' order rotating each
# round so the machine's drift falls on all, each measurement once every server is idle again
# (`wait_idle`); medians of requests/s, p50 and p99, and the
# server's CPU per request (utime + stime from /proc). Creates come last (they grow the zone).
# Then each server's resident memory: idle (before the preload) and after the run, with the
# anonymous part of the latter (what is not the binary's or a mapped file's pages).
#
#   Benchmarks/wrk.sh [seconds=8] [rounds=3] [records=100000]
#   BASELINE=<worktree or nimbus binary> Benchmarks/wrk.sh …   # an earlier build beside this one
#   CELLS="create:64 create:1" Benchmarks/wrk.sh …               # some cells only
#
# Prints a Markdown table and writes bench-results/wrk.json.
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
SECONDS_PER=${1:-8}
ROUNDS=${2:-3}
RECORDS=${3:-100000}
export RECORDS
require_wrk
build_release
mkdir -p bench-results

SERVERS=(nimbus)
start_preloaded nimbus
if [ -n "${BASELINE:-}" ]; then
  baseline_binary=$(other_binary "$BASELINE")
  [ -x "$baseline_binary" ] || { echo "no release build at $baseline_binary" >&2; exit 1; }
  start_preloaded baseline "$baseline_binary"
  SERVERS+=(baseline)
fi
start_pocketbase
PIDS+=("$PBPID")
DIRS+=("$PBDATA")
trap stop_preloaded EXIT
pocketbase_PID=$PBPID
pocketbase_IDLE_RSS=$(rss_mib "$PBPID")
python3 Benchmarks/wrk/preload.py pocketbase "$PBURL" "$RECORDS"
SERVERS+=(pocketbase)

# target SERVER KIND → "URL SCRIPT" (SCRIPT - for a plain GET)
target() {
  local server=$1 kind=$2
  if [ "$server" = pocketbase ]; then
    case $kind in
      health) echo "$PBURL/api/health -" ;;
      *) echo "$PBURL Benchmarks/wrk/pocketbase-$kind.lua" ;;
    esac
    return
  fi
  local url=${server}_URL records=${server}_RECORDS auth=${server}_AUTH
  if [ "$kind" = health ]; then
    echo "${!url}/health -"
  else
    echo "$(cell_url "${!records}" "$kind" "${!auth}") Benchmarks/wrk/nimbus-$kind.lua"
  fi
}

# measure SERVER KIND CONNECTIONS SECONDS → "requests/s p50-ms p99-ms server-µs-per-request"
measure() {
  local server=$1 kind=$2 connections=$3 seconds=$4 threads=2 url script pid
  [ "$connections" = 1 ] && threads=1
  wait_idle
  read -r url script <<<"$(target "$server" "$kind")"
  local args=(-t"$threads" -c"$connections" -d"${seconds}s")
  [ "$script" != - ] && args+=(-s "$script")
  pid=${server}_PID
  WRK_STRICT=1 wrk_cell "${!pid}" "${args[@]}" "$url" | cut -d' ' -f1-4
}

echo "wrk, $ROUNDS rounds of ${SECONDS_PER}s per cell and server, $RECORDS records, synchronous=NORMAL; servers: ${SERVERS[*]}"
[ -n "${BASELINE:-}" ] && echo "baseline: $baseline_binary"
ROWS=()
for cell in ${CELLS:-health:64 fetch:64 fetch:1 list:64 list:1 feed:1 create:64 create:1 batch:4}; do
  kind=${cell%%:*}
  connections=${cell##*:}
  servers=("${SERVERS[@]}")
  case $kind in feed | batch) servers=("${SERVERS[@]/pocketbase/}") ;; esac
  servers=(${servers[@]})
  for server in "${servers[@]}"; do measure "$server" "$kind" "$connections" 2 >/dev/null; done
  for round in $(seq 1 "$ROUNDS"); do
    count=${#servers[@]}
    for index in $(seq 0 $((count - 1))); do
      server=${servers[$(((index + round) % count))]}
      ROWS+=("$kind,$connections,$server,$(measure "$server" "$kind" "$connections" "$SECONDS_PER" | tr ' ' ',')")
    done
  done
  echo "  $cell done" >&2
done
MEMORY=()
for server in "${SERVERS[@]}"; do
  pid=${server}_PID idle=${server}_IDLE_RSS
  MEMORY+=("$server,${!idle},$(rss_mib "${!pid}"),$(anon_mib "${!pid}")")
done

python3 - "${#ROWS[@]}" "${ROWS[@]}" "${MEMORY[@]}" <<'PY'
import json, statistics, sys
count = int(sys.argv[1])
rows = [arg.split(",") for arg in sys.argv[2:2 + count]]
memory = {m[0]: {"idleMiB": int(m[1]), "afterMiB": int(m[2]), "afterAnonymousMiB": int(m[3])} for m in (arg.split(",") for arg in sys.argv[2 + count:])}
servers = [s for s in ("nimbus", "baseline", "pocketbase") if any(row[2] == s for row in rows)]
cells = list(dict.fromkeys((row[0], row[1]) for row in rows))
result = {}
for kind, connections in cells:
    for server in servers:
        values = [[float(x) for x in row[3:]] for row in rows if (row[0], row[1], row[2]) == (kind, connections, server)]
        if not values: continue
        rate, p50, p99, cpu = (statistics.median(column) for column in zip(*values))
        result.setdefault(f"{kind}:{connections}", {})[server] = {"rate": rate, "p50": p50, "p99": p99, "cpuMicroseconds": cpu}
names = {"health": "health endpoint", "fetch": "fetch by ID", "list": "filtered, sorted list of 20", "create": "create one record",
         "feed": "zone change feed, pages of 200", "batch": "200-record atomic batch"}
# Cells whose requests each carry 200 records: their rate is also given in records per second.
records_per_request = {"feed": 200, "batch": 200}
header = "| scenario | " + " | ".join(f"{s} req/s (p50, p99 ms; µs CPU/req)" for s in servers) + " | Nimbus / PocketBase |"
if "baseline" in servers: header += " Nimbus / baseline |"
print()
print(header)
print("|" + "---|" * (header.count("|") - 1))
for key, by in result.items():
    kind, connections = key.split(":")
    per = records_per_request.get(kind)
    def cell(s):
        if s not in by: return "-"
        text = f"{by[s]['rate']:.0f} ({by[s]['p50']:.2f}, {by[s]['p99']:.2f}; {by[s]['cpuMicroseconds']:.0f})"
        return text + (f": {by[s]['rate'] * per:,.0f} records/s" if per else "")
    versus = f"{by['nimbus']['rate'] / by['pocketbase']['rate']:.2f}×" if "pocketbase" in by else "-"
    line = f"| {names[kind]}, {connections} conn. | " + " | ".join(cell(s) for s in servers) + f" | {versus} |"
    if "baseline" in by: line += f" {by['nimbus']['rate'] / by['baseline']['rate']:.2f}× |"
    print(line)
print()
if "fetch:64" in result and "health:64" in result:
    fetch, health = result["fetch:64"]["nimbus"]["rate"], result["health:64"]["nimbus"]["rate"]
    print(f"Nimbus's fetch by ID at 64 connections is {fetch / health:.0%} of its own health endpoint's rate.")
print("Resident memory (MiB), idle before the preload and after the run (of which anonymous): "
      + "; ".join(f"{s} {memory[s]['idleMiB']} → {memory[s]['afterMiB']} ({memory[s]['afterAnonymousMiB']})" for s in servers) + ".")
json.dump({"cells": result, "memory": memory}, open("bench-results/wrk.json", "w"), indent=2)
PY
