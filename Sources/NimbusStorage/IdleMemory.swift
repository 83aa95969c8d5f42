/// A store whose connections keep caches that an idle server can do without (SQLite's page
/// caches: a megabyte to 64 MB a connection). `nimbus serve`'s memory pass
/// (`MemoryReturnService`) calls it at a fixed interval.
///
/// Why: a connection keeps the pages it read or wrote until it needs the room, so after a
/// burst the server held every cache it had filled, and the more cores, the more reader
/// connections held one (docs/benchmarks.md, "Idle connections' page caches"). A cache that
/// went unused for a whole interval is dropped; the next use reads its pages again from the
/// kernel's page cache, a copy each.
public protocol IdleMemoryReturning: Sendable {
    /// Drops the caches of the connections nothing used since the previous call. The first
    /// call only starts the count.
    func returnIdleMemory() async
}

/// A unit-of-work driver passes it to its engine.
extension UnitOfWorkDriver: IdleMemoryReturning {
    public func returnIdleMemory() async { await (base as? any IdleMemoryReturning)?.returnIdleMemory() }
}

/// Every partition opened so far, the home's first.
extension PartitionedStorage: IdleMemoryReturning {
    public func returnIdleMemory() async {
        await (wrapped as? any IdleMemoryReturning)?.returnIdleMemory()
        for partition in otherPartitions {
            await (partition.storeAsOpened as? any IdleMemoryReturning)?.returnIdleMemory()
        }
    }
}
