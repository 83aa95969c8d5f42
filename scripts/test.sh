#!/usr/bin/env bash
# The whole test suite. Installs what the tests need (Debian's SQLite headers for GRDB),
# builds everything (the crash test runs the built `nimbus` binary), then runs the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! dpkg -s libsqlite3-dev >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq libsqlite3-dev
  else
    sudo apt-get update -qq && sudo apt-get install -y -qq libsqlite3-dev
  fi
fi

swift build --build-tests
swift test --skip-build
