#!/usr/bin/env bash
# SQL statements per request on the SQLite driver (StatementsBenchmark.swift): what the storage
# protocol asks of an engine, each a round trip if ported call for call to a networked one.
#
#   Benchmarks/statements.sh
set -euo pipefail
cd "$(dirname "$0")/.."
swift build --product NimbusBench
"$(swift build --show-bin-path)/NimbusBench" --scenario statements --raw-dir "${TMPDIR:-/tmp}"
