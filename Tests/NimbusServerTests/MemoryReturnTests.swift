#if canImport(Glibc)
import CNimbusLibc
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
        var vector = [UInt8](repeating: 0, count: (end - start) / page)
        guard mincore(first, end - start, &vector) == 0 else { return 0 }
        return vector.filter { $0 & 1 == 1 }.count
    }

    @Test func freedMemoryGoesBackToTheSystemAndTooLittleIsLeft() {
        // 96 MB in touched blocks; every sixteenth stays allocated, so what is freed lies between
        // blocks in use (glibc gives back the free top of a heap by itself, not the middle).
        let blocks = (0..<3_072).map { _ in UnsafeMutableRawPointer.allocate(byteCount: Self.blockSize, alignment: 16) }
        for block in blocks { block.initializeMemory(as: UInt8.self, repeating: 1, count: Self.blockSize) }
        let kept = blocks.enumerated().filter { $0.offset % 16 == 0 }.map(\.element)
        let freed = blocks.enumerated().filter { $0.offset % 16 != 0 }.map(\.element)
        defer { for block in kept { block.deallocate() } }
        for block in freed { block.deallocate() }

        let residentBefore = freed.reduce(0) { $0 + Self.residentPages($1) }
        let wholePages = freed.count * (Self.blockSize / Self.page - 1)
        #expect(residentBefore >= wholePages * 9 / 10, "the freed blocks' pages were not resident: \(residentBefore) of \(wholePages)")
        #expect(MemoryReturn.freeBytes >= 80 << 20, "\(MemoryReturn.freeBytes) bytes free")

        // Far more free than the threshold: handed back. Other threads may reuse a few of the
        // freed blocks meanwhile, so most pages, not all, must have gone.
        #expect(!MemoryReturn.releaseIfWorthIt(threshold: Int.max), "released although the threshold was not reached")
        #expect(freed.reduce(0) { $0 + Self.residentPages($1) } >= residentBefore * 9 / 10, "released below the threshold")
        #expect(MemoryReturn.releaseIfWorthIt(threshold: MemoryReturn.defaultThreshold))
        let residentAfter = freed.reduce(0) { $0 + Self.residentPages($1) }
        #expect(residentAfter <= residentBefore / 4, "still resident after the release: \(residentAfter) of \(residentBefore) pages")
    }

    /// What `nimbus serve` does once it listens: the process's read-only file mappings (this
    /// test binary's code among them) are advised out, and its resident file pages fall. Other
    /// tests running meanwhile fault some code back in, far less than the binary held.
    @Test func theStartsCodePagesGoBackToTheKernel() throws {
        let mappings = MemoryReturn.readOnlyFileMappings()
        let code = unsafeBitCast(
            nimbus_page_out as @convention(c) (UnsafeMutableRawPointer?, Int) -> Int32, to: Int.self)
        #expect(mappings.contains { $0.contains(code) }, "no read-only mapping holds this binary's code")

        let release = MemoryReturn.releaseStartupPages()
        #expect(release.advised >= 1, "advised \(release.advised) of \(mappings.count) mappings")
        #expect(release.refused == 0)
        let before = try #require(release.residentFileBytesBefore), after = try #require(release.residentFileBytesAfter)
        #expect(after < before / 2, "resident file pages \(before) bytes before, \(after) after")
    }
}
#endif
