#!/usr/bin/env bash
# Reads with zero, one and two read replicas (issue 40's capacity model): a PostgreSQL primary
# with a synchronous standby and an asynchronous one (scripts/postgres-standby.sh), and three
# Nimbus nodes on databases of their own, preloaded alike: one reading from the primary alone,
# one with --read-replica for the first standby, one with both. Each answers fetches by ID and
# filtered lists of 20 under wrk at 64 connections, in rotation, medians of the rounds. Every
# process shares this machine's cores, so on a small machine the figures say what a replica
# costs and where reads go, not how far they scale (docs/scale-out.md, "Capacity").
#
#   Benchmarks/replicas.sh [seconds=6] [rounds=3] [records=20000]
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
SECONDS_PER=${1:-6}
ROUNDS=${2:-3}
export RECORDS=${3:-20000}
PSQL=/usr/lib/postgresql/15/bin/psql
PORT=54335
require_wrk
build_release

export NIMBUS_PG_PRIMARY_PORT=$PORT NIMBUS_PG_STANDBYS=2
cleanup() { stop_preloaded; scripts/postgres-standby.sh stop >/dev/null; }
scripts/postgres-standby.sh start >/dev/null
trap cleanup EXIT
url() { echo "postgres://postgres@127.0.0.1:$1/$2?sslmode=disable"; }

for replicas in 0 1 2; do
  database=nimbus_bench_replicas_$replicas
  # Commits do not wait for the synchronous standby here: only reads are measured, and the
  # preload should not take minutes.
  "$PSQL" "$(url $PORT postgres)" -qc "CREATE DATABASE $database" -c "ALTER DATABASE $database SET synchronous_commit = off" >/dev/null
  list=""
  for standby in $(seq 1 "$replicas"); do list="$list $(url $((PORT + standby)) $database)"; done
  NIMBUS_DATABASE=$(url $PORT $database) NIMBUS_READ_REPLICAS=${list# } start_preloaded "r$replicas"
  trap cleanup EXIT
done

# Every standby has replayed the preloads before anything is measured.
written=$("$PSQL" "$(url $PORT postgres)" -Atc "SELECT pg_current_wal_lsn()")
for standby in 1 2; do
  for _ in $(seq 1 600); do
    [ "$("$PSQL" "$(url $((PORT + standby)) postgres)" -Atc "SELECT pg_last_wal_replay_lsn() >= '$written'")" = t ] && break
    sleep 0.1
  done
done

# Transactions a standby ran (its reads): where the reads went.
standby_transactions() {
  "$PSQL" "$(url $((PORT + $1)) postgres)" -Atc "SELECT sum(xact_commit + xact_rollback) FROM pg_stat_database"
}

measure() {  # measure LABEL KIND → "requests/s p50 p99 µs-per-request errors"
  local records=${1}_RECORDS auth=${1}_AUTH pid=${1}_PID
  wait_idle
  wrk_cell "${!pid}" -t2 -c64 -d"${SECONDS_PER}s" -s "Benchmarks/wrk/nimbus-$2.lua" \
    "$(cell_url "${!records}" "$2" "${!auth}")"
}

echo "reads with 0, 1 and 2 read replicas: wrk, 64 connections, ${SECONDS_PER}s per run, $RECORDS records, $ROUNDS rounds"
RESULTS=()
for kind in fetch list; do
  for label in r0 r1 r2; do measure "$label" "$kind" >/dev/null; done  # warm
  for round in $(seq 1 "$ROUNDS"); do
    for label in r0 r1 r2; do
      before1=$(standby_transactions 1); before2=$(standby_transactions 2)
      read -r rate p50 p99 cpu errors <<<"$(measure "$label" "$kind")"
      on1=$(($(standby_transactions 1) - before1)); on2=$(($(standby_transactions 2) - before2))
      echo "round $round, $kind, ${label#r} replica(s): $rate req/s, p50 $p50 ms, p99 $p99 ms, node $cpu µs/request," \
        "errors $errors; standby transactions $on1 and $on2"
      RESULTS+=("$kind,${label#r},$rate,$p50,$p99,$cpu")
    done
  done
done
python3 - "${RESULTS[@]}" <<'PY'
import statistics, sys
from collections import defaultdict
cells = defaultdict(list)
for arg in sys.argv[1:]:
    kind, replicas, *values = arg.split(",")
    cells[(kind, replicas)].append([float(v) for v in values])
for (kind, replicas), rows in cells.items():
    rate, p50, p99, cpu = (statistics.median(column) for column in zip(*rows))
    base = statistics.median(r[0] for r in cells[(kind, "0")])
    print(f"median {kind}, {replicas} replica(s): {rate:.0f} req/s ({rate / base:.2f}x of none), p50 {p50:.2f} ms, p99 {p99:.2f} ms, node {cpu:.0f} µs/request")
PY
