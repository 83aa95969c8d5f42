#!/usr/bin/env bash
# A private PostgreSQL 15 primary with a synchronous streaming standby, both on loopback: what
# the failover tests kill and promote (docs/scale-out.md, "Failover").
#   scripts/postgres-standby.sh start     makes both clusters and starts them; prints the URL a
#                                         node uses (both hosts, target_session_attrs=read-write)
#   scripts/postgres-standby.sh kill-primary   kill -9 of the primary's postmaster
#   scripts/postgres-standby.sh promote   promotes the standby (PostgreSQL's own promotion)
#   scripts/postgres-standby.sh stop      stops both and removes their files
# The primary listens on 127.0.0.1:$NIMBUS_PG_PRIMARY_PORT (25431), the standby on the next
# port; their files are in $NIMBUS_PG_PAIR_DIR (/tmp/nimbus-pg-pair-PORT). Pairs start while
# other tests run, so their ports sit below Linux's ephemeral range (32768-60999): a port in it
# may be the local end of another test's connection, and then the cluster cannot listen there.
# NIMBUS_PG_STANDBYS=N adds asynchronous standbys on the ports after it (read replicas for
# Benchmarks/replicas.sh). Commits wait for the standby (synchronous_commit = on, the standby
# named in synchronous_standby_names), so every commit a client saw acknowledged is on the
# standby when it is promoted. fsync stays off: the tests kill processes, not the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PRIMARY_PORT=${NIMBUS_PG_PRIMARY_PORT:-25431}
STANDBY_PORT=$((PRIMARY_PORT + 1))
DIR=${NIMBUS_PG_PAIR_DIR:-/tmp/nimbus-pg-pair-$PRIMARY_PORT}
BIN=/usr/lib/postgresql/15/bin
STANDBY_NAME=nimbus_standby
STANDBYS=${NIMBUS_PG_STANDBYS:-1}

as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

start_cluster() {  # start_cluster DATA PORT; on failure, the cluster's own log says why
  as_postgres "$BIN/pg_ctl" -D "$1" -l "$1.log" -w -t 60 \
    -o "-p $2 -k $DIR -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=off -c full_page_writes=off" start >/dev/null || {
    echo "PostgreSQL on port $2 did not start; the end of $1.log:" >&2
    tail -n 20 "$1.log" >&2 || true
    return 1
  }
}

start() {
  scripts/postgres.sh install >/dev/null
  stop quiet
  # A start that fails stops what it started: no cluster outlives a test that could not use it.
  trap 'status=$?; [ "$status" = 0 ] || stop quiet; exit "$status"' EXIT
  mkdir -p "$DIR"
  [ "$(id -u)" = 0 ] && chown postgres:postgres "$DIR"
  as_postgres "$BIN/initdb" -D "$DIR/primary" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$DIR/initdb.log"
  start_cluster "$DIR/primary" "$PRIMARY_PORT"
  # -R writes the standby's primary_conninfo; its application_name is what the primary's
  # synchronous_standby_names waits for.
  as_postgres "$BIN/pg_basebackup" -D "$DIR/standby" -R -X stream \
    -d "host=127.0.0.1 port=$PRIMARY_PORT user=postgres application_name=$STANDBY_NAME" >/dev/null
  start_cluster "$DIR/standby" "$STANDBY_PORT"
  # Synchronous from here, and on the primary only: a standby promoted with this setting copied
  # would wait for a standby of its own that does not exist, and take no writes at all.
  as_postgres "$BIN/psql" -h 127.0.0.1 -p "$PRIMARY_PORT" -U postgres -qAt \
    -c "ALTER SYSTEM SET synchronous_commit = on" \
    -c "ALTER SYSTEM SET synchronous_standby_names = '$STANDBY_NAME'" -c "SELECT pg_reload_conf()" >/dev/null
  # Ready when the primary counts the standby as synchronous: before that, commits would wait.
  for _ in $(seq 1 100); do
    state=$(as_postgres "$BIN/psql" -h 127.0.0.1 -p "$PRIMARY_PORT" -U postgres -Atc \
      "SELECT sync_state FROM pg_stat_replication WHERE application_name = '$STANDBY_NAME'" 2>/dev/null || true)
    [ "$state" = sync ] && break
    sleep 0.1
  done
  [ "$state" = sync ] || { echo "the standby did not become synchronous" >&2; exit 1; }
  local extra
  for extra in $(seq 2 "$STANDBYS"); do
    as_postgres "$BIN/pg_basebackup" -D "$DIR/standby-$extra" -R -X stream \
      -d "host=127.0.0.1 port=$PRIMARY_PORT user=postgres application_name=${STANDBY_NAME}_$extra" >/dev/null
    start_cluster "$DIR/standby-$extra" "$((PRIMARY_PORT + extra))"
  done
  trap - EXIT
  echo "postgres://postgres@127.0.0.1:$PRIMARY_PORT,127.0.0.1:$STANDBY_PORT/postgres?sslmode=disable&target_session_attrs=read-write"
}

kill_primary() {
  kill -9 "$(head -1 "$DIR/primary/postmaster.pid")"
}

promote() {
  as_postgres "$BIN/pg_ctl" -D "$DIR/standby" -w -t 60 promote >/dev/null
}

stop() {
  for data in "$DIR/primary" "$DIR"/standby*; do
    [ -d "$data" ] || continue
    if [ -f "$data/postmaster.pid" ]; then
      as_postgres "$BIN/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
  done
  rm -rf "$DIR"
  [ "${1:-}" = quiet ] || echo "stopped the clusters on ports $PRIMARY_PORT and $STANDBY_PORT"
}

case "${1:-}" in
  start) start ;;
  kill-primary) kill_primary ;;
  promote) promote ;;
  stop) stop ;;
  *) echo "usage: scripts/postgres-standby.sh start|kill-primary|promote|stop" >&2; exit 2 ;;
esac
