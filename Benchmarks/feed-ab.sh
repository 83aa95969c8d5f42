#!/usr/bin/env bash
# Before and after a change on the change feed: two release builds side by side, each preloaded
# with RECORDS records in the private zone "Bench" (lib.sh's start_preloaded), each asked for the
# whole zone's feed from no token in pages of 200 (CloudKit's page size) by one client,
# alternating A B A B. Prints each download's records per second and the server's CPU ticks
# (utime + stime from /proc), then medians. The client is Python's http.client with one
# keep-alive connection: its JSON parsing is in the figure, alike for both.
#
#   Benchmarks/feed-ab.sh BEFORE-BINARY [AFTER-BINARY=this build's] [rounds=5] [records=20000]
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
build_release
BEFORE=$(other_binary "$1")
AFTER=${2:-$BIN/nimbus}
ROUNDS=${3:-5}
export RECORDS=${4:-20000}
start_preloaded before "$BEFORE"
start_preloaded after "$AFTER"

# feed URL PID → "records per-second ticks"
feed() {
  local before after
  before=$(awk '{print $14 + $15}' "/proc/$2/stat")
  local line
  line=$(python3 - "$1" <<'PY'
import http.client, json, sys, time, urllib.parse
url = urllib.parse.urlsplit(sys.argv[1])
connection = http.client.HTTPConnection(url.hostname, url.port)
started, token, received = time.time(), None, 0
while True:
    zone = {"zoneID": {"zoneName": "Bench"}, "resultsLimit": 200}
    if token:
        zone["syncToken"] = token
    connection.request("POST", url.path + "?" + url.query, json.dumps({"zones": [zone]}), {"Content-Type": "application/json"})
    answer = json.loads(connection.getresponse().read())["zones"][0]
    received += len(answer["records"])
    token = answer["syncToken"]
    if not answer.get("moreComing"):
        break
print(received, round(received / (time.time() - started)))
PY
)
  after=$(awk '{print $14 + $15}' "/proc/$2/stat")
  echo "$line $((after - before))"
}

echo "change feed of $RECORDS records, pages of 200; before = $BEFORE, after = $AFTER"
RESULTS=()
for round in $(seq 1 "$ROUNDS"); do
  wait_idle
  read -r bn br bt <<<"$(feed "${before_RECORDS%/records}/changes/zone?${before_AUTH}" "$before_PID")"
  wait_idle
  read -r an ar at <<<"$(feed "${after_RECORDS%/records}/changes/zone?${after_AUTH}" "$after_PID")"
  [ "$bn" = "$RECORDS" ] && [ "$an" = "$RECORDS" ] || { echo "a feed missed records: $bn and $an of $RECORDS" >&2; exit 1; }
  RESULTS+=("$br,$bt,$ar,$at")
  echo "round $round: before $br records/s ($bt CPU ticks), after $ar records/s ($at CPU ticks)"
done
python3 - "${RESULTS[@]}" <<'PY'
import statistics, sys
rows = [[float(x) for x in arg.split(",")] for arg in sys.argv[1:]]
br, bt, ar, at = (statistics.median(column) for column in zip(*rows))
print(f"median: before {br:.0f} records/s, {bt:.0f} ticks; after {ar:.0f} records/s, {at:.0f} ticks")
print(f"after/before: throughput {ar / br:.3f}, server CPU {at / bt:.3f}")
PY
