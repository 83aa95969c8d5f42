#!/usr/bin/env bash
# Type-checks NimbusKit's Apple-only code on Linux (docs/sdk.md, "Apple platforms").
#
# NimbusKit's Apple-only paths sit behind `#if canImport(Security)`, `#if canImport(CoreLocation)`
# and `#if canImport(Darwin)`, so a Linux build never compiles them. This script declares the
# Apple APIs they call (scripts/apple-sdk-declarations/, written from Apple's documentation) as
# modules named as Apple names them, puts them on the compiler's search path (which makes
# `canImport(Security)` and `canImport(CoreLocation)` true) and type-checks the whole of NimbusKit
# with the same flags the build used, plus NIMBUS_APPLE_API_CHECK for the one file that reads
# Foundation's predicate classes (swift-corelibs-foundation marks those unavailable). A wrong
# signature, a missing conversion or a use of an API CoreLocation does not have fails here.
#
# Needs the debug build of the package (`swift build`), whose dependency modules it reuses:
# seconds, not a second build. Also checks itself: a probe proves the Apple branches were the
# ones compiled, and a wrong use of the declarations must be refused.
set -euo pipefail
cd "$(dirname "$0")/.."

manifest=.build/debug.yaml
[ -f "$manifest" ] || { echo "apple-api-check: no $manifest; run 'swift build' first" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 1. The declarations, as modules Security, CoreLocation and FoundationPredicates.
for module in Security CoreLocation FoundationPredicates; do
  swiftc -parse-as-library -swift-version 6 -module-name "$module" -emit-module \
    -emit-module-path "$work/$module.swiftmodule" "scripts/apple-sdk-declarations/$module.swift"
done

# 2. The build's own command for NimbusKit, turned into a type-check with the declarations.
python3 - "$manifest" "$work" > "$work/args" <<'PY'
import json, sys
manifest, work = sys.argv[1], sys.argv[2]
lines = open(manifest).read().splitlines()
for i, line in enumerate(lines):
    if line.strip().startswith('"C.NimbusKit-') and line.strip().endswith('.module":'):
        block = lines[i + 1 : i + 12]
        break
else:
    sys.exit("apple-api-check: the build manifest has no command for NimbusKit")
args = json.loads(next(l for l in block if l.strip().startswith("args:")).split("args:", 1)[1])
# Drop what writes outputs (modules, objects, indexes, headers): a type-check writes nothing.
with_value = {"-emit-module-path", "-output-file-map", "-index-store-path", "-emit-objc-header-path"}
alone = {"-emit-dependencies", "-emit-module", "-incremental", "-c", "-enable-batch-mode",
         "-serialize-diagnostics", "-parseable-output", "-emit-objc-header"}
kept, skip = [], False
for arg in args[1:]:
    if skip:
        skip = False
    elif arg in with_value:
        skip = True
    elif arg not in alone:
        kept.append(arg)
kept += ["-typecheck", "-suppress-warnings", "-I", work, "-DNIMBUS_APPLE_API_CHECK", f"{work}/Probe.swift"]
print("\n".join(kept))
PY

# The probe names what only the Apple branches declare; if a condition stopped selecting them,
# the probe, not silence, says so.
cat > "$work/Probe.swift" <<'SWIFT'
import CoreLocation
import Security
enum AppleAPICheckProbe {
    static let keychainStore: any NimbusEncryptionKeyStore.Type = NimbusKeychainKeyStore.self
    static let location: CoreLocation.CLLocation.Type = CLLocation.self
    static let reader = DarwinPredicateReader.self
}
SWIFT

mapfile -t args < "$work/args"
swiftc "${args[@]}"
echo "apple-api-check: NimbusKit type-checks against the Apple declarations (keychain, CoreLocation, NSPredicate)"

# 3. The declarations refuse what Apple's SDK refuses: CoreLocation's coordinate is a C struct
# without ==, and SecItemCopyMatching takes a CFDictionary and a pointer.
cat > "$work/Wrong.swift" <<'SWIFT'
import CoreLocation
import Security
func wrong(_ a: CLLocationCoordinate2D, _ b: CLLocationCoordinate2D) -> Bool { a == b }
func alsoWrong(_ query: [String: Any]) -> OSStatus { SecItemCopyMatching(query as CFDictionary) }
SWIFT
errors=$(swiftc -typecheck -I "$work" "$work/Wrong.swift" 2>&1 || true)
for expected in "binary operator '=='" "missing argument"; do
  if ! grep -q "$expected" <<<"$errors"; then
    echo "apple-api-check: the declarations accepted a use Apple's SDK refuses ($expected); output:" >&2
    echo "$errors" >&2
    exit 1
  fi
done
echo "apple-api-check: the declarations refuse what Apple's SDK refuses (coordinate ==, a missing argument)"
