#!/usr/bin/env bash
# The whole test suite. Installs what the tests need (Debian packages),
# builds everything (the crash test runs the built `nimbus` binary), then runs the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian's SQLite headers (GRDB) and openssl (the APNs stand-in makes its certificate with it).
missing=()
dpkg -s libsqlite3-dev >/dev/null 2>&1 || missing+=(libsqlite3-dev)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq "${missing[@]}"
fi

swift build --build-tests
swift test --skip-build
