#!/usr/bin/env bash
# Issue 35's yardstick, in one run: the record path on the embedded SQLite server, on one node on
# PostgreSQL, and pgbench doing the physically equivalent statements on the same PostgreSQL, the
# engine's own ceiling. Both Nimbus servers are this build's release binary, production schema
# (lib.sh), the private zone "Bench" of a signed-in user, preloaded alike with RECORDS records;
# PostgreSQL as in Benchmarks/postgres.sh (fsync on, synchronous_commit off, like SQLite's
# NORMAL). Load: wrk (Debian's), two threads at 64 connections, one at 1.
#
# Cells (Nimbus requests; pgbench transactions, with -M prepared):
#   fetch   records/lookup of one random record  | the record's row by its key
#   list    the 20 records of one category by count descending (records/query) | the same
#           SELECT the PostgreSQL driver sends (pair_index joined to records)
#   create  records/modify creating one record   | one transaction inserting a record row and its
#           index entries (copied from r1's, so the anchor writes what Nimbus writes), one
#           statement per table
#   batch   records/modify creating 200 records atomically | the same for 200 rows (records/s
#           = requests/s × 200)
# Each cell warms up 2 s, then ROUNDS rounds of SECONDS each, medians. Writes come last.
# BEFORE=<nimbus binary> adds an earlier build on PostgreSQL (its own database on the same
# cluster, preloaded alike) for a before/after in the same run. CELLS="fetch:64 fetch:1" runs only
# those cells (kind:connections), for a quick look while working on one.
#
#   [BEFORE=binary] [CELLS=…] Benchmarks/postgres-anchor.sh [seconds=5] [rounds=3] [records=20000]
# Prints a Markdown table and writes bench-results/postgres-anchor.json.
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
SECONDS_PER=${1:-5}
ROUNDS=${2:-3}
RECORDS=${3:-20000}
export RECORDS
PGBIN=/usr/lib/postgresql/15/bin
require_wrk
build_release
mkdir -p bench-results

ADMIN=$(NIMBUS_PG_DURABLE=1 scripts/postgres.sh start)
# As Benchmarks/postgres.sh: statistics right after the preload, as on a server that has run a while.
"$PGBIN/psql" "$ADMIN" -qc "ALTER SYSTEM SET autovacuum_naptime = 1" -c "SELECT pg_reload_conf()" \
  -c "CREATE DATABASE nimbus_anchor" -c "ALTER DATABASE nimbus_anchor SET synchronous_commit = off" \
  -c "CREATE DATABASE nimbus_before" -c "ALTER DATABASE nimbus_before SET synchronous_commit = off" >/dev/null
DB="${ADMIN/\/postgres\?/\/nimbus_anchor?}"
SERVERS=(sqlite postgres)
cleanup() { stop_preloaded; scripts/postgres.sh stop >/dev/null; }

start_preloaded sqlite
NIMBUS_DATABASE="$DB" start_preloaded postgres
if [ -n "${BEFORE:-}" ]; then
  NIMBUS_DATABASE="${ADMIN/\/postgres\?/\/nimbus_before?}" start_preloaded before "$BEFORE"
  SERVERS+=(before)
fi
trap cleanup EXIT
"$PGBIN/psql" "$DB" -qc "VACUUM ANALYZE" -c "CREATE SEQUENCE anchor_ids START 1000000000000" >/dev/null
read -r DATABASE_ID ZONE_ID R1_ID <<<"$("$PGBIN/psql" "$DB" -At -F ' ' -c "SELECT r.database_id, r.zone_id, r.id FROM records r
  JOIN zones z ON z.id = r.zone_id WHERE z.name = 'Bench' AND r.record_name = 'r1'")"

# The entry keys of the list's pair (PostgresEntryKey), worked out once as the node does.
read -r CATEGORY_KEY COUNT_KEY <<<"$("$PGBIN/psql" "$DB" -At -F ' ' -c "SELECT nimbus_entry_key('Item', 'category'),
  nimbus_entry_key('Item', 'count')")"

SCRIPTS=$(mktemp -d /tmp/anchor.XXXXXX)
cat > "$SCRIPTS/fetch.sql" <<SQL
\set n random(0, $RECORDS - 1)
SELECT * FROM records WHERE database_id = $DATABASE_ID AND zone_id = $ZONE_ID AND record_name = 'r' || :n;
SQL
cat > "$SCRIPTS/list.sql" <<SQL
\set c random(0, 49)
SELECT r.*, p.sort_num::text FROM pair_index p JOIN records r ON r.database_id = p.database_id AND r.id = p.record_id
WHERE NOT r.deleted AND r.record_type = 'Item' AND p.zone_id = $ZONE_ID AND p.field_key = $CATEGORY_KEY
  AND p.sort_key = $COUNT_KEY AND substring(p.value_text from 1 for 1000) = substring(convert_to('c' || :c, 'UTF8') from 1 for 1000)
  AND p.value_text = convert_to('c' || :c, 'UTF8') AND p.sort_num IS NOT NULL ORDER BY p.sort_num DESC, p.record_id DESC LIMIT 21;
SQL
# insert_sql COUNT: COUNT copies of r1 with new ids and names, and their index entries, one statement per table.
insert_sql() {
  cat <<SQL
WITH ids AS (SELECT nextval('anchor_ids') AS id FROM generate_series(1, $1)),
made AS (INSERT INTO records SELECT r.database_id, ids.id, r.zone_id, 'anchor' || ids.id, r.record_type, r.fields, r.parent,
    r.change_sequence, r.created_at, r.created_by, r.created_device, r.modified_at, r.modified_by, r.modified_device, r.deleted
  FROM records r, ids WHERE r.database_id = $DATABASE_ID AND r.id = $R1_ID RETURNING id),
fields AS (INSERT INTO field_index (database_id, record_id, entry_key, position, zone_id, num, text, lon)
  SELECT f.database_id, made.id, f.entry_key, f.position, f.zone_id, f.num, f.text, f.lon
  FROM field_index f, made WHERE f.database_id = $DATABASE_ID AND f.record_id = $R1_ID),
tokens AS (INSERT INTO record_tokens SELECT t.database_id, made.id, t.zone_id, t.record_type, t.lexemes
  FROM record_tokens t, made WHERE t.database_id = $DATABASE_ID AND t.record_id = $R1_ID)
INSERT INTO pair_index (database_id, record_id, field_key, sort_key, zone_id, value_num, value_text, sort_num, sort_text)
  SELECT p.database_id, made.id, p.field_key, p.sort_key, p.zone_id, p.value_num, p.value_text,
  p.sort_num, p.sort_text FROM pair_index p, made WHERE p.database_id = $DATABASE_ID AND p.record_id = $R1_ID;
SQL
}
insert_sql 1 > "$SCRIPTS/create.sql"
insert_sql 200 > "$SCRIPTS/batch.sql"

# pgbench_cell KIND CONNECTIONS SECONDS → "transactions/s average-latency-ms"
pgbench_cell() {
  local threads=2
  [ "$2" = 1 ] && threads=1
  "$PGBIN/pgbench" -n -M prepared -c "$2" -j "$threads" -T "$3" -f "$SCRIPTS/$1.sql" "$DB" 2>&1 |
    awk '/^latency average/ {l=$4} /^tps/ {t=$3} END {printf "%.0f %.3f\n", t, l}'
}

# nimbus_cell SERVER KIND CONNECTIONS SECONDS → wrk_cell's five figures (errors last)
nimbus_cell() {
  local records=${1}_RECORDS auth=${1}_AUTH server_pid=${1}_PID threads=2
  [ "$3" = 1 ] && threads=1
  wait_idle
  wrk_cell "${!server_pid}" -t"$threads" -c"$3" -d"${4}s" -s "Benchmarks/wrk/nimbus-$2.lua" \
    "$(cell_url "${!records}" "$2" "${!auth}")"
}

echo "postgres-anchor: $ROUNDS rounds of ${SECONDS_PER}s per cell, $RECORDS records"
ROWS=()
for cell in ${CELLS:-fetch:64 fetch:1 list:64 list:1 create:64 create:1 batch:64 batch:1}; do
  kind=${cell%%:*}
  connections=${cell##*:}
  for server in "${SERVERS[@]}"; do nimbus_cell "$server" "$kind" "$connections" 2 >/dev/null; done
  pgbench_cell "$kind" "$connections" 2 >/dev/null
  for _ in $(seq 1 "$ROUNDS"); do
    for server in "${SERVERS[@]}"; do
      ROWS+=("$kind,$connections,$server,$(nimbus_cell "$server" "$kind" "$connections" "$SECONDS_PER" | tr ' ' ',')")
    done
    ROWS+=("$kind,$connections,pgbench,$(pgbench_cell "$kind" "$connections" "$SECONDS_PER" | tr ' ' ','),0,0,0")
  done
  echo "  $cell done" >&2
done
rm -rf "$SCRIPTS"

python3 - "${ROWS[@]}" <<'PY'
import json, statistics, sys
rows = [arg.split(",") for arg in sys.argv[1:]]
result = {}
for kind, connections, server, *values in rows:
    result.setdefault(f"{kind}:{connections}", {}).setdefault(server, []).append([float(v) for v in values])
scale = {"batch": 200}
names = {"fetch": "fetch by ID", "list": "filtered, sorted list of 20", "create": "create one record", "batch": "200-record batch (records/s)"}
before = any(row[2] == "before" for row in rows)
print("\n| scenario | SQLite /s (p50 ms) | PostgreSQL /s (p50 ms) | pgbench /s (avg ms) | PG / SQLite | PG / pgbench |"
      + (" PG before /s (p50 ms) | PG / before |" if before else ""))
print("|---|---|---|---|---|---|" + ("---|---|" if before else ""))
summary = {}
for key, by in result.items():
    kind, connections = key.split(":")
    m = {server: [statistics.median(column) for column in zip(*values)] for server, values in by.items()}
    failed = {server: sum(v[-1] for v in values) for server, values in by.items()}
    k = scale.get(kind, 1)
    s, p, b = m["sqlite"][0] * k, m["postgres"][0] * k, m["pgbench"][0] * k
    summary[key] = {"sqlite": s, "postgres": p, "pgbench": b, "sqliteP50": m["sqlite"][1], "postgresP50": m["postgres"][1],
                    "pgbenchAverage": m["pgbench"][1], "postgresCpuMicroseconds": m["postgres"][3], "sqliteCpuMicroseconds": m["sqlite"][3]}
    e = lambda server: f", {failed[server]:.0f} failed" if failed[server] else ""
    print(f"| {names[kind]}, {connections} conn. | {s:.0f} ({m['sqlite'][1]:.2f}{e('sqlite')}) | {p:.0f} ({m['postgres'][1]:.2f}{e('postgres')}) | "
          f"{b:.0f} ({m['pgbench'][1]:.2f}) | {p / s:.2f} | {p / b:.2f} |"
          + (f" {m['before'][0] * k:.0f} ({m['before'][1]:.2f}{e('before')}) | {m['postgres'][0] / m['before'][0]:.2f} |" if before else ""))
    if before: summary[key]["before"] = m["before"][0] * k
json.dump(summary, open("bench-results/postgres-anchor.json", "w"), indent=2)
PY
