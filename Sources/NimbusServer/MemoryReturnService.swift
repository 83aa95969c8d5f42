import CNimbusLibc
import Foundation
import NimbusStorage
import ServiceLifecycle

/// Gives the memory a burst freed back to the system.
///
/// glibc's allocator keeps what the process frees inside its arenas (up to eight per core) for
/// reuse, and hands back by itself only the free space at the top of a heap. So a server that
/// once held 10,000 notification streams stayed at the 136 MB it had reached after every
/// device left (docs/benchmarks.md, "... memory a burst leaves behind"), and the more cores,
/// the more arenas keep such memory. Every `interval`, when the arenas hold more than
/// `MemoryReturn.defaultThreshold` free bytes, their whole free pages go back to the system
/// (`malloc_trim`). Nothing moves: the allocator keeps its books, and a page handed back costs
/// a page fault when it is used again. One per process: `nimbus serve` runs it beside its
/// server. Where jemalloc serves the process (`allocator`; a Linux build with libjemalloc-dev
/// installed), glibc's arenas hold nothing and this finds nothing to give back: jemalloc's own
/// thread returns freed pages after two seconds (`CNimbusAllocator`).
///
/// Before the allocator, the store gives back the caches its connections filled and then left
/// unused for a whole interval (`IdleMemoryReturning`: SQLite's page caches), so what a burst
/// filled goes back within one to two intervals of the server going quiet.
public struct MemoryReturnService: Service {
    /// How often the store's idle caches and the arenas' free bytes are looked at.
    public static let defaultInterval: Duration = .seconds(5)

    /// The store whose idle caches each pass drops; nil: the allocator's only.
    let store: (any IdleMemoryReturning)?
    let interval: Duration

    public init(store: (any IdleMemoryReturning)? = nil, interval: Duration = defaultInterval) {
        self.store = store
        self.interval = interval
    }

    /// Called once the server listens: the code the start ran once goes back to the kernel
    /// (`MemoryReturn.releaseStartupPages`), off the caller's thread.
    public static func startupFinished() {
        Task.detached(priority: .background) { MemoryReturn.releaseStartupPages() }
    }

    /// The allocator arenas a server may use, whatever its core count.
    ///
    /// glibc's malloc gives a thread that finds the arenas busy an arena of its own, up to eight
    /// per core, and each keeps what its threads freed for their reuse. So the memory a server
    /// kept after a load grew with its threads, and its threads with the cores: with NIO's loops,
    /// SQLite's readers and Swift's pool sized for sixteen cores, 159 MiB against 142 for two
    /// (`Benchmarks/core-memory.sh`, docs/benchmarks.md "The allocator's arenas capped"). With
    /// two arenas, 121 on two cores. The allocations a request makes most, small objects, come
    /// from each thread's own cache (glibc's tcache) without an arena's lock; larger buffers
    /// take the lock, which cost creates 5–11% here (fetches and lists level). An
    /// operator who would rather spend the memory sets `MALLOC_ARENA_MAX` (docs/operations.md).
    public static let allocatorArenas = 2

    /// Called first thing in `main`, before the process starts its threads: glibc's allocator
    /// gets at most `count` arenas, unless the operator chose a number (`MALLOC_ARENA_MAX`,
    /// which glibc reads itself) or glibc's malloc does not serve the process (a server linked
    /// against jemalloc, `allocator`). Whether the cap was set.
    @discardableResult
    public static func limitAllocatorArenas(
        to count: Int = allocatorArenas, environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> Bool {
        guard environment["MALLOC_ARENA_MAX"] == nil, allocator == .glibc else { return false }
        return nimbus_allocator_limit_arenas(Int32(count)) == 1
    }

    /// The allocator that serves the process's `malloc`.
    public enum Allocator: Equatable, Sendable {
        /// jemalloc, linked into the server where it was installed at the build (Package.swift)
        /// and given two arenas (`CNimbusAllocator`). It hands freed pages back by itself, after
        /// a few seconds (its decay), so `run` finds nothing free in glibc's arenas and leaves
        /// them be.
        case jemalloc(version: String, arenas: Int)
        /// glibc's malloc, its arenas capped (`limitAllocatorArenas`) and trimmed (`run`).
        case glibc
        /// Another platform's (macOS's).
        case system

        /// For the server's first lines.
        public var description: String {
            switch self {
            case .jemalloc(let version, let arenas): "jemalloc \(version), \(arenas) arenas"
            case .glibc:
                "glibc's malloc, at most \(ProcessInfo.processInfo.environment["MALLOC_ARENA_MAX"] ?? String(MemoryReturnService.allocatorArenas)) arenas (jemalloc where libjemalloc-dev is installed at the build: docs/operations.md)"
            case .system: "the system's malloc"
            }
        }
    }

    public static let allocator: Allocator = {
        var version = [CChar](repeating: 0, count: 128)
        var arenas: UInt32 = 0
        if nimbus_allocator_jemalloc(&version, version.count, &arenas) == 1 {
            // "5.3.0-0-g54eaed1…": the release, without the commit it was built from.
            let spelled = String(decoding: version.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            return .jemalloc(version: String(spelled.prefix { $0 != "-" }), arenas: Int(arenas))
        }
        #if canImport(Glibc)
            return .glibc
        #else
            return .system
        #endif
    }()

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                await store?.returnIdleMemory()
                MemoryReturn.releaseIfWorthIt(threshold: MemoryReturn.defaultThreshold)
            }
        }
    }
}

enum MemoryReturn {
    /// Below this much free memory in the arenas, nothing is handed back: the pages would be
    /// faulted in again by the next requests.
    static let defaultThreshold = 16 << 20

    /// Bytes free inside the allocator's arenas (0 where the allocator is not glibc's).
    static var freeBytes: Int { Int(nimbus_allocator_free_bytes()) }

    /// Hands the arenas' free pages back when more than `threshold` bytes are free; whether it
    /// released any.
    @discardableResult
    static func releaseIfWorthIt(threshold: Int) -> Bool {
        guard freeBytes > threshold else { return false }
        return nimbus_allocator_release_free_pages() == 1
    }
}

extension MemoryReturn {
    /// Gives back the code pages the start ran once.
    ///
    /// Starting runs code from all over the binary and Swift's libraries once (the argument
    /// parser, migrations, bootstrapping, the routers' tables, GRDB's and NIO's set-up), and the
    /// kernel maps code in 64 KB runs around each page a process touches. An idle server so
    /// held about 40 MB of file pages, most of them never run again (docs/benchmarks.md, "Idle
    /// memory: libcurl gone, relocations packed" and "The start's code given back"). Once the
    /// server listens, each read-only file mapping is advised out (`MADV_PAGEOUT`): the kernel
    /// drops the clean pages only this process maps, and what serving runs is read back at its
    /// first use, which the first requests after the start pay once. Pages other processes map
    /// too (the C library's) stay, and so does everything the process wrote (anonymous memory,
    /// SQLite's shared WAL index, which is mapped writable). The kernel pages out a file's pages
    /// only for a process that could open the file for writing: where a binary owned by root
    /// runs as another user, the advice changes nothing, and costs nothing.
    static func releaseStartupPages() {
        _ = pageOut(readOnlyFileMappings())
    }

    /// Advises each range out (`MADV_PAGEOUT`); how many ranges the kernel took the advice for
    /// and how many it refused.
    static func pageOut(_ ranges: [Range<Int>]) -> (advised: Int, refused: Int) {
        var advised = 0, refused = 0
        for range in ranges {
            guard let start = UnsafeMutableRawPointer(bitPattern: range.lowerBound) else { continue }
            if nimbus_page_out(start, range.count) == 0 { advised += 1 } else { refused += 1 }
        }
        return (advised, refused)
    }

    /// The address ranges of the process's read-only mappings of files (`/proc/self/maps`):
    /// code, read-only data and relocated-then-protected data of the binary and its libraries.
    /// Writable mappings, devices and memory files are left out.
    static func readOnlyFileMappings() -> [Range<Int>] {
        guard let maps = procText("/proc/self/maps") else { return [] }
        return maps.split(separator: "\n").compactMap { line in
            // address perms offset device inode path (the path may hold spaces)
            let fields = line.split(separator: " ", maxSplits: 5, omittingEmptySubsequences: true)
            guard fields.count == 6 else { return nil }
            let permissions = fields[1], path = fields[5].drop { $0 == " " }
            guard permissions.hasPrefix("r"), !permissions.contains("w"), path.hasPrefix("/"),
                !path.hasPrefix("/dev/"), !path.hasPrefix("/memfd:")
            else { return nil }
            let bounds = fields[0].split(separator: "-")
            guard bounds.count == 2, let start = Int(bounds[0], radix: 16), let end = Int(bounds[1], radix: 16), end > start
            else { return nil }
            return start..<end
        }
    }

    /// A file of /proc, read to its end (its size reads as zero, so it is read, not sized).
    private static func procText(_ path: String) -> String? {
        guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? handle.close() }
        guard let data = try? handle.readToEnd() else { return nil }
        return String(decoding: data, as: UTF8.self)
    }
}
