#!/usr/bin/env bash
# Nimbus on PostgreSQL, in one run with its baselines: the comparison's scenarios (creates from
# 64 clients and from 1, the 200-record batch, fetch by ID, the filtered and sorted list, the
# zone change feed, save -> notification) against
#   1. Nimbus on SQLite (synchronous=NORMAL), the embedded default;
#   2. one node on PostgreSQL;
#   3. two nodes on the same PostgreSQL, the load generator's clients split between them.
# PostgreSQL is a private cluster on loopback (scripts/postgres.sh) with fsync on and
# synchronous_commit off: like SQLite's NORMAL, a crash of the server loses nothing, a crash
# of the machine may lose the last moments. Production schema, as Benchmarks/ab.sh.
# The PostgreSQL phases' statement counts per request are UnitOfWorkTests' (docs/scale-out.md).
#
#   [ONLY=text] Benchmarks/postgres.sh [seconds] [rounds] [records]   (ONLY: the rows whose name has it)
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
SECONDS_PER=${1:-3}
ROUNDS=${2:-3}
RECORDS=${3:-20000}
PSQL=/usr/lib/postgresql/15/bin/psql
build_release
mkdir -p bench-results

ADMIN=$(NIMBUS_PG_DURABLE=1 scripts/postgres.sh start)
# Autovacuum looks every second instead of every minute, so the planner has the tables'
# statistics right after the preload, as on a server that has run for a while (on tables
# never analyzed it guesses one row everywhere: a page of the filtered list took 40 ms
# instead of 0.4).
"$PSQL" "$ADMIN" -qc "ALTER SYSTEM SET autovacuum_naptime = 1" -c "SELECT pg_reload_conf()" >/dev/null
SECOND_PID=""
cleanup() {
  [ -n "$SECOND_PID" ] && kill "$SECOND_PID" 2>/dev/null || true
  [ -n "${PID:-}" ] && kill "$PID" 2>/dev/null || true
  scripts/postgres.sh stop >/dev/null
}
trap cleanup EXIT

# database NAME: a new database on the cluster, its URL.
database() {
  "$PSQL" "$ADMIN" -qc "CREATE DATABASE $1" -c "ALTER DATABASE $1 SET synchronous_commit = off" >/dev/null
  echo "${ADMIN/\/postgres\?/\/$1?}"
}

bench() {  # bench LABEL URLS
  "$BIN/NimbusBench" --scenario compare --url "$2" --container "$C" --api-token "$TOKEN" --web-auth-token "$WEB" \
    --environment "$ENVIRONMENT" --raw-dir "$DATA" --seconds "$SECONDS_PER" --rounds "$ROUNDS" --sync normal \
    --list-records "$RECORDS" --output "bench-results/postgres-$1.json" ${ONLY:+--only "$ONLY"} | grep '^| [a-z0-9]' | grep -v '^| scenario'
}

echo "== SQLite, one node"
start_server normal production; trap cleanup EXIT
bench sqlite "$URL"
stop_server; trap cleanup EXIT

echo "== PostgreSQL, one node"
export NIMBUS_DATABASE
NIMBUS_DATABASE=$(database nimbus_bench_one)
start_server normal production; trap cleanup EXIT
bench postgres-1 "$URL"
stop_server; trap cleanup EXIT

echo "== PostgreSQL, two nodes"
NIMBUS_DATABASE=$(database nimbus_bench_two)
start_server normal production; trap cleanup EXIT
# The same flags as the first node (lib.sh): no per-client connection cap, no request budgets.
"$BIN/nimbus" serve --data-dir "$DATA" --port 0 --log-level error --connections-per-client 0 --request-limits off > "$DATA/serve-2.log" 2>&1 &
SECOND_PID=$!
for _ in $(seq 1 100); do grep -q "listening on" "$DATA/serve-2.log" && break; sleep 0.1; done
URL2=$(grep -o 'http://[0-9.:]*' "$DATA/serve-2.log" | head -1)
bench postgres-2 "$URL,$URL2"
kill "$SECOND_PID"; wait "$SECOND_PID" 2>/dev/null || true; SECOND_PID=""
stop_server; trap cleanup EXIT

python3 - <<'PY'
import json
def cells(name):
    data = json.load(open(f"bench-results/postgres-{name}.json"))
    rows = data["rows"] if isinstance(data, dict) and "rows" in data else data
    return {row["scenario"]: row["nimbus"] for row in rows if row.get("nimbus")}
sqlite, one, two = cells("sqlite"), cells("postgres-1"), cells("postgres-2")
print("\n| scenario | SQLite /s | PostgreSQL, 1 node /s | 2 nodes /s | 1 node / SQLite | 2 nodes / 1 node | p50 ms SQLite, PG 1, PG 2 |\n|---|---|---|---|---|---|---|")
for scenario in sqlite:
    s, a, b = sqlite[scenario], one.get(scenario), two.get(scenario)
    if not a or not b: continue
    p50 = lambda c: f"{c.get('p50ms', 0):.2f}" + (f" err {c['errors']}" if c.get('errors') else "")
    print(f"| {scenario} | {s['perSecond']:.0f} | {a['perSecond']:.0f} | {b['perSecond']:.0f} | "
          f"{a['perSecond'] / s['perSecond']:.3f} | {b['perSecond'] / a['perSecond']:.3f} | {p50(s)}, {p50(a)}, {p50(b)} |")
PY
