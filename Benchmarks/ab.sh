#!/usr/bin/env bash
# Before and after a change, in one run: this build's server against another worktree's
# release build (e.g. the previous commit: `git worktree add ../base HEAD~1` and
# `scripts/build-release.sh` there, so both are linked alike), alternating A B A B so the machine's drift
# falls on both. The same load generator (this build's NimbusBench) drives both, Nimbus only,
# production schema, synchronous=NORMAL; the rows whose names contain ONLY (default: the
# single-record creates, the batch and fetch by ID). Prints each pass's table, then medians.
#
#   Benchmarks/ab.sh OTHER-WORKTREE-OR-BINARY [seconds] [rounds] [records] [only]
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
OTHER=$(other_binary "$1")
SECONDS_PER=${2:-5}
ROUNDS=${3:-3}
RECORDS=${4:-100000}
ONLY=${5:-record}
[ -x "$OTHER" ] || { echo "no release build at $OTHER" >&2; exit 1; }
build_release
mkdir -p bench-results
trap 'stop_server 2>/dev/null || true' EXIT

pass() {  # pass LABEL NIMBUS-BINARY SERVE-FLAGS
  NIMBUS=$2 SERVE_FLAGS=$3 start_server normal production
  "$BIN/NimbusBench" --scenario compare --url "$URL" --container "$C" --api-token "$TOKEN" --web-auth-token "$WEB" \
    --environment "$ENVIRONMENT" --raw-dir "$DATA" --seconds "$SECONDS_PER" --rounds "$ROUNDS" --sync normal \
    --list-records "$RECORDS" --only "$ONLY" --output "bench-results/ab-$1.json" | grep '^| [a-z0-9]' | grep -v '^| scenario'
  stop_server
  unset NIMBUS
}

# The flags a build understands that take its protections off for one client at full speed:
# the per-address connection cap and request budgets (an older build may lack either).
flags_for() {
  local help flags=""
  help=$("$1" serve --help 2>&1)
  grep -q -- --connections-per-client <<<"$help" && flags="$flags --connections-per-client 0"
  grep -q -- --request-limits <<<"$help" && flags="$flags --request-limits off"
  echo "$flags"
}
for round in 1 2; do
  echo "== before ($OTHER), pass $round"; pass "before-$round" "$OTHER" "$(flags_for "$OTHER")"
  echo "== after ($BIN/nimbus), pass $round"; pass "after-$round" "$BIN/nimbus" "$(flags_for "$BIN/nimbus")"
done
python3 - <<'PY'
import json, statistics
def cells(name):
    data = json.load(open(f"bench-results/ab-{name}.json"))
    rows = data["rows"] if isinstance(data, dict) and "rows" in data else data
    return {row["scenario"]: row["nimbus"]["perSecond"] for row in rows if row.get("nimbus")}
before = [cells(f"before-{r}") for r in (1, 2)]
after = [cells(f"after-{r}") for r in (1, 2)]
print("\n| scenario | before (median of 2 passes) | after | after / before |\n|---|---|---|---|")
for scenario in before[0]:
    b = statistics.median(p[scenario] for p in before)
    a = statistics.median(p[scenario] for p in after)
    print(f"| {scenario} | {b:.0f} | {a:.0f} | {a / b:.3f} |")
PY
