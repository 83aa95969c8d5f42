#!/usr/bin/env bash
# Moving one large asset through a release server: its resident memory idle, at its peak
# while the file is uploaded and while it is downloaded (sampled every 20 ms), and how fast
# each went, against copying the same file on this disk (the baseline, same run). Issue 18:
# neither direction holds the file in memory, so the peaks stay within a few MB of idle.
#
#   Benchmarks/assets.sh [megabytes=50]
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
MEGABYTES=${1:-50}

build_release
start_server normal
FILE="$DATA/asset.bin"
head -c "$((MEGABYTES * 1048576))" /dev/urandom > "$FILE"

rss() { awk '/VmRSS/ {print $2}' "/proc/$PID/status"; }
# Samples the server's RSS (KiB) into $1 every 20 ms until $2 exists.
sample() { while [ ! -e "$2" ]; do rss >> "$1"; sleep 0.02; done; }
peak() { sort -n "$1" | tail -1; }
seconds() { python3 -c 'import sys,time; print(time.time())'; }

# Warm up the paths once with a small file, so the idle figure includes what any request loads.
small=$(curl -s -X POST "$URL/database/1/$C/development/private/assets/upload?ckAPIToken=$TOKEN&ckWebAuthToken=$WEB" \
  -d '{"tokens":[{"recordType":"Photo","fieldName":"image"}]}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"][0]["url"])')
curl -s -X POST "$small" --data-binary "small" >/dev/null
sleep 1
IDLE=$(rss)

UPLOAD_URL=$(curl -s -X POST "$URL/database/1/$C/development/private/assets/upload?ckAPIToken=$TOKEN&ckWebAuthToken=$WEB" \
  -d '{"tokens":[{"recordType":"Photo","fieldName":"image"}]}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"][0]["url"])')
sample "$DATA/up.rss" "$DATA/up.done" &
SAMPLER=$!
start=$(seconds)
curl -s -X POST "$UPLOAD_URL" -H 'Content-Type: application/octet-stream' --data-binary "@$FILE" > "$DATA/single.json"
up_seconds=$(python3 -c "print($(seconds) - $start)")
touch "$DATA/up.done"; wait "$SAMPLER"  # not the server, also a child

RECORD=$(python3 -c 'import json,sys; f=json.load(open(sys.argv[1]))["singleFile"]; print(json.dumps({"operations":[{"operationType":"create","record":{"recordType":"Photo","recordName":"big","fields":{"image":{"value":f}}}}]}))' "$DATA/single.json")
DOWNLOAD_URL=$(curl -s -X POST "$URL/database/1/$C/development/private/records/modify?ckAPIToken=$TOKEN&ckWebAuthToken=$WEB" -d "$RECORD" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["records"][0]["fields"]["image"]["value"]["downloadURL"])')
sample "$DATA/down.rss" "$DATA/down.done" &
SAMPLER=$!
start=$(seconds)
curl -s "${DOWNLOAD_URL//\$\{f\}/asset.bin}" -o "$DATA/back.bin"
down_seconds=$(python3 -c "print($(seconds) - $start)")
touch "$DATA/down.done"; wait "$SAMPLER"
cmp -s "$FILE" "$DATA/back.bin" || { echo "the download differs from the upload"; exit 1; }

start=$(seconds)
cp "$FILE" "$DATA/copy.bin"; sync "$DATA/copy.bin"
copy_seconds=$(python3 -c "print($(seconds) - $start)")

python3 - "$MEGABYTES" "$IDLE" "$(peak "$DATA/up.rss")" "$(peak "$DATA/down.rss")" "$up_seconds" "$down_seconds" "$copy_seconds" <<'PY'
import sys
mb, idle, up, down, ups, downs, copys = int(sys.argv[1]), *map(float, sys.argv[2:])
print(f"{mb} MB asset, release server")
print(f"RSS idle {idle/1024:.1f} MB; peak while uploading {up/1024:.1f} MB (+{(up-idle)/1024:.1f}); peak while downloading {down/1024:.1f} MB (+{(down-idle)/1024:.1f})")
print(f"upload {ups:.2f} s ({mb/ups:.0f} MB/s), download {downs:.2f} s ({mb/downs:.0f} MB/s), cp+sync on this disk {copys:.2f} s ({mb/copys:.0f} MB/s)")
print(f"upload / cp+sync = {ups/copys:.2f}, download / cp+sync = {downs/copys:.2f}")
PY
stop_server
