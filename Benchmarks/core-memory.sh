#!/usr/bin/env bash
# Whether memory grows with the core count (issue 36: "RSS after the benchmark at most
# PocketBase's, on this machine and with more cores"), on a machine with few cores: each server
# is started believing it has N processors and put under the same load, then its resident
# memory is read.
#
# Nimbus runs with Benchmarks/cores/cores.c preloaded (LD_PRELOAD), which answers every way the
# process asks for its core count (sysconf, sched_getaffinity, the cpuset files NIO and
# Foundation read) with N: NIO makes N event loops, Foundation reports N active processors (so
# SQLite's reader connections and the password hasher's threads are sized for N), libdispatch
# sizes its pool for N. PocketBase runs with GOMAXPROCS=N (Go reads its count with a system
# call the preload cannot answer; GOMAXPROCS sets the processors its scheduler and allocator
# keep state for). The work itself still runs on this machine's cores, so throughput figures
# are not those of a larger machine; what is sized by the core count (threads, their stacks and
# caches, connections, arenas) is. glibc's malloc caps its arenas by the real count (8 a core),
# which no preload reaches.
#
#   [SERVER_ENV="NAME=value …"] Benchmarks/core-memory.sh [seconds per cell=5] [records=20000] [core counts="2 8 16"]
#
# SERVER_ENV is set for Nimbus only (an allocator's tunables, say, to see what they change);
# NIMBUS=binary measures another build than this checkout's (an experiment made from source since
# restored: the script builds the checkout first).
#
# For each count, a fresh Nimbus (production schema, a private zone, preloaded as wrk.sh does)
# and a fresh PocketBase: fetch, list and create at 64 connections, then (Nimbus) 200-record
# batches from 4; resident memory idle before the preload, and after the load.
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
SECONDS_PER=${1:-5}
RECORDS=${2:-20000}
COUNTS=${3:-2 8 16}
export RECORDS
require_wrk
build_release >/dev/null 2>&1
work=$(mktemp -d /tmp/nimbus-cores.XXXXXX)
cc -shared -fPIC -O2 -o "$work/cores.so" Benchmarks/cores/cores.c -ldl
trap 'stop_preloaded; rm -rf "$work"' EXIT

# load URL SCRIPT [CONNECTIONS=64] [THREADS=2]: one wrk cell once every server is idle, its
# figure dropped.
load() {
  wait_idle
  wrk -t"${4:-2}" -c"${3:-64}" -d"${SECONDS_PER}s" -s "$2" "$1" >/dev/null
}

printf '| reported cores | server | NIO loops / Go procs | idle MiB | after MiB (anonymous) | threads after |\n|---|---|---|---|---|---|\n'
for cores in $COUNTS; do
  # The preload applies to the server only, through a wrapper (the CLI calls before it see it
  # too, which changes nothing they do).
  printf '#!/bin/sh\nNIMBUS_REPORTED_CORES=%s LD_PRELOAD=%s %s exec %s "$@"\n' "$cores" "$work/cores.so" "${SERVER_ENV:-}" "${NIMBUS:-$BIN/nimbus}" > "$work/nimbus"
  chmod +x "$work/nimbus"
  PIDS=() DIRS=()
  start_preloaded nimbus "$work/nimbus"
  GOMAXPROCS=$cores start_pocketbase
  PIDS+=("$PBPID") DIRS+=("$PBDATA")
  pocketbase_PID=$PBPID
  pocketbase_IDLE_RSS=$(rss_mib "$PBPID")
  python3 Benchmarks/wrk/preload.py pocketbase "$PBURL" "$RECORDS" >/dev/null
  loops=$(ls /proc/"$nimbus_PID"/task | while read -r task; do cat "/proc/$nimbus_PID/task/$task/comm"; done | grep -c '^NIO-SGLTN-1-' || true)
  for kind in fetch list create; do
    load "$(cell_url "$nimbus_RECORDS" "$kind" "$nimbus_AUTH")" "Benchmarks/wrk/nimbus-$kind.lua"
    load "$PBURL" "Benchmarks/wrk/pocketbase-$kind.lua"
  done
  load "$(cell_url "$nimbus_RECORDS" batch "$nimbus_AUTH")" Benchmarks/wrk/nimbus-batch.lua 4 2
  # As wrk.sh reads it: right after the load, then again once the server has had 12 s to give
  # memory back (`MemoryReturnService` looks every 5 s).
  for server in nimbus pocketbase; do
    pid=${server}_PID idle=${server}_IDLE_RSS
    threads=$(ls /proc/"${!pid}"/task | wc -l)
    procs=$loops
    [ "$server" = pocketbase ] && procs=$cores
    printf '| %s | %s | %s | %s | %s (%s) | %s |\n' "$cores" "$server" "$procs" "${!idle}" "$(rss_mib "${!pid}")" "$(anon_mib "${!pid}")" "$threads"
  done
  sleep 12
  for server in nimbus pocketbase; do
    pid=${server}_PID
    printf '| %s | %s, 12 s later | | | %s (%s) | |\n' "$cores" "$server" "$(rss_mib "${!pid}")" "$(anon_mib "${!pid}")"
  done
  stop_preloaded
done
