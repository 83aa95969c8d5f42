#if canImport(Glibc)
import CNimbusLibc
import Foundation
import Glibc
@testable import NimbusServer
import NimbusStorage
import Synchronization
import Testing

/// `MemoryReturnService`'s step: memory the process freed inside glibc's arenas goes back to the
/// system. Checked page by page with `mincore`, which sees only the blocks this test freed, so
/// what other tests allocate meanwhile does not blur it.
// Serialized: one test reads how much glibc's arenas hold free while another fills them.
@Suite(.serialized) struct MemoryReturnTests {
    static let blockSize = 32_768  // below glibc's mmap threshold: carved from an arena
    static let page = Int(sysconf(Int32(_SC_PAGESIZE)))

    /// How many of the whole pages inside `block` are resident.
    static func residentPages(_ block: UnsafeMutableRawPointer) -> Int {
        let start = (Int(bitPattern: block) + page - 1) / page * page
        let end = (Int(bitPattern: block) + blockSize) / page * page
        guard end > start, let first = UnsafeMutableRawPointer(bitPattern: start) else { return 0 }
        return max(0, residentPages(first, length: end - start))
    }

    /// glibc's own `malloc` and `free`, whichever allocator answers the process's calls: the test
    /// process links what the server links (it imports NimbusCLI), so jemalloc's, where it was
    /// installed at the build; glibc's stay reachable through the C library's handle, and a
    /// server built without jemalloc runs on them.
    static let glibc: (allocate: @convention(c) (Int) -> UnsafeMutableRawPointer?, free: @convention(c) (UnsafeMutableRawPointer?) -> Void) = {
        let library = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD)
        return (
            unsafeBitCast(dlsym(library, "malloc"), to: (@convention(c) (Int) -> UnsafeMutableRawPointer?).self),
            unsafeBitCast(dlsym(library, "free"), to: (@convention(c) (UnsafeMutableRawPointer?) -> Void).self)
        )
    }()

    /// 96 MB in touched blocks from `allocate`, then all freed but every sixteenth, so what is
    /// freed lies between blocks in use (glibc gives back the free top of a heap by itself, not
    /// the middle). The freed blocks (to read their pages), the kept ones (for the caller to
    /// free), and how many of the freed blocks' pages were resident before the free.
    static func freeBetweenBlocksInUse(
        allocate: (Int) -> UnsafeMutableRawPointer, free: (UnsafeMutableRawPointer) -> Void
    ) -> (freed: [UnsafeMutableRawPointer], kept: [UnsafeMutableRawPointer], residentBefore: Int) {
        let blocks = (0..<3_072).map { _ in allocate(blockSize) }
        for block in blocks { block.initializeMemory(as: UInt8.self, repeating: 1, count: blockSize) }
        let kept = blocks.enumerated().filter { $0.offset % 16 == 0 }.map(\.element)
        let freed = blocks.enumerated().filter { $0.offset % 16 != 0 }.map(\.element)
        let wholePages = freed.count * (blockSize / page - 1)
        let residentBefore = freed.reduce(0) { $0 + residentPages($1) }
        #expect(residentBefore >= wholePages * 9 / 10, "the blocks' pages were not resident: \(residentBefore) of \(wholePages)")
        for block in freed { free(block) }
        return (freed, kept, residentBefore)
    }

    /// `MemoryReturnService`'s step, on glibc's malloc (a server built without jemalloc): what
    /// the arenas hold free goes back when there is more than the threshold, and not before.
    @Test func freedMemoryGoesBackToTheSystemAndTooLittleIsLeft() {
        let (freed, kept, residentBefore) = Self.freeBetweenBlocksInUse(
            allocate: { Self.glibc.allocate($0)! }, free: { Self.glibc.free($0) })
        defer { for block in kept { Self.glibc.free(block) } }
        func resident() -> Int { freed.reduce(0) { $0 + Self.residentPages($1) } }
        #expect(MemoryReturn.freeBytes >= 80 << 20, "\(MemoryReturn.freeBytes) bytes free")
        // Far more free than the threshold: handed back. Other threads may reuse a few of the
        // freed blocks meanwhile, so most pages, not all, must have gone.
        #expect(!MemoryReturn.releaseIfWorthIt(threshold: Int.max), "released although the threshold was not reached")
        #expect(resident() >= residentBefore * 9 / 10, "released below the threshold")
        #expect(MemoryReturn.releaseIfWorthIt(threshold: MemoryReturn.defaultThreshold))
        #expect(resident() <= residentBefore / 4, "still resident after the release: \(resident()) of \(residentBefore) pages")
    }

    /// On jemalloc (`CNimbusAllocator`'s settings) the process's freed memory leaves by itself,
    /// within about two seconds, from jemalloc's own thread: nothing of it lands in glibc's
    /// arenas for the service to trim, and nothing is asked of the server.
    @Test(.enabled(if: MemoryReturnService.allocator.description.hasPrefix("jemalloc")))
    func onJemallocFreedMemoryGoesBackByItself() async throws {
        let glibcFreeBefore = MemoryReturn.freeBytes
        let (freed, kept, residentBefore) = Self.freeBetweenBlocksInUse(
            allocate: { UnsafeMutableRawPointer.allocate(byteCount: $0, alignment: 16) }, free: { $0.deallocate() })
        defer { for block in kept { block.deallocate() } }
        func resident() -> Int { freed.reduce(0) { $0 + Self.residentPages($1) } }
        #expect(MemoryReturn.freeBytes - glibcFreeBefore < 16 << 20, "the freed blocks went to glibc's arenas")
        let deadline = ContinuousClock.now + .seconds(20)
        while resident() > residentBefore / 4, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(250)) }
        #expect(resident() <= residentBefore / 4, "still resident 20 s after the free: \(resident()) of \(residentBefore) pages")
    }

    /// The arena cap `main` sets: taken by glibc, and not set where the operator chose one.
    /// Asked here for glibc's own default (eight arenas a core), so the test process's
    /// allocator stays as it was. Where jemalloc serves the process, glibc's arenas are not
    /// the ones in use, and nothing is capped (jemalloc's two are its settings').
    @Test func theArenaCapIsTakenUnlessTheOperatorChoseOne() {
        let glibcDefault = 8 * ProcessInfo.processInfo.activeProcessorCount
        #expect(!MemoryReturnService.limitAllocatorArenas(to: glibcDefault, environment: ["MALLOC_ARENA_MAX": "4"]))
        #expect(MemoryReturnService.limitAllocatorArenas(to: glibcDefault, environment: [:]) == (MemoryReturnService.allocator == .glibc))
        // glibc takes the cap whichever allocator answers the process's `malloc`: a server
        // built without jemalloc sets it through this call.
        #expect(nimbus_allocator_limit_arenas(Int32(glibcDefault)) == 1)
    }

    /// What `nimbus serve` does once it listens, on a file of the test's own (paging out the
    /// whole test process would slow the tests running beside it): a read-only mapping of the
    /// file is among those listed, a writable one is not, and after the advice the file's
    /// pages are no longer resident (`mincore`).
    @Test func readOnlyFileMappingsArePagedOut() throws {
        let length = 64 * Self.page * 16  // 64 runs of the kernel's 64 KB fault-around
        let path = NSTemporaryDirectory() + "nimbus-page-out-\(getpid())-\(UInt64.random(in: 0...UInt64.max))"
        #expect(FileManager.default.createFile(atPath: path, contents: Data(repeating: 7, count: length)))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let descriptor = open(path, O_RDONLY)
        try #require(descriptor >= 0)
        defer { close(descriptor) }
        let readOnly = try #require(mmap(nil, length, PROT_READ, MAP_PRIVATE, descriptor, 0))
        try #require(readOnly != MAP_FAILED)
        defer { munmap(readOnly, length) }
        let writable = try #require(mmap(nil, Self.page, PROT_READ | PROT_WRITE, MAP_PRIVATE, descriptor, 0))
        try #require(writable != MAP_FAILED)
        defer { munmap(writable, Self.page) }

        var sum = 0
        for offset in stride(from: 0, to: length, by: Self.page) { sum += Int(readOnly.load(fromByteOffset: offset, as: UInt8.self)) }
        #expect(sum == 7 * (length / Self.page))
        let start = Int(bitPattern: readOnly), mapped = start..<(start + length)
        #expect(Self.residentPages(readOnly, length: length) == length / Self.page)

        let mappings = MemoryReturn.readOnlyFileMappings()
        #expect(mappings.contains(mapped), "the read-only mapping is not listed")
        #expect(!mappings.contains { $0.contains(Int(bitPattern: writable)) }, "a writable mapping is listed")
        let code = unsafeBitCast(nimbus_page_out as @convention(c) (UnsafeMutableRawPointer?, Int) -> Int32, to: Int.self)
        #expect(mappings.contains { $0.contains(code) }, "no listed mapping holds this binary's code")

        let (advised, refused) = MemoryReturn.pageOut([mapped])
        #expect(advised == 1 && refused == 0)
        let left = Self.residentPages(readOnly, length: length)
        #expect(left <= length / Self.page / 10, "\(left) of \(length / Self.page) pages still resident")
    }

    /// A store that counts the passes that asked for its idle caches.
    final class CountingStore: IdleMemoryReturning {
        let passes = Atomic<Int>(0)
        func returnIdleMemory() async { passes.add(1, ordering: .relaxed) }
    }

    /// Every pass of the service asks the store to drop its idle caches, and none comes after
    /// the service stops.
    @Test func eachPassAsksTheStoreForItsIdleCaches() async throws {
        let store = CountingStore()
        let service = MemoryReturnService(store: store, interval: .milliseconds(20))
        let running = Task { try await service.run() }
        let deadline = ContinuousClock.now + .seconds(10)
        while store.passes.load(ordering: .relaxed) < 3, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        running.cancel()
        try await running.value
        let stopped = store.passes.load(ordering: .relaxed)
        #expect(stopped >= 3)
        try await Task.sleep(for: .milliseconds(100))
        #expect(store.passes.load(ordering: .relaxed) == stopped, "passes went on after the service stopped")
    }

    /// How many of the pages of `length` bytes from the page-aligned `start` are resident.
    static func residentPages(_ start: UnsafeMutableRawPointer, length: Int) -> Int {
        var vector = [UInt8](repeating: 0, count: length / page)
        guard mincore(start, length, &vector) == 0 else { return -1 }
        return vector.filter { $0 & 1 == 1 }.count
    }
}
#endif
