#!/usr/bin/env bash
# Runs Apple's CKSyncEngine sample's own tests (apple/sample-cloudkit-sync-engine,
# Tests/SyncTests.swift), unmodified, against a live Nimbus on loopback, through NimbusKit's
# environment variables. Not part of scripts/test.sh: the sample is Apple's code and is not
# in this repository; give the path of a checkout of it.
#
#   scripts/apple-samples/run-sync-engine.sh /path/to/sample-cloudkit-sync-engine [--storage postgres]
#
# Builds this folder's package (the sample's files linked into Sample/, shims for the Apple
# SDK's imports), starts `nimbus serve` (a release or debug build of this repository) on a
# fresh data directory, creates the sample's container, an API token and a user, runs the
# tests, and stops the server.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
sample="${1:?usage: run-sync-engine.sh SAMPLE_CHECKOUT [--storage postgres]}"
storage="${3:-sqlite}"
[[ "${2:-}" == "--storage" ]] || storage=sqlite
for file in SyncEngine/SyncedDatabase.swift SyncEngine/DataModel.swift SyncEngine/Logger.swift Tests/SyncTests.swift; do
  [[ -f "$sample/$file" ]] || { echo "no $file in $sample: not a checkout of apple/sample-cloudkit-sync-engine" >&2; exit 2; }
done

# The test target compiles the app's model with the tests, as the Xcode project's does.
# Copied afresh each run: new files are always compiled again (SwiftPM does not always see
# that NimbusKit's interface changed under files it did not touch).
rm -rf "$here/Sample" && mkdir -p "$here/Sample/SyncEngine"
for file in SyncEngine/SyncedDatabase.swift SyncEngine/DataModel.swift SyncEngine/Logger.swift Tests/SyncTests.swift; do
  cp "$sample/$file" "$here/Sample/SyncEngine/"
done

nimbus="${NIMBUS:-$root/.build/debug/nimbus}"
[[ -x "$nimbus" ]] || (cd "$root" && swift build --product nimbus)
(cd "$here" && swift build --build-tests)

data="$(mktemp -d /tmp/nimbus-apple-sample.XXXXXX)"
database=""
if [[ "$storage" == postgres ]]; then
  : "${NIMBUS_TEST_POSTGRES:?set NIMBUS_TEST_POSTGRES (scripts/postgres.sh start prints it)}"
  name="apple_sample_$$"
  psql "$NIMBUS_TEST_POSTGRES" -qc "CREATE DATABASE $name" >/dev/null
  database="${NIMBUS_TEST_POSTGRES/\/postgres\?//$name?}"
fi
args=(--data-dir "$data")
[[ -n "$database" ]] && args+=(--database "$database")
container="iCloud.com.apple.samples.cloudkit.SyncEngine"
"$nimbus" containers create "${args[@]}" --create "$container" >/dev/null
token="$("$nimbus" tokens create "${args[@]}" --container "$container")"
"$nimbus" users create "${args[@]}" sample-user --password "sample password 1" >/dev/null
"$nimbus" serve "${args[@]}" --port 0 --log-level notice >"$data/server.log" 2>&1 &
server=$!
cleanup() {
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  [[ -n "$database" ]] && psql "$NIMBUS_TEST_POSTGRES" -qc "DROP DATABASE IF EXISTS $name" >/dev/null 2>&1 || true
}
trap cleanup EXIT
for _ in $(seq 100); do grep -q "listening on" "$data/server.log" && break; sleep 0.1; done
url="$(grep -o 'http://[0-9.:]*' "$data/server.log" | head -1)"

cd "$here"
NIMBUS_SERVER_URL="$url" NIMBUS_API_TOKEN="$token" NIMBUS_CONTAINER="$container" \
  NIMBUS_USERNAME=sample-user NIMBUS_PASSWORD="sample password 1" \
  swift test --skip-build ${SAMPLE_TEST_FILTER:+--filter "$SAMPLE_TEST_FILTER"}
