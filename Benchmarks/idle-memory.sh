#!/usr/bin/env bash
# What an idle `nimbus serve` holds resident (issue 36's 30 MB), and where: each build is started
# on a fresh data directory ROUNDS times, the builds alternating, and read SECONDS after start
# from /proc/PID/status (VmRSS, its anonymous and file parts) and /proc/PID/smaps (resident
# kilobytes by mapping: the binary, Swift's libraries, the others, anonymous memory); then
# VmRSS again once it has answered six requests.
#
#   Benchmarks/idle-memory.sh [rounds=3] [seconds=8] [build…]
#
# A build is a nimbus binary, or a worktree or commit's checkout (its release build); with none,
# this repository's release build. The binaries should be in the page cache (each is read once
# first): the kernel maps code in 64 KB runs around each page a process touches, but only from
# pages already cached, so a binary read from disk for the first time shows less.
#
# Layout moves the figure: any code change shifts which 64 KB runs the start touches, a
# megabyte or two either way (docs/benchmarks.md, "Idle memory: libcurl gone, relocations
# packed"). Compare builds in one run, and trust differences larger than that.
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh

ROUNDS=${1:-3}
SECONDS_AFTER_START=${2:-8}
shift $(( $# > 2 ? 2 : $# ))
builds=()
if [ $# = 0 ]; then
  build_release >/dev/null
  builds=("$BIN/nimbus")
else
  for build in "$@"; do builds+=("$(other_binary "$build")"); done
fi
for binary in "${builds[@]}"; do cat "$binary" >/dev/null; done

# kB resident by mapping group, from smaps: "binary swift other anonymous".
by_mapping() {
  python3 - "$1" "$2" <<'PY'
import re, sys
pid, binary = sys.argv[1], sys.argv[2]
groups = {"binary": 0, "swift": 0, "other": 0, "anonymous": 0}
current = "anonymous"
for line in open(f"/proc/{pid}/smaps"):
    if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
        parts = line.split()
        path = parts[5] if len(parts) > 5 else ""
        if not path.startswith("/"): current = "anonymous"
        elif path == binary: current = "binary"
        elif "/lib/swift/" in path: current = "swift"
        else: current = "other"
    elif line.startswith("Rss:"):
        groups[current] += int(line.split()[1])
print(" ".join(f"{groups[k] / 1024:.1f}" for k in ("binary", "swift", "other", "anonymous")))
PY
}

printf '| build | round | VmRSS MB | anonymous MB | file MB | binary / Swift libraries / other libraries / anonymous mappings, MB | VmRSS after six requests, MB |\n|---|---|---|---|---|---|---|\n'
for round in $(seq 1 "$ROUNDS"); do
  for binary in "${builds[@]}"; do
    data=$(mktemp -d /tmp/nimbus-idle.XXXXXX)
    port=$(free_port)
    "$binary" serve --data-dir "$data/d" --port "$port" >"$data/log" 2>&1 &
    pid=$!
    trap 'kill "$pid" 2>/dev/null || true' EXIT
    sleep "$SECONDS_AFTER_START"
    if ! kill -0 "$pid" 2>/dev/null; then cat "$data/log" >&2; exit 1; fi
    read -r rss anon file < <(awk '/^VmRSS/ {r=$2} /^RssAnon/ {a=$2} /^RssFile/ {f=$2} END {printf "%.1f %.1f %.1f\n", r/1024, a/1024, f/1024}' "/proc/$pid/status")
    # smaps names the file the binary was mapped from, symbolic links resolved.
    groups=$(by_mapping "$pid" "$(readlink -f "$binary")")
    # Then a server that has answered its first requests (a build that gives the start's code
    # back reads the serving path's code in again): three health checks and three records
    # queries with the development token the log prints, read 2 s later.
    url="http://127.0.0.1:$port"
    token=$(awk '/^development API token:/ {print $4}' "$data/log")
    container=$(awk '/^container:/ {print $2}' "$data/log")
    for _ in 1 2 3; do
      curl -s -o /dev/null "$url/health"
      curl -s -o /dev/null -X POST -H 'Content-Type: application/json' -d '{"query":{"recordType":"Item"}}' \
        "$url/database/1/$container/development/public/records/query?ckAPIToken=$token"
    done
    sleep 2
    served=$(awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$pid/status")
    kill "$pid"; wait "$pid" 2>/dev/null || true
    rm -rf "$data"
    printf '| %s | %d | %s | %s | %s | %s | %s |\n' "$binary" "$round" "$rss" "$anon" "$file" "${groups// / \/ }" "$served"
  done
done
