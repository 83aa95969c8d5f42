#!/usr/bin/env bash
# What a shared request budget costs PostgreSQL (docs/limits.md, "Several nodes"): pgbench
# running the very statement a node sends to take a lease (PostgresSharedBudgets), against
# pgbench selecting a row by primary key on the same cluster in the same run (the engine's
# cheapest statement, the baseline). Keys are spread over KEYS callers, as many users are.
# A lease serves a twentieth of a budget, so a request pays one lease statement in
# (budget / 20): one in 60 for a user's default of 1,200 a minute.
#
#   Benchmarks/shared-budgets.sh [seconds=10] [keys=1000]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER=${1:-10}
KEYS=${2:-1000}
PGBIN=/usr/lib/postgresql/15/bin
ADMIN=$(NIMBUS_PG_DURABLE=1 scripts/postgres.sh start)
trap 'scripts/postgres.sh stop >/dev/null' EXIT
"$PGBIN/psql" "$ADMIN" -qc "DROP DATABASE IF EXISTS nimbus_bench_budgets" -c "CREATE DATABASE nimbus_bench_budgets" \
  -c "ALTER DATABASE nimbus_bench_budgets SET synchronous_commit = off" >/dev/null
DB="${ADMIN/\/postgres\?/\/nimbus_bench_budgets?}"
# The table as the v24 migration makes it; every caller's bucket made beforehand, full.
"$PGBIN/psql" "$DB" -q <<SQL
CREATE UNLOGGED TABLE request_budgets (key text PRIMARY KEY, tokens double precision NOT NULL,
  capacity double precision NOT NULL, updated_at bigint NOT NULL);
INSERT INTO request_budgets SELECT 'u' || i, 1200, 1200, 0 FROM generate_series(0, $KEYS - 1) AS i;
SQL
SCRIPTS=$(mktemp -d)
# A lease of 60 tokens from a budget of 1,200 a minute, as PostgresSharedBudgets.take sends it.
cat > "$SCRIPTS/lease.sql" <<SQL
\set k random(0, $KEYS - 1)
\set now random(1, 1000000000)
WITH old AS (
  SELECT key, least(1200::float8, tokens + greatest(0, 1200::float8 - capacity) + greatest(0, :now::bigint - updated_at) * 0.02::float8) AS refilled
  FROM request_budgets WHERE key = 'u' || :k FOR UPDATE)
UPDATE request_budgets b SET tokens = old.refilled - least(floor(old.refilled), 60::float8), capacity = 1200::float8,
  updated_at = greatest(b.updated_at, :now::bigint)
FROM old WHERE b.key = old.key RETURNING least(floor(old.refilled), 60::float8)::bigint, b.tokens;
SQL
cat > "$SCRIPTS/select.sql" <<SQL
\set k random(0, $KEYS - 1)
SELECT tokens FROM request_budgets WHERE key = 'u' || :k;
SQL
cell() {  # cell SCRIPT CONNECTIONS → "transactions/s average-latency-ms"
  local threads=2
  [ "$2" = 1 ] && threads=1
  "$PGBIN/pgbench" -n -M prepared -c "$2" -j "$threads" -T "$SECONDS_PER" -f "$SCRIPTS/$1.sql" "$DB" 2>&1 |
    awk '/^latency average/ {l=$4} /^tps/ {t=$3} END {printf "%.0f/s, %.3f ms", t, l}'
}
for connections in 1 16; do
  echo "primary-key select, $connections connection(s): $(cell select "$connections")"
  echo "lease statement,    $connections connection(s): $(cell lease "$connections")"
done
rm -rf "$SCRIPTS"
