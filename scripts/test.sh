#!/usr/bin/env bash
# The whole test suite. Builds everything (the crash test runs the built `nimbus` binary) while
# it installs what the tests need (Debian and PyPI packages), starts a private PostgreSQL
# cluster, then runs the tests on both drivers: the whole suite on SQLite, then the server
# suites that reach storage and NimbusKit's sync engines again on PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
# The build needs Debian's SQLite headers (GRDB), and links the server against jemalloc where it
# is installed (Package.swift; without it the server keeps glibc's malloc, and the test that
# reads the server's first lines fails).
buildPackages=()
dpkg -s libsqlite3-dev >/dev/null 2>&1 || buildPackages+=(libsqlite3-dev)
dpkg -s libjemalloc-dev >/dev/null 2>&1 || buildPackages+=(libjemalloc-dev)
if [ ${#buildPackages[@]} -gt 0 ]; then
  $sudo apt-get update -qq && $sudo apt-get install -y -qq "${buildPackages[@]}"
fi

# What the tests need is installed while the build runs: downloads and unpacking, beside a build
# that holds both cores for most of an hour, instead of minutes before it on a clean machine.
installTestTools() {
  local missing=()
  # openssl: the APNs stand-in makes its certificate with it.
  command -v openssl >/dev/null 2>&1 || missing+=(openssl)
  # Python's cryptography: the independent signer of the server-to-server key tests
  # (scripts/s2s-sign.py). From PyPI when this python3 has pip, else Debian's package.
  if ! python3 -c 'import cryptography' >/dev/null 2>&1; then
    python3 -m pip install -q cryptography >/dev/null 2>&1 || missing+=(python3-cryptography)
  fi
  # Headless Chromium and its driver: the browser tests (Tests/Scripts/*_flow.py).
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
  # zbar reads back the QR code the dashboard draws for authenticator apps.
  command -v zbarimg >/dev/null 2>&1 || missing+=(zbar-tools)
  if [ ${#missing[@]} -gt 0 ]; then
    $sudo apt-get update -qq && $sudo apt-get install -y -qq "${missing[@]}"
  fi
  # PostgreSQL 15 for the private cluster (scripts/postgres.sh).
  scripts/postgres.sh install
  # selenium drives that Chromium (PyPI; the version machine-notes names).
  python3 -c 'import selenium' >/dev/null 2>&1 || python3 -m pip install -q selenium==4.51.0 >/dev/null 2>&1
  # moto in server mode: the S3 the S3 blob store's tests talk to (Tests/NimbusTestSupport/MotoServer.swift).
  command -v moto_server >/dev/null 2>&1 || python3 -m pip install -q 'moto[server]' >/dev/null 2>&1
  # Prometheus' own text parser reads /metrics in MetricsTests.
  python3 -c 'import prometheus_client' >/dev/null 2>&1 || python3 -m pip install -q prometheus_client >/dev/null 2>&1
}
installLog=$(mktemp)
installTestTools >"$installLog" 2>&1 &
installer=$!

# CI builds once, from nothing, for these passes alone: no debugger reads its debug info, and
# producing it is part of a cold build's time (a module of this package compiled in 38-44 s
# without debug info or an index, 45-55 s with; the three binaries linked are some 700 MB
# with it). The index stays: on Linux, SwiftPM finds the test bundle's tests through it (with
# --disable-index-store the build stopped at test discovery, 2026-11-29). A developer's build
# keeps debug info, and this script then reuses that build instead of compiling everything
# again with other flags.
build=(--build-tests)
if [ "${CI:-}" = true ]; then
  build+=(-Xswiftc -gnone -Xcc -g0)
fi
# Each line of the build's output carries the seconds since the build began, so a slow run's
# log shows which modules took its time (a cold build here is most of an hour).
buildStarted=$SECONDS
swift build "${build[@]}" 2>&1 | while IFS= read -r line; do printf '[%5d s] %s\n' $((SECONDS - buildStarted)) "$line"; done
installed=0
wait "$installer" || installed=$?
if [ "$installed" != 0 ]; then
  cat "$installLog" >&2
  echo "installing what the tests need failed (exit $installed)" >&2
  exit "$installed"
fi
# NimbusKit's Apple-only code, type-checked against declarations of the Apple APIs it calls
# (seconds; docs/sdk.md, "Apple platforms").
scripts/apple-api-check.sh

# A crash in a test process prints the crashed thread only, with fast symbols: the full report
# (seventy threads symbolicated against the debug test binary's DWARF) once ran past CI's whole
# time budget.
export SWIFT_BACKTRACE="${SWIFT_BACKTRACE:-enable=yes,threads=crashed,registers=none,images=none,symbolicate=fast}"
# Every pass runs at most eight tests at a time. Unbounded, Swift Testing started every test of
# the first pass at once on two cores: on a slow machine (CI, 2026-11-29) thirteen tests missed
# their own deadlines (WebSocket frames within 10 s, a driver's 1 s) though each passes alone,
# and the pass took 9 min. Bounded at eight, the same pass took 7 min and none missed.
width=(--experimental-maximum-parallelization-width 8)
# The suites that time things, at most four: at eight, on PostgreSQL, two WebSocket frames
# missed their 5 s and a push writer its bound (2026-11-29); at four all passed, in 149 s
# instead of 165.
timedWidth=(--experimental-maximum-parallelization-width 4)
# Each pass has a time limit, so a stalled pass fails the run in minutes instead of taking all of
# CI's 90. `timeout` signals the whole process group: swift-test, the test process, and the
# servers and programs it started. The limits are about four times a pass's time here.
# A pass runs the built test binary itself where it can (Linux): `swift test --skip-build` first
# loads the package graph, and whenever the environment differs from its last run (as
# NIMBUS_TEST_STORAGE does between passes) it compiles every dependency's manifest again: 80 s
# a pass on a slow machine, against 5 s for the tests of a small suite. Elsewhere (macOS runs
# Swift Testing through SwiftPM's helper), through `swift test`.
if [ "$(uname)" = Linux ]; then
  # .build/debug is SwiftPM's link to this build's folder (asking `swift build --show-bin-path`
  # loads the package graph again: a minute on a slow machine).
  tests=(.build/debug/nimbusPackageTests.xctest --testing-library swift-testing)
else
  tests=(swift test --skip-build)
fi
export NO_COLOR=1
pass() {
  local limit=$1
  shift
  local started=$SECONDS
  echo "== pass: $* (limit ${limit})"
  local status=0
  timeout --kill-after=30s "$limit" "${tests[@]}" "$@" || status=$?
  echo "== pass took $((SECONDS - started)) s: $*"
  if [ "$status" = 124 ] || [ "$status" = 137 ]; then echo "== pass stopped at its ${limit} limit: $*" >&2; fi
  return "$status"
}

# Everything the tests write to the temporary directory (test servers' data directories, sync
# journals, signing keys, browser profiles) goes to one folder for this run, removed on the way
# out with the cluster. Tests clean up after themselves when they pass, but not every one that
# fails or is stopped at its limit can: a developer's /tmp gathered 500 MB and over a thousand
# folders in three days (2026-11-30). Made before the cluster starts, so nothing can fail
# between the cluster's start and the trap that stops it.
export TMPDIR
TMPDIR=$(mktemp -d "${TMPDIR:-/tmp}/nimbus-tests.XXXXXX")
# The PostgreSQL driver's cases run on a private cluster on loopback, stopped on the way out
# whatever happens (scripts/postgres.sh).
export NIMBUS_TEST_POSTGRES
NIMBUS_TEST_POSTGRES=$(scripts/postgres.sh start)
trap 'scripts/postgres.sh stop >/dev/null; rm -rf "$TMPDIR"' EXIT
# The tests that start other programs (python3 signing, Chromium, moto) run on their own, last: in
# the parallel passes the test process holds over a thousand descriptors and threads, and
# starting programs from it stalled it (no worker threads left). Every test starts programs as
# ChildProcess (posix_spawn; Foundation's Process.run overran a buffer of descriptor numbers).
# Not beside another pass either: alone, they hold both cores (two seconds idle in the first
# four minutes, 2026-11-29), and every pass here is bound by the processor, not by waiting: in
# six minutes side by side, the first pass and the PostgreSQL server pass finished fewer tests
# together (167) than the first pass alone does in that time (about 390).
external='SignInPageTests|DashboardPageTests|SharePageTests|ServerToServerTests|S3BlobStoreTests'
# The edge's body tests send megabytes over raw sockets; beside the whole suite they made other
# suites' request deadlines (a 5 s device timeout) miss. The edge's timing tests (an upload
# trickling ten bytes every 0.3 s) missed their own beside it. Each runs on its own, right after.
bodies='RequestBodyTests'
edge='HTTPEdgeTests'
# CKSyncEngine's device tests make many requests each against NimbusKit's request deadlines;
# beside the whole suite one of them missed a deadline (2026-11-26). On their own, as on
# PostgreSQL below, they take seconds.
engines='SyncEngineKitTests|SyncEngineDeviceTests'
# The operations suites start `nimbus` processes of their own (backups under eight writers, a
# server backing up every second, one exporting traces) while other suites' servers answer
# NimbusKit's 5 s deadlines; beside the whole suite, CI runs twice saw those deadlines missed
# (2026-11-26). On their own they take seconds.
# The command-line suites start a `nimbus` process per verb (schema import/export/check,
# operators and users verbs, data-directory checks): beside the whole suite those launches
# starved the private PostgreSQL cluster and two timed suites (2026-11-27), so they go with them.
operations='BackupTests|ScheduledBackupTests|TracingTests|TimeTravelCommandTests|SchemaLanguageTests|OperatorCommandTests|DatabaseOptionTests'
# The suites that time things, and the PostgreSQL driver's own (its statements have a 5 s
# deadline), beside the whole suite: on a machine half as fast as the usual one (2026-11-27) a
# push deadline's writes took 5.5 s of their 5 and the private cluster answered no migration
# within 5 s; on their own they take seconds.
timedMain='CrashRecoveryTests|AssetCrashTests|MultiNodeTests|PushDeliveryTests|PostgresDriverTests|PostgresFailoverTests|PostgresReplicaTests'
# NimbusTesting's suites (docs/testing.md) run their own servers with devices that wait for pushes
# and for CKSyncEngine's automatic fetches: on their own, as the engine suites. Their servers are
# always SQLite (an app's tests get no other), so they run once, not again on units or PostgreSQL.
testing='FaultKitTests|NoteStoreTests|SyncDoctorTests'
pass 25m "${width[@]}" --skip "$external|$bodies|$edge|$engines|$operations|$timedMain|$testing"
pass 15m "${width[@]}" --filter "$testing"
pass 15m "${timedWidth[@]}" --filter "$timedMain"
pass 15m "${width[@]}" --filter "$operations"
pass 15m "${width[@]}" --filter "$bodies"
pass 15m "${width[@]}" --filter "$edge"
pass 15m "${width[@]}" --filter "$engines"
# The server and NimbusKit suites once more on PostgreSQL: every test server gets a database of
# its own on the private cluster (NIMBUS_TEST_STORAGE=postgres), served as units of work that
# load what they miss, run again and apply with checks, and every write's unit decided twice to
# catch one that reads the clock or a random source (`checksPurity`). Same build, no second
# compile. Until 2026-11-29 they ran a third time on SQLite seen over round trips
# (NIMBUS_TEST_STORAGE=units, still there for a machine without PostgreSQL): the same driver as
# here over a test-only engine, nine minutes of CI's ninety on a slow machine. The storage
# suites above still run that engine (StorageConformanceTests, UnitPurityTests, UnitOfWorkTests).
# The suites that time things (kills mid-write, two nodes, push deadlines, WebSocket frames) run
# on their own afterwards: beside the rest of the suite, PostgreSQL and the test servers share
# two cores, and their clocks measure that. NotificationTests joined them (2026-11-27): on a
# machine half as fast, four of its WebSocket frames missed their 5 s beside the server suite.
timed='CrashRecoveryTests|AssetCrashTests|MultiNodeTests|PushDeliveryTests|NotificationTests'
# Every server and NimbusKit suite runs on PostgreSQL too (issue 35). Until 2026-12-02 the suites
# whose subject sits above storage (the edge's bodies and timing, the router, /metrics, alerts),
# the console's and the sign-in edge's, the CLI's verbs, the browser flows and NimbusKit's suites
# but its sync engines were left to SQLite for CI's time on a slow machine; together they add
# about three minutes here, and the dashboard's flow found two faults on PostgreSQL the first time
# it ran there (a message read before the answer replaced it, and a check that named SQLite).
# The server suite's tests mostly wait for PostgreSQL's answers here, so sixteen run at a time
# (at eight the pass took 796 s on a slow machine). Unbounded, Swift Testing started over a
# hundred test servers at once, each with its pools and LISTEN connection, and the cluster
# reached its 1,000 connections (clients refused, requests past their deadlines; 2026-11-27).
# From here on the cluster logs every statement with its session's name, and after the last
# pass on PostgreSQL every statement a Nimbus node sent is checked for a Citus coordinator to
# route to one shard (issue 40; scripts/statement-routes.py, docs/scale-out.md "Citus routing").
read -r routeLog routeLogStart < <(scripts/postgres.sh log-statements)
NIMBUS_TEST_STORAGE=postgres pass 25m --experimental-maximum-parallelization-width 16 \
  --filter NimbusServerTests --skip "$timed|$external|$operations|$bodies|$edge"
NIMBUS_TEST_STORAGE=postgres pass 15m "${timedWidth[@]}" --filter "$timed"
NIMBUS_TEST_STORAGE=postgres pass 15m "${width[@]}" --filter "$operations"
NIMBUS_TEST_STORAGE=postgres pass 15m "${width[@]}" --filter "$bodies"
NIMBUS_TEST_STORAGE=postgres pass 15m "${width[@]}" --filter "$edge"
# NimbusKit on PostgreSQL: what CKSyncEngine sees of conflicts and of zones or records deleted
# elsewhere is what the driver wrote. The sync engines on their own, as beside the other suites
# their devices' 5 s request deadlines missed; NimbusTesting's suites not again (their servers are
# always SQLite, see above).
NIMBUS_TEST_STORAGE=postgres pass 15m "${width[@]}" --filter 'NimbusKitTests|NimbusKitSeedSamples' --skip "$engines|$testing"
NIMBUS_TEST_STORAGE=postgres pass 15m "${width[@]}" --filter "NimbusKitTests.($engines)"
pass 15m "${width[@]}" --filter "$external"
# The browser flows, the server-to-server signer and S3 on PostgreSQL too: what the dashboard
# shows (where the data is) and what its pages read back is the store's.
NIMBUS_TEST_STORAGE=postgres pass 15m "${width[@]}" --filter "$external"
echo "== statement routing: every statement the PostgreSQL passes sent, as a Citus coordinator would route it"
python3 scripts/statement-routes.py "$routeLog" --from "$routeLogStart"
