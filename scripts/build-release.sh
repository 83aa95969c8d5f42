#!/usr/bin/env bash
# Builds the release server the way it is deployed and benchmarked: `swift build -c release`,
# with Swift's own libraries (the runtime, concurrency, Foundation, Dispatch) linked into the
# binary where the toolchain carries them as static archives (swift.org's Linux toolchains do).
# A retain, a release or a runtime call then goes straight to its code instead of through the
# dynamic linker's tables: against the same source linked dynamically, fetches by ID at 64
# connections measured 1.03-1.21x (9% less CPU a request) and filtered lists 1.01-1.08x, three
# runs each (docs/benchmarks.md, "Swift's libraries linked in"), and the binary needs no Swift
# library beside it, only the C ones every Linux has.
#
#   scripts/build-release.sh [product…]     # default: nimbus
#
# Every release build of this checkout goes through here (Benchmarks/lib.sh too): a build with
# and one without the flag share `.build/release`, and each would rebuild everything the other
# built.
set -euo pipefail
cd "$(dirname "$0")/.."

flags=(-c release)
if [ "$(uname)" = Linux ]; then
  swiftc=$(command -v swiftc || true)
  if [ -n "$swiftc" ] && [ -e "$(dirname "$(readlink -f "$swiftc")")/../lib/swift_static/linux/libswiftCore.a" ]; then
    flags+=(--static-swift-stdlib)
  else
    echo "build-release.sh: this toolchain has no static Swift libraries; linking them dynamically" >&2
  fi
  # Each function in a section of its own, every package's, Swift's and C's: the link can then
  # lay them out in scripts/link-order.txt's order (Package.swift, `residentLinking`), which
  # puts the code a server runs on a few megabytes of pages instead of spread over all 42 MB of it.
  # (`-function-sections` given to swiftc itself crashed SwiftPM's incremental builds; as a
  # frontend flag it does not.)
  flags+=(-Xswiftc -Xfrontend -Xswiftc -function-sections -Xcc -ffunction-sections)
fi

# SwiftPM compiles a source again when it changes, not when the flags do: objects built with
# other flags would stay. The flags of the last build are kept, and on a change every object
# is built again.
marker=.build/release-build-flags
bin=$(swift build -c release --show-bin-path)
if [ -d "$bin" ] && [ "$(cat "$marker" 2>/dev/null)" != "${flags[*]}" ]; then
  echo "build-release.sh: the release flags changed; compiling every object again" >&2
  find "$bin" -name '*.o' -delete
fi

products=("$@")
[ ${#products[@]} -gt 0 ] || products=(nimbus)

# Linked statically, Foundation's networking part (which NimbusKit, and so the load generator,
# uses; the server does not) needs libcurl's development link, which a fresh Debian lacks.
if [[ " ${flags[*]} " == *" --static-swift-stdlib "* && " ${products[*]} " != " nimbus " ]] &&
  ! compgen -G "/usr/lib/*/libcurl.so" >/dev/null && ! compgen -G "/usr/lib*/libcurl.so" >/dev/null; then
  if command -v apt-get >/dev/null; then
    # A fresh machine has no package lists yet.
    apt-get update -qq && apt-get install -y -qq libcurl4-openssl-dev >/dev/null
  else
    echo "build-release.sh: install libcurl's development files (Debian: libcurl4-openssl-dev)" >&2
    exit 1
  fi
fi
# Nor does it link again when only the link's inputs that are not objects changed: the order
# (Benchmarks/link-order.sh writes it) and the linker script fragment.
for input in scripts/link-order.txt scripts/private-functions.ld; do
  if [ -e "$bin/nimbus" ] && [ "$input" -nt "$bin/nimbus" ]; then rm -f "$bin/nimbus"; fi
done
# The server is linked against jemalloc where it is installed (Package.swift, `serverLinking`;
# docs/operations.md, "The memory allocator"): on this project's two cores a build on glibc's
# malloc served half the filtered lists under wrk (4,899 against 9,271 a second, the same
# source, the seventy-first session). A fresh Debian has none, so it is installed here.
jemalloc_installed() {
  compgen -G "/usr/lib/*/libjemalloc.so" >/dev/null || compgen -G "/usr/lib*/libjemalloc.so" >/dev/null ||
    [ -e /usr/local/lib/libjemalloc.so ]
}
if [ "$(uname)" = Linux ] && ! jemalloc_installed; then
  if command -v apt-get >/dev/null; then
    apt-get update -qq && apt-get install -y -qq libjemalloc-dev >/dev/null
  else
    echo "build-release.sh: jemalloc is not installed; the server will run on the C library's malloc" >&2
  fi
fi
for product in "${products[@]}"; do
  swift build "${flags[@]}" --product "$product"
done
# Installed after this checkout's first build, jemalloc is linked only once SwiftPM evaluates
# the manifest again: it keeps that evaluation and the build plan, so both go and the server is
# linked again.
if [ "$(uname)" = Linux ] && jemalloc_installed && [[ " ${products[*]} " == *" nimbus "* ]] && ! ldd "$bin/nimbus" | grep -q jemalloc; then
  echo "build-release.sh: jemalloc is installed and $bin/nimbus does not link it: evaluating the manifest again" >&2
  rm -rf ~/.cache/org.swift.swiftpm/manifests .build/release.yaml
  swift build "${flags[@]}" --product nimbus
  if ! ldd "$bin/nimbus" | grep -q jemalloc; then
    echo "build-release.sh: $bin/nimbus still does not link jemalloc" >&2
    exit 1
  fi
fi
mkdir -p .build && echo "${flags[*]}" > "$marker"
