// swift-tools-version:6.1
import PackageDescription

// Strict settings for every Nimbus target: Swift 6 language mode (the default for
// tools-version 6), explicit `any` for existentials.
let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
]

// The server's own targets also run a nonisolated async function on its caller's executor
// (SE-0461) instead of hopping to the generic one at every call.
let serverSide: [SwiftSetting] = strict + [.enableUpcomingFeature("NonisolatedNonsendingByDefault")]

#if os(Linux)
    import Foundation
    import Glibc
    /// Whether this machine's glibc (the one a binary built here needs) is 2.36 or later, and
    /// LLD is on the path to write what it reads (swift.org's toolchains carry it; a packaged
    /// Swift may not).
    let packsRelativeRelocations: Bool = {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        guard path.split(separator: ":").contains(where: { FileManager.default.isExecutableFile(atPath: "\($0)/ld.lld") }) else {
            return false
        }
        var text = [CChar](repeating: 0, count: 64)  // "glibc 2.36"
        guard confstr(Int32(_CS_GNU_LIBC_VERSION), &text, text.count) > 0 else { return false }
        let name = String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let version = name.split(separator: " ").last?.split(separator: ".").compactMap { Int($0) } ?? []
        return version.count >= 2 && (version[0], version[1]) >= (2, 36)
    }()

    /// Whether jemalloc is installed to link against (Debian's `libjemalloc-dev`;
    /// `scripts/test.sh` installs it). Where it is not, the server keeps glibc's malloc.
    let linksJemalloc: Bool = {
        let directories = ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib"]
        return directories.contains { FileManager.default.fileExists(atPath: "\($0)/libjemalloc.so") }
    }()
#else
    let packsRelativeRelocations = false
    let linksJemalloc = false
#endif

// How the release server binary is linked, for the memory it holds resident (docs/benchmarks.md,
// "Idle memory: libcurl gone, relocations packed"). LLD packs the binary's 81,000 relative
// relocations into 21 KB (RELR) where the default linker writes 1.9 MB that the loader reads, and
// so holds, at every start. Only a loader from glibc 2.36 on reads them, so only where the
// build's own glibc is that recent (a binary built against a glibc needs it or a newer one).
//
// LLD also lays the functions out in scripts/link-order.txt's order: every function the server
// ran while set up and serving each benchmark request, measured under callgrind by
// Benchmarks/link-order.sh. They share a few megabytes of pages instead of touching most of the
// 42 MB of code. The compiler's private functions, which have no name to list, are gathered by
// scripts/private-functions.ld into 370 KB of their own. After the benchmarks' setup the server
// held about 23.5 MiB instead of 36 (docs/benchmarks.md, "The link order"). It takes effect
// where each function has a section of its own, as scripts/build-release.sh compiles them;
// names the file lists that no longer exist are passed over.
let residentLinking: [LinkerSetting] =
    packsRelativeRelocations
    ? [
        .unsafeFlags(
            [
                "-use-ld=lld", "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs",
                "-Xlinker", "--symbol-ordering-file=\(Context.packageDirectory)/scripts/link-order.txt",
                "-Xlinker", "--no-warn-symbol-ordering",
                "-Xlinker", "-T", "-Xlinker", "\(Context.packageDirectory)/scripts/private-functions.ld",
            ],
            .when(platforms: [.linux], configuration: .release))
    ] : []

// The server's allocator on Linux (docs/operations.md, "The memory allocator"). glibc's malloc,
// capped at two arenas for memory's sake, made the writer and the event loops queue for an
// arena's lock whenever one freed a buffer the other allocated: 7.8% of a 200-record batch's
// samples waited on that lock. jemalloc with the same two arenas (`CNimbusAllocator`) gives
// each thread a cache that takes frees from any thread and returns them in batches: the linked
// build measured 1.14-1.19x the batches, 1.05-1.10x the creates and 1.00-1.06x the fetches at
// 64 connections, with the memory after a load level (docs/benchmarks.md, "The allocator").
// Linking it puts its malloc and free before the C library's for the whole process.
let serverLinking: [LinkerSetting] = residentLinking + (linksJemalloc ? [.linkedLibrary("jemalloc", .when(platforms: [.linux]))] : [])

let package = Package(
    name: "nimbus",
    platforms: [.macOS(.v14), .iOS(.v17)],
    products: [
        .executable(name: "nimbus", targets: ["NimbusCLI"]),
        .library(name: "NimbusWire", targets: ["NimbusWire"]),
        .library(name: "NimbusServer", targets: ["NimbusServer"]),
        .library(name: "NimbusKit", targets: ["NimbusKit"]),
        // A real Nimbus inside an app's tests, with a clock and faults (docs/testing.md).
        .library(name: "NimbusTesting", targets: ["NimbusTesting"]),
    ],
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", exact: "2.28.1"),
        .package(url: "https://github.com/groue/GRDB.swift.git", exact: "7.10.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", exact: "1.8.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", exact: "4.5.2"),
        .package(url: "https://github.com/apple/swift-log.git", exact: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", exact: "2.13.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", exact: "1.37.0"),
        .package(url: "https://github.com/apple/swift-http-types.git", exact: "1.8.0"),
        .package(url: "https://github.com/apple/swift-nio.git", exact: "2.101.3"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", exact: "2.37.6"),
        // HTTP/1 as HTTPTypes on a channel the server builds itself (the notification stream's).
        .package(url: "https://github.com/apple/swift-nio-extras.git", exact: "1.35.2"),
        .package(url: "https://github.com/apple/swift-atomics.git", exact: "1.3.0"),
        .package(url: "https://github.com/hummingbird-project/swift-websocket.git", exact: "1.6.2"),
        .package(url: "https://github.com/vapor/postgres-nio.git", exact: "1.33.2"),
        .package(url: "https://github.com/vapor/jwt-kit.git", exact: "5.8.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", exact: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", exact: "2.4.1"),
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", exact: "1.7.3"),
        // OTLP over HTTP only: the gRPC exporter would build grpc-swift for nothing.
        .package(url: "https://github.com/swift-otel/swift-otel.git", exact: "1.6.0", traits: ["OTLPHTTP"]),
    ],
    targets: [
        // The CloudKit Web Services JSON: shared by server and (later) the SDK. Foundation only.
        .target(name: "NimbusWire", swiftSettings: strict),
        // The Swift SDK: CloudKit's API (CKContainer, CKDatabase, CKRecord, CK…Operation) over
        // the Web Services protocol, on URLSession. Foundation and NimbusWire only.
        // WSClient carries `container.notifications` (Foundation's WebSocket task needs a libcurl
        // built with WebSockets, which Linux distributions do not ship).
        .target(
            name: "NimbusKit",
            dependencies: [
                "NimbusWire", .product(name: "WSClient", package: "swift-websocket"),
                .product(name: "Logging", package: "swift-log"), .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strict),
        // The storage protocol, spoken in CloudKit terms, and its value types.
        .target(
            name: "NimbusStorage", dependencies: ["NimbusWire", .product(name: "Tracing", package: "swift-distributed-tracing")],
            swiftSettings: serverSide),
        // The embedded SQLite driver (WAL, group commit).
        .target(
            name: "NimbusSQLite",
            dependencies: [
                "NimbusStorage", "CNimbusSQLite", .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                // Only to resume a queued writer on the event loop it came from.
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: serverSide),
        // SQLite's process-wide settings (set through its variadic sqlite3_config) and the VFS
        // that writes a transaction's WAL frames together.
        .target(name: "CNimbusSQLite", linkerSettings: [.linkedLibrary("sqlite3")]),
        // The PostgreSQL driver (postgres-nio): for several nodes on one database.
        .target(
            name: "NimbusPostgres",
            dependencies: [
                "NimbusStorage", "NimbusWire", .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"), .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: serverSide),
        // Asset bytes: the blob-store protocol and its drivers (files; S3-compatible).
        .target(
            name: "NimbusBlobs",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "_NIOFileSystem", package: "swift-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: strict),
        // CloudKit semantics over any storage driver: operations, schema, tokens, permissions.
        .target(
            name: "NimbusCore",
            dependencies: [
                "NimbusWire", "NimbusStorage", "NimbusBlobs", "CNimbusLibc",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ],
            swiftSettings: serverSide),
        // Push delivery to Apple's APNs: HTTP/2 provider API, ES256 provider tokens, retries.
        .target(
            name: "NimbusPush",
            dependencies: [
                "NimbusWire", "NimbusStorage", "NimbusCore",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: strict),
        // The HTTP API on Hummingbird. No storage driver: the CLI (or a test) hands it one.
        // The C library's GNU extensions Swift's Glibc module does not export: the allocator's
        // statistics and trimming (MemoryReturnService), memmem (RecordCodec).
        .target(name: "CNimbusLibc"),
        // The allocator's settings, read by jemalloc as the server's process starts (only the
        // server's binary links it: Package.swift's `serverLinking`).
        .target(name: "CNimbusAllocator"),
        .target(
            name: "NimbusServer",
            dependencies: [
                "NimbusWire", "NimbusStorage", "NimbusCore", "NimbusPush", "NimbusBlobs", "CNimbusLibc",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Atomics", package: "swift-atomics"),
            ],
            // The dashboard's page, style and script (docs/dashboard.md), served as they are.
            resources: [.copy("Dashboard")],
            swiftSettings: serverSide),
        // A real Nimbus inside an app's tests: the server on a throwaway SQLite store, NimbusKit
        // containers pointed at it, the test-mode clock and faults (docs/testing.md).
        .target(
            name: "NimbusTesting",
            dependencies: [
                "NimbusKit", "NimbusServer", "NimbusCore", "NimbusSQLite", "NimbusStorage", "NimbusWire",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strict),
        // `nimbus`: the server and the admin verbs in one executable.
        .executableTarget(
            name: "NimbusCLI",
            dependencies: [
                "NimbusServer", "NimbusCore", "NimbusSQLite", "NimbusPostgres", "NimbusWire", "CNimbusAllocator",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "OTel", package: "swift-otel"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: strict,
            linkerSettings: serverLinking),
        // Load generator for Benchmarks/ (run on demand, never in tests).
        .executableTarget(
            name: "NimbusBench",
            dependencies: [
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "WSClient", package: "swift-websocket"),
                .product(name: "Logging", package: "swift-log"),
                "NimbusCore", "NimbusSQLite", "NimbusStorage", "NimbusWire", "NimbusTesting",
            ],
            path: "Benchmarks/NimbusBench",
            swiftSettings: strict),
        .target(
            name: "NimbusTestSupport",
            dependencies: [
                "NimbusServer", "NimbusCore", "NimbusTesting", "NimbusSQLite", "NimbusPostgres", "NimbusBlobs",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "WSClient", package: "swift-websocket"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdHTTP2", package: "hummingbird"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Tests/NimbusTestSupport",
            swiftSettings: strict),
        .testTarget(
            name: "NimbusStorageTests",
            dependencies: [
                "NimbusStorage", "NimbusSQLite", "NimbusPostgres", "NimbusTestSupport",
                .product(name: "GRDB", package: "GRDB.swift"), .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: strict),
        .testTarget(
            name: "NimbusCoreTests",
            dependencies: ["NimbusCore", "NimbusWire", "NimbusTestSupport"],
            swiftSettings: strict),
        .testTarget(
            name: "NimbusKitTests",
            dependencies: [
                "NimbusKit", "NimbusTestSupport", "NimbusTesting", "NimbusWire",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict),
        // The seeds' code samples in today's Swift, unchanged otherwise, run against a live server.
        .testTarget(
            name: "NimbusKitSeedSamples",
            dependencies: ["NimbusKit", "NimbusTestSupport"],
            swiftSettings: strict),
        // CloudKit app code in every published style, with only the import changed: it must
        // compile (issue 20, docs/sdk.md). In Swift 5 mode, as most apps are.
        .testTarget(name: "NimbusKitCompileCorpus", dependencies: ["NimbusKit"], swiftSettings: [.swiftLanguageMode(.v5)]),
        .testTarget(
            name: "NimbusServerTests",
            dependencies: [
                "NimbusServer", "NimbusTestSupport", "NimbusCLI", "NimbusCore", "NimbusBlobs",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strict),
    ]
)
