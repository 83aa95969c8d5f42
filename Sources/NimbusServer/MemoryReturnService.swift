import CNimbusLibc
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
/// server.
public struct MemoryReturnService: Service {
    /// How often the arenas' free bytes are looked at.
    static let interval: Duration = .seconds(10)

    public init() {}

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try? await Task.sleep(for: Self.interval)
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
