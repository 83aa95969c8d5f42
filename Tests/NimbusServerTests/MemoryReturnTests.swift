#if canImport(Glibc)
import CNimbusLibc
import Foundation
import Glibc
@testable import NimbusServer
import Testing

/// `MemoryReturnService`'s step: memory the process freed inside glibc's arenas goes back to the
/// system. Checked page by page with `mincore`, which sees only the blocks this test freed, so
/// what other tests allocate meanwhile does not blur it.
@Suite struct MemoryReturnTests {
    static let blockSize = 32_768  // below glibc's mmap threshold: carved from an arena
    static let page = Int(sysconf(Int32(_SC_PAGESIZE)))

    /// How many of the whole pages inside `block` are resident.
    static func residentPages(_ block: UnsafeMutableRawPointer) -> Int {
        let start = (Int(bitPattern: block) + page - 1) / page * page
        let end = (Int(bitPattern: block) + blockSize) / page * page
        guard end > start, let first = UnsafeMutableRawPointer(bitPattern: start) else { return 0 }
        return max(0, residentPages(first, length: end - start))
    }

    /// Freed memory goes back to the system, by whichever allocator serves the process. The
    /// test process links what the server links (it imports NimbusCLI): jemalloc where it was
    /// installed at the build, which hands pages back by itself after its decay (two seconds,
    /// `CNimbusAllocator`), from a thread of its own, with nothing asked of the server; else
    /// glibc's, which `MemoryReturnService` trims.
    @Test func freedMemoryGoesBackToTheSystemAndTooLittleIsLeft() async throws {
        // 96 MB in touched blocks; every sixteenth stays allocated, so what is freed lies between
        // blocks in use (glibc gives back the free top of a heap by itself, not the middle).
        let blocks = (0..<3_072).map { _ in UnsafeMutableRawPointer.allocate(byteCount: Self.blockSize, alignment: 16) }
        for block in blocks { block.initializeMemory(as: UInt8.self, repeating: 1, count: Self.blockSize) }
        let kept = blocks.enumerated().filter { $0.offset % 16 == 0 }.map(\.element)
        let freed = blocks.enumerated().filter { $0.offset % 16 != 0 }.map(\.element)
        defer { for block in kept { block.deallocate() } }
        let wholePages = freed.count * (Self.blockSize / Self.page - 1)
        let residentBefore = freed.reduce(0) { $0 + Self.residentPages($1) }
        #expect(residentBefore >= wholePages * 9 / 10, "the blocks' pages were not resident: \(residentBefore) of \(wholePages)")
        for block in freed { block.deallocate() }
        func resident() -> Int { freed.reduce(0) { $0 + Self.residentPages($1) } }

        switch MemoryReturnService.allocator {
        case .jemalloc:
            // Nothing to trim: glibc's arenas hold nothing, and the pages leave on their own.
            #expect(MemoryReturn.freeBytes < 16 << 20, "\(MemoryReturn.freeBytes) bytes free in glibc's arenas")
            #expect(!MemoryReturn.releaseIfWorthIt(threshold: MemoryReturn.defaultThreshold))
            let deadline = ContinuousClock.now + .seconds(20)
            while resident() > residentBefore / 4, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(250)) }
            #expect(resident() <= residentBefore / 4, "still resident 20 s after the free: \(resident()) of \(residentBefore) pages")
        case .glibc, .system:
            #expect(MemoryReturn.freeBytes >= 80 << 20, "\(MemoryReturn.freeBytes) bytes free")
            // Far more free than the threshold: handed back. Other threads may reuse a few of the
            // freed blocks meanwhile, so most pages, not all, must have gone.
            #expect(!MemoryReturn.releaseIfWorthIt(threshold: Int.max), "released although the threshold was not reached")
            #expect(resident() >= residentBefore * 9 / 10, "released below the threshold")
            #expect(MemoryReturn.releaseIfWorthIt(threshold: MemoryReturn.defaultThreshold))
            #expect(resident() <= residentBefore / 4, "still resident after the release: \(resident()) of \(residentBefore) pages")
        }
    }

    /// The arena cap `main` sets: taken by glibc, and not set where the operator chose one.
    /// Asked here for glibc's own default (eight arenas a core), so the test process's
    /// allocator stays as it was. Where jemalloc serves the process, glibc's arenas are not
    /// the ones in use, and nothing is capped (jemalloc's two are its settings').
    @Test func theArenaCapIsTakenUnlessTheOperatorChoseOne() {
        let glibcDefault = 8 * ProcessInfo.processInfo.activeProcessorCount
        #expect(!MemoryReturnService.limitAllocatorArenas(to: glibcDefault, environment: ["MALLOC_ARENA_MAX": "4"]))
        #expect(MemoryReturnService.limitAllocatorArenas(to: glibcDefault, environment: [:]) == (MemoryReturnService.allocator == .glibc))
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

    /// How many of the pages of `length` bytes from the page-aligned `start` are resident.
    static func residentPages(_ start: UnsafeMutableRawPointer, length: Int) -> Int {
        var vector = [UInt8](repeating: 0, count: length / page)
        guard mincore(start, length, &vector) == 0 else { return -1 }
        return vector.filter { $0 & 1 == 1 }.count
    }
}
#endif
