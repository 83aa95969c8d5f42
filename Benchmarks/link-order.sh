#!/usr/bin/env bash
# Writes scripts/link-order.txt, the order the release link lays the server's functions out in
# (Package.swift, `residentLinking`; docs/operations.md, "The release binary").
#
#   Benchmarks/link-order.sh [seconds-per-cell=3]
#
# The kernel keeps a binary's code resident a page at a time, in runs around each page a process
# touches. Laid out in the order the compiler emitted them, the functions a server runs are
# spread across its whole 42 MB of code, and setting it up and serving a few requests kept
# 19.7 MB of it resident. Laid out together they fill a few megabytes (docs/benchmarks.md, "The link
# order"). Which functions run is measured, not guessed: this release build is started under
# valgrind's callgrind, set up the way every benchmark sets its server up (Benchmarks/lib.sh's
# start_preloaded: sign-ins, a schema deployed, a zone, records saved), then asked each wrk cell's
# request at one and at eight connections, then left idle a few seconds for its timers. Every
# function of the binary that executed is listed, those with the most instructions first, so
# the hot paths share pages too.
#
# Functions with no symbol cannot be listed: LLVM's merged bodies and the compiler's private
# helpers (a closure context's destroyer). scripts/private-functions.ld gathers all of them
# instead (docs/benchmarks.md, "The link order").
#
# Run it again when the code has moved a lot: a function the list does not name is laid out
# after those it does, where it was (LLD ignores names that no longer exist). It takes a minute
# or two after the release build it starts with.
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh

SECONDS_PER_CELL=${1:-3}
require_wrk
command -v valgrind >/dev/null || { apt-get update -qq && apt-get install -y -qq valgrind; }
build_release >/dev/null

WORK=$(mktemp -d /tmp/nimbus-link-order.XXXXXX)
# Valgrind 3.19 cannot read the DWARF 5 Swift writes; the symbol table is all it needs.
strip -g -o "$WORK/nimbus" "$BIN/nimbus"
# Only `serve` runs under callgrind; the setup's CLI commands run as they are.
cat > "$WORK/nimbus-under-callgrind" <<WRAPPER
#!/usr/bin/env bash
if [ "\$1" = serve ] && [ "\${2:-}" != --help ]; then
  exec valgrind --tool=callgrind --demangle=no --callgrind-out-file="$WORK/callgrind.out" "$WORK/nimbus" "\$@"
fi
exec "$WORK/nimbus" "\$@"
WRAPPER
chmod +x "$WORK/nimbus-under-callgrind"

RECORDS=200 START_SECONDS=300 start_preloaded nimbus "$WORK/nimbus-under-callgrind"
for kind in health fetch list create update batch feed; do
  for connections in 1 8; do
    cell_target "$kind:$connections"
    wrk -t"$threads" -c"$connections" -d"${SECONDS_PER_CELL}s" "${script[@]}" "$url" >/dev/null
  done
done
sleep 5
# The server's exit writes callgrind's counts.
stop_preloaded
trap - EXIT

python3 - "$WORK/callgrind.out" "$WORK/nimbus" "$(git rev-parse --short HEAD)" > scripts/link-order.txt <<'PY'
import re, sys
out, binary, commit = sys.argv[1], sys.argv[2], sys.argv[3]
# callgrind's format: `ob=`/`fn=` name the object and function the cost lines after them belong
# to, `(id) name` the first time and `(id)` after; `cob=`/`cfn=` share those tables. The cost
# line after a `calls=` line is that call's inclusive cost, not the caller's own.
objects, functions, own = {}, {}, {}
obj = fn = None
after_call = False
def named(table, value):
    m = re.match(r"\((\d+)\)(?: (.*))?$", value)
    if not m: return value
    if m.group(2) is not None: table[m.group(1)] = m.group(2)
    return table[m.group(1)]
for line in open(out, errors="replace"):
    line = line.rstrip("\n")
    if not line: continue
    head = line[0]
    if head.isdigit() or head in "+-*":
        parts = line.split()
        if after_call:
            after_call = False
        elif fn is not None and len(parts) > 1 and obj == binary:
            own[fn] = own.get(fn, 0) + int(parts[-1])
        continue
    key, _, value = line.partition("=")
    if key == "ob": obj = named(objects, value)
    elif key == "cob": named(objects, value)
    elif key == "fn": fn = re.sub(r"'\d+$", "", named(functions, value))
    elif key == "cfn": named(functions, value)
    elif key == "calls": after_call = True
names = [name for name, cost in sorted(own.items(), key=lambda item: -item[1]) if not name.startswith("0x")]
print(f"# The release link's function order (Benchmarks/link-order.sh at {commit}): the {len(names)} functions")
print("# the server ran while set up and asked each benchmark request, most instructions first.")
print("\n".join(names))
PY
echo "scripts/link-order.txt: $(grep -vc '^#' scripts/link-order.txt) functions" >&2
rm -rf "$WORK"
