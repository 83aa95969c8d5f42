#!/usr/bin/env bash
# What the width of PostgreSQL's index keys costs a record's index entries (issue 35's batches,
# where inserting index entries is about half of the cluster's time): the field and pair entry
# tables as migration v36 leaves them, against the same tables keyed by fixed-width values, with
# pgbench inserting the entries of 200-record batches (the wrk benchmarks' Item: a text
# `category`, a number `count`, their pair) into each in turn, on a private cluster
# (synchronous_commit off), the tables emptied before every run.
#
# Layouts:
#   text     today's: record type, field and sort field as text keys, numbers as numeric;
#   names    the names as bigint keys (a hash of the name; the names kept beside them in the row),
#            numbers still numeric;
#   float8   the names as bigint keys and numbers as float8.
#
#   Benchmarks/postgres-index-keys.sh [seconds=10] [rounds=4] [clients=2]
#
# Prints each run's batches/s and each layout's median.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER=${1:-10}
ROUNDS=${2:-4}
CLIENTS=${3:-2}
BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
admin=$(scripts/postgres.sh start | tail -1)
work=$(mktemp -d /tmp/nimbus-index-keys.XXXXXX)
trap 'scripts/postgres.sh stop >/dev/null; rm -rf "$work"' EXIT
PGOPTIONS="-c client_min_messages=warning" "$BIN/psql" "$admin" -qc "DROP DATABASE IF EXISTS index_keys" -c "CREATE DATABASE index_keys" \
  -c "ALTER DATABASE index_keys SET synchronous_commit = off" >/dev/null
url=${admin/\/postgres\?/\/index_keys?}

# layout NAME NAME-TYPE NUMBER-TYPE: the two tables and their indexes as migration v36 makes
# them (PostgresMigrations), with the key columns' types given.
layout() {
  local name=$1 key=$2 number=$3 names="" t="" s=""
  # With bigint keys the names stay in the row (a query would recheck them against a hash
  # collision); with text keys the key is the name.
  if [ "$key" = bigint ]; then names=', field_name text COLLATE "C" NOT NULL, type_name text COLLATE "C" NOT NULL, sort_name text'; else key='text COLLATE "C"'; fi
  cat <<SQL
CREATE TABLE field_$name (database_id bigint NOT NULL, record_id bigint NOT NULL, field $key NOT NULL, position integer NOT NULL,
  zone_id bigint NOT NULL, record_type $key NOT NULL, num $number, text bytea, lon double precision$names,
  PRIMARY KEY (database_id, record_id, field, position));
CREATE INDEX ON field_$name (zone_id, record_type, field, num, record_id) WHERE num IS NOT NULL AND lon IS NULL;
CREATE INDEX ON field_$name (zone_id, record_type, field, substring(text from 1 for 1000), record_id) WHERE text IS NOT NULL;
CREATE TABLE pair_$name (database_id bigint NOT NULL, record_id bigint NOT NULL, field $key NOT NULL, sort_field $key NOT NULL,
  zone_id bigint NOT NULL, record_type $key NOT NULL, value_num $number, value_text bytea, sort_num $number, sort_text bytea$names,
  PRIMARY KEY (database_id, record_id, field, sort_field));
SQL
  local value sort
  for value in text num; do
    for sort in text num; do
      local v="value_num" o="sort_num"
      [ $value = text ] && v="substring(value_text from 1 for 1000)"
      [ $sort = text ] && o="substring(sort_text from 1 for 1000)"
      echo "CREATE INDEX ON pair_$name (zone_id, record_type, field, sort_field, $v, $o, record_id) WHERE value_$value IS NOT NULL AND sort_$sort IS NOT NULL;"
    done
  done
}

# inserts NAME KEY: pgbench's script, one 200-record batch's entries (ids from a sequence, so
# they grow as records' ids do).
inserts() {
  local name=$1 key=$2 category="'category'" count="'count'" item="'Item'" f="" p=""
  if [ "$key" = bigint ]; then
    category="hashtextextended('category', 0)" count="hashtextextended('count', 0)" item="hashtextextended('Item', 0)"
    f=", 'x', 'Item', NULL" p=", 'category', 'Item', 'count'"
  fi
  cat <<SQL
SELECT nextval('ids') * 1000 AS base \gset
INSERT INTO field_$name SELECT 1, :base + g, $category, -1, 7, $item, NULL, convert_to('c' || (g % 50), 'UTF8'), NULL$f FROM generate_series(1, 200) g;
INSERT INTO field_$name SELECT 1, :base + g, $count, -1, 7, $item, :base + g, NULL, NULL$f FROM generate_series(1, 200) g;
INSERT INTO pair_$name SELECT 1, :base + g, $category, $count, 7, $item, NULL, convert_to('c' || (g % 50), 'UTF8'), :base + g, NULL$p FROM generate_series(1, 200) g;
SQL
}

LAYOUTS=("text text numeric" "names bigint numeric" "float8 bigint float8")
{
  echo "CREATE SEQUENCE ids;"
  for spec in "${LAYOUTS[@]}"; do layout $spec; done
} | "$BIN/psql" "$url" -q -v ON_ERROR_STOP=1 >/dev/null
for spec in "${LAYOUTS[@]}"; do set -- $spec; inserts "$1" "$2" > "$work/$1.sql"; done

declare -A runs
for round in $(seq 1 "$ROUNDS"); do
  for spec in "${LAYOUTS[@]}"; do
    set -- $spec
    "$BIN/psql" "$url" -qc "TRUNCATE field_$1, pair_$1" -c CHECKPOINT
    tps=$("$BIN/pgbench" -n -M prepared -c "$CLIENTS" -j "$CLIENTS" -T "$SECONDS_PER" -f "$work/$1.sql" "$url" 2>&1 | awk '/^tps/ {printf "%.0f", $3}')
    echo "round $round, $1: $tps batches/s"
    runs[$1]+="$tps "
  done
done
for spec in "${LAYOUTS[@]}"; do
  set -- $spec
  python3 -c "import statistics, sys; v = [float(x) for x in sys.argv[2:]]; print(f'{sys.argv[1]}: median {statistics.median(v):.0f} batches/s ({statistics.median(v) * 200:.0f} records/s)')" "$1" ${runs[$1]}
done
