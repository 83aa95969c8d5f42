#!/usr/bin/env bash
# A private PostgreSQL 15 cluster on loopback, for the test suite and benchmarks.
#   scripts/postgres.sh start   installs PostgreSQL 15 from Debian if missing, makes a fresh
#                               cluster and starts it; prints its admin URL
#   scripts/postgres.sh stop    stops it and removes its files
#   scripts/postgres.sh install installs PostgreSQL 15 from Debian if missing, nothing else
#   scripts/postgres.sh log-statements
#                               from now on logs every statement with its session's name
#                               (for scripts/statement-routes.py); prints the log's path and
#                               the line the logging starts after
# It listens on 127.0.0.1:$NIMBUS_PG_PORT (54329) only, trusts local connections, and keeps
# its files in $NIMBUS_PG_DIR (/tmp/nimbus-pg-PORT). It never touches another cluster.
# NIMBUS_PG_DURABLE=1 keeps fsync on (benchmarks); tests run without it, for speed: nothing
# the suite checks depends on PostgreSQL surviving a power cut. NIMBUS_PG_OPTIONS adds server
# options, e.g. "-c shared_preload_libraries=pg_stat_statements -c track_functions=all" to see
# where a benchmark's statements spend PostgreSQL's time.
set -euo pipefail
PORT=${NIMBUS_PG_PORT:-54329}
DIR=${NIMBUS_PG_DIR:-/tmp/nimbus-pg-$PORT}
BIN=/usr/lib/postgresql/15/bin

as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

install() {
  [ -x "$BIN/initdb" ] && return
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  # Debian's package would make and start a cluster of its own on 5432: ask it not to.
  $sudo mkdir -p /etc/postgresql-common
  [ -f /etc/postgresql-common/createcluster.conf ] ||
    echo "create_main_cluster = false" | $sudo tee /etc/postgresql-common/createcluster.conf >/dev/null
  $sudo apt-get update -qq && $sudo apt-get install -y -qq postgresql-15 >/dev/null
}

start() {
  install
  stop quiet
  mkdir -p "$DIR"
  [ "$(id -u)" = 0 ] && chown postgres:postgres "$DIR"
  as_postgres "$BIN/initdb" -D "$DIR/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$DIR/initdb.log"
  local durability="-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
  # Autovacuum keeps PostgreSQL's default naptime (a minute): tests query tables seconds after
  # filling them, and the driver analyzes such tables itself (PostgresPlannerStatistics). Until
  # 2026-11-29 a naptime of 1 s stood in for that, and autovacuum then visited the suite's
  # hundreds of databases without pause, about 13% of the processor.
  # PostgreSQL's defaults (128 MB of buffers, a checkpoint every 1 GB of WAL) are for a small
  # shared machine. The suite makes a database per test server, each copied from a migrated
  # template (9 MB of WAL apiece): on the defaults, checkpoints and buffer evictions ran all
  # pass long. With these, a part of the server suite took 145-172 s instead of 221
  # (2026-11-29; a production cluster is sized for its machine too).
  local memory="-c shared_buffers=1GB -c max_wal_size=8GB -c checkpoint_timeout=30min"
  [ "${NIMBUS_PG_DURABLE:-0}" = 1 ] && durability=""
  as_postgres "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 \
    -o "-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c max_connections=1000 $durability $memory ${NIMBUS_PG_OPTIONS:-}" start >/dev/null || {
    # pg_ctl says only that it could not start; the cluster's own log says why (as
    # scripts/postgres-standby.sh does for its pairs).
    echo "PostgreSQL on port $PORT did not start; the end of $DIR/server.log:" >&2
    tail -n 20 "$DIR/server.log" >&2 || true
    exit 1
  }
  echo "postgres://postgres@127.0.0.1:$PORT/postgres?sslmode=disable"
}

stop() {
  if [ -f "$DIR/data/postmaster.pid" ]; then
    as_postgres "$BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null || true
  fi
  rm -rf "$DIR"
  [ "${1:-}" = quiet ] || echo "stopped the cluster on port $PORT"
}

logStatements() {
  "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -qAt \
    -c "ALTER SYSTEM SET log_statement = 'all'" -c "ALTER SYSTEM SET log_line_prefix = '%m [%p] app=%a '" \
    -c "SELECT pg_reload_conf()" >/dev/null
  echo "$DIR/server.log $(wc -l <"$DIR/server.log")"
}

case "${1:-}" in
  install) install ;;
  log-statements) logStatements ;;
  start) start ;;
  stop) stop ;;
  *) echo "usage: scripts/postgres.sh install|start|stop|log-statements" >&2; exit 2 ;;
esac
