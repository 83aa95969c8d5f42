/// An engine seen as if every call were a round trip: its in-process powers
/// (`InProcessStorage`, `withRowSource`) hidden, so `UnitOfWorkDriver` loads what a unit
/// misses, runs it again and applies with checks, as over PostgreSQL. The test suite's second
/// SQLite pass runs the networked path this way with no network in the way.
public struct RoundTrips: CoarseStorage {
    public let base: any CoarseStorage
    /// Told of every load before it goes to `base`: what a test reads of the loads units make.
    private let onLoad: (@Sendable (LoadRequest) -> Void)?

    public init(_ base: any CoarseStorage, onLoad: (@Sendable (LoadRequest) -> Void)? = nil) {
        self.base = base
        self.onLoad = onLoad
    }

    public func load(_ request: LoadRequest) async throws -> LoadedRows {
        onLoad?(request)
        return try await base.load(request)
    }
    public func apply(_ changes: UnitOfWorkChanges) async throws { try await base.apply(changes) }
    public func reserveIDs(_ kind: StorageIDKind, count: Int) async throws -> ClosedRange<Int64> {
        try await base.reserveIDs(kind, count: count)
    }

    public var accounts: any AccountStore { base.accounts }
    public var push: any PushStore { base.push }
    public var assets: any AssetStore { base.assets }
    public var shares: any ShareStore { base.shares }
    public var operations: any OperationOutcomeStore { base.operations }
    public var operators: any OperatorStore { base.operators }
    public var partitioning: any PartitionStore { base.partitioning }
    public func close() async throws { try await base.close() }
    public func signals() -> AsyncStream<StoreSignal>? { base.signals() }
}

// What the engine offers beside its rows, passed through.
extension RoundTrips: StoreCopying {
    public func copyStore(into directory: String) async throws -> StoreCopy {
        guard let base = base as? any StoreCopying else { throw StoreCopyRefusal("this storage driver cannot make backups") }
        return try await base.copyStore(into: directory)
    }
}

extension RoundTrips: RecordHistoryStoring {
    public var recordHistory: (any RecordHistoryStore)? { (base as? any RecordHistoryStoring)?.recordHistory }
}

extension RoundTrips: RequestLogStoring {
    public var requestLog: (any RequestLogStore)? { (base as? any RequestLogStoring)?.requestLog }
}

extension RoundTrips: StoreFigures {
    public func storeBytes() async throws -> Int64 { try await (base as? any StoreFigures)?.storeBytes() ?? 0 }
    public var poolUse: PoolUse? { (base as? any StoreFigures)?.poolUse }
}
