/// What a store does as one partition among several (docs/scale-out.md, "Partitions: the
/// design"), outside any unit of work: the ids it hands out, and the change outbox the
/// notification pipeline forwards from the other partitions to the home's.
public protocol PartitionStore: Sendable {
    /// Makes every id this store hands out from now on (databases, zones, records) at least
    /// `first`; ids already past it stay. Partition n hands out ids from n × 2^48
    /// (`PartitionIDs`), so a database keeps its ids wherever it lives.
    func startIDs(atLeast first: Int64) async throws

    /// Adds another partition's change-outbox entries to this store's outbox, each once:
    /// an entry this store was given before (a forward repeated after a crash, or made by
    /// two nodes at once) is skipped. `time` dates the memory of what was forwarded, which is
    /// kept a day.
    func acceptForwardedOutbox(_ entries: [OutboxEntry], fromPartition partition: Int64, at time: Int64) async throws

    /// Removes change-outbox entries this store forwarded, those still there (another node
    /// may have removed some).
    func dropOutbox(sequences: [Int64]) async throws
}

extension PartitionStore {
    /// How long a store remembers what it was forwarded (`acceptForwardedOutbox`): far past
    /// any forward a crash could leave half done.
    public static var forwardedMemoryMilliseconds: Int64 { 86_400_000 }
}

/// One partition of a deployment: its name in the catalog, its number (which fixes its id
/// range) and its store.
public struct StoragePartition: Sendable {
    public var name: String
    public var number: Int64
    public var store: any StorageDriver
    /// When the partition was added (milliseconds since 1970); nil: long enough ago that every
    /// node knows it (`PartitionedStorage.newPartitionSettle`).
    public var addedAt: Int64?

    public init(name: String, number: Int64, store: any StorageDriver, addedAt: Int64? = nil) {
        self.name = name
        self.number = number
        self.store = store
        self.addedAt = addedAt
    }

    /// The store, for what reads it without opening it (figures, memory passes): a
    /// `LazyPartition`'s own store once it is open, else `store` as it is.
    public var storeAsOpened: any StorageDriver { (store as? LazyPartition)?.opened ?? store }
}

/// Partition n hands out ids from n × 2^48 (the home, partition 0, from 1): a database's,
/// zone's or record's id names the partition that made it, and stays unique when the
/// database moves.
public enum PartitionIDs {
    static let shift: Int64 = 48

    /// The first id partition `number` hands out.
    public static func first(ofPartition number: Int64) -> Int64 { number << shift }

    /// The partition that made `id`.
    public static func partition(of id: Int64) -> Int64 { id >> shift }
}
