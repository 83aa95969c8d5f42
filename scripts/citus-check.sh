#!/usr/bin/env bash
# Nimbus on a real Citus coordinator (issue 40; docs/scale-out.md, "Run on Citus"), by hand:
# Citus is in neither Debian nor PyPI, so CI cannot run this. Needs Citus built and installed
# into the PostgreSQL at $PG_BIN (citus.so in its library directory) and a release build.
#
#   scripts/citus-check.sh [records]
#   ALLOWED=FILE scripts/citus-check.sh   (another list of sweeps: with one left out, it fails)
#
# Starts a coordinator and one worker on loopback (ports 54350 and 54351, files under
# /tmp/nimbus-citus), migrates a database with a node, distributes it with the DDL in
# docs/scale-out.md (the block itself, so the page stays what was run), then serves the
# benchmark's preloaded data (Benchmarks/lib.sh) and sends fetches, filtered sorted lists and
# creates. Fails when a request failed, when the coordinator logged an error, or when it ran a
# statement on several shards that scripts/statement-routes.allowed does not list. Stops both
# clusters on the way out.
set -euo pipefail
cd "$(dirname "$0")/.."
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
DIR=/tmp/nimbus-citus
PORTS=(54350 54351)
RECORDS=${1:-3000}
[ -f "$("$PG_BIN/pg_config" --pkglibdir)/citus.so" ] || {
  echo "Citus is not installed for $PG_BIN (build it from its source for this PostgreSQL)" >&2
  exit 2
}
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
sql() { "$PG_BIN/psql" -h 127.0.0.1 -p "$1" -U postgres -d "$2" -v ON_ERROR_STOP=1 -qAt "${@:3}"; }
stop() {
  for port in "${PORTS[@]}"; do
    [ -f "$DIR/$port/data/postmaster.pid" ] && as_postgres "$PG_BIN/pg_ctl" -D "$DIR/$port/data" -m fast -w stop >/dev/null || true
  done
  rm -rf "$DIR"
}
stop
cleanUp() { stop_preloaded 2>/dev/null || true; stop; }
trap cleanUp EXIT
mkdir -p "$DIR"
[ "$(id -u)" = 0 ] && chown postgres:postgres "$DIR"
for port in "${PORTS[@]}"; do
  as_postgres mkdir -p "$DIR/$port"
  as_postgres "$PG_BIN/initdb" -D "$DIR/$port/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
  as_postgres "$PG_BIN/pg_ctl" -D "$DIR/$port/data" -l "$DIR/$port/server.log" -w -o "-p $port -k $DIR/$port \
    -c listen_addresses=127.0.0.1 -c shared_preload_libraries=citus -c citus.enable_unsafe_triggers=on \
    -c max_connections=300 -c fsync=off -c synchronous_commit=off -c log_min_error_statement=warning" start >/dev/null
  sql "$port" postgres -c "CREATE DATABASE nimbus"
  sql "$port" nimbus -c "CREATE EXTENSION citus"
done
sql "${PORTS[0]}" nimbus -c "SELECT citus_set_coordinator_host('127.0.0.1', ${PORTS[0]})" -c "SELECT citus_add_node('127.0.0.1', ${PORTS[1]})" >/dev/null
export NIMBUS_DATABASE="postgres://postgres@127.0.0.1:${PORTS[0]}/nimbus?sslmode=disable"

source Benchmarks/lib.sh
build_release
# A node migrates the database, then the distribution as docs/scale-out.md gives it.
"$BIN/nimbus" containers create iCloud.citus.migrate --data-dir "$DIR/migrate" --create >/dev/null
awk '/^```sql/ {inside = 1; next} /^```/ {inside = 0} inside' docs/scale-out.md > "$DIR/distribute.sql"
grep -q create_distributed_table "$DIR/distribute.sql" || { echo "no distribution DDL in docs/scale-out.md" >&2; exit 1; }
sql "${PORTS[0]}" nimbus -f "$DIR/distribute.sql" >/dev/null
sql "${PORTS[0]}" nimbus -c "ALTER SYSTEM SET citus.multi_task_query_log_level = 'warning'" -c "SELECT pg_reload_conf()" >/dev/null
start=$(wc -l <"$DIR/${PORTS[0]}/server.log")

PIDS=() DIRS=()
start_preloaded A
# lib.sh's start_preloaded sets its own EXIT trap (the server only): the clusters must go too.
trap cleanUp EXIT
failed=0
for kind in fetch list create; do
  out=$(RECORDS=$RECORDS wrk -t1 -c4 -d4s -s "Benchmarks/wrk/nimbus-$kind.lua" "$A_RECORDS/$(records_operation "$kind")?$A_AUTH")
  echo "$kind: $(grep -o 'Requests/sec: *[0-9.]*' <<<"$out")"
  if grep -q "Non-2xx" <<<"$out"; then echo "  $(grep Non-2xx <<<"$out")"; failed=1; fi
done
# Answers, not only statuses: CloudKit reports a record's failure inside a 200.
lookup=$(curl -s -X POST "$A_RECORDS/lookup?$A_AUTH" -d '{"zoneID":{"zoneName":"Bench"},"records":[{"recordName":"r7"}]}')
grep -q '"recordName":"r7","recordType":"Item"' <<<"$lookup" || { echo "lookup answered: $lookup"; failed=1; }
query=$(curl -s -X POST "$A_RECORDS/query?$A_AUTH" -d '{"zoneID":{"zoneName":"Bench"},"query":{"recordType":"Item",
  "filterBy":[{"fieldName":"category","comparator":"EQUALS","fieldValue":{"value":"c3"}}],"sortBy":[{"fieldName":"count"}]},"resultsLimit":2}')
grep -q '"recordName":"r3"' <<<"$query" || { echo "query answered: $query"; failed=1; }
stop_preloaded

# What the coordinator logged: errors, and statements run on several shards that are not listed sweeps.
python3 - "$DIR/${PORTS[0]}/server.log" "$start" "${ALLOWED:-scripts/statement-routes.allowed}" <<'PY' || failed=1
import importlib.util, sys
# The routing check's own folding and list of sweeps (scripts/statement-routes.py).
spec = importlib.util.spec_from_file_location("routes", "scripts/statement-routes.py")
routes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(routes)
folded = routes.folded
allowed = [pattern for pattern, _ in routes.allowed(sys.argv[3])]
lines = open(sys.argv[1], errors="replace").read().split("\n")[int(sys.argv[2]):]
problems, warned, index = [], False, 0
while index < len(lines):
    line = lines[index]
    if " ERROR: " in line:
        problems.append(line.split(" ERROR: ", 1)[1].strip())
    if "multi-task query about to be executed" in line:
        warned = True
    elif warned and "STATEMENT:" in line:
        text = line.split("STATEMENT:", 1)[1]
        while index + 1 < len(lines) and lines[index + 1][:1] in ("\t", " "):
            index += 1
            text += "\n" + lines[index]
        if not any(pattern.search(folded(text)) for pattern in allowed):
            problems.append("on several shards: " + folded(text)[:300])
        warned = False
    index += 1
for problem in sorted(set(problems)):
    print(problem)
sys.exit(1 if problems else 0)
PY
[ "$failed" = 0 ] && echo "Citus: every request answered, and every statement but the listed sweeps ran on one shard"
exit "$failed"
