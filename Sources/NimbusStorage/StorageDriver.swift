/// Where Nimbus keeps its data, spoken in CloudKit's terms (containers, logical databases,
/// zones, records, change sequences) rather than in one database's dialect.
///
/// A transaction is a closure over a unit of work (`ReadUnit` for a read, `UnitOfWork` for a
/// write): everything it writes commits together or not at all, and the unit it receives
/// lives only inside it. Every engine runs it the same way (`UnitOfWorkDriver` over a
/// `CoarseStorage`); what differs is how rows arrive and how writes land.
///
/// ```swift
/// let zone = try await storage.write { unit in
///     let database = try unit.ensureDatabase(key)
///     return try unit.createZone(databaseID: database.id, name: "Notes")
/// }
/// ```
///
/// Drivers may group concurrent `write` calls into one commit (every engine does), but each
/// call still succeeds or fails on its own: a throwing closure leaves no trace.
/// A zone by name, as a write names it before it runs (`StorageDriver.write(inZone:_:)`).
public struct ZoneOrder: Hashable, Sendable {
    public let database: DatabaseKey
    public let zoneName: String

    public init(database: DatabaseKey, zoneName: String) {
        self.database = database
        self.zoneName = zoneName
    }
}

extension StorageDriver {
    public func write<Value: Sendable>(inZone zone: ZoneOrder, _ body: @escaping @Sendable (UnitOfWork) throws -> Value)
        async throws -> Value
    {
        try await write(in: zone.database, body)
    }

    public func read<Value: Sendable>(
        _ kind: ReadKind, in database: DatabaseKey, _ body: @escaping @Sendable (ReadUnit) throws -> Value
    ) async throws -> Value {
        try await read(kind, body)
    }

    public func write<Value: Sendable>(in database: DatabaseKey, _ body: @escaping @Sendable (UnitOfWork) throws -> Value)
        async throws -> Value
    {
        try await write(body)
    }

    public func readEveryPartition<Value: Sendable>(_ kind: ReadKind, _ body: @escaping @Sendable (ReadUnit) throws -> Value)
        async throws -> [Value]
    {
        [try await read(kind, body)]
    }

    public func writeEveryPartition<Value: Sendable>(_ body: @escaping @Sendable (UnitOfWork) throws -> Value)
        async throws -> [Value]
    {
        [try await write(body)]
    }

    public func partitionGroups(_ databases: [DatabaseKey]) async throws -> [[DatabaseKey]] {
        databases.isEmpty ? [] : [databases]
    }

    /// A `.point` read of one logical database.
    public func read<Value: Sendable>(in database: DatabaseKey, _ body: @escaping @Sendable (ReadUnit) throws -> Value)
        async throws -> Value
    {
        try await read(.point, in: database, body)
    }
}

public protocol StorageDriver: Sendable {
    /// Runs `body` on a consistent snapshot of committed data. `kind` says how much work the
    /// read may take: a driver serves `.scan` reads so that they never hold up `.point` ones.
    func read<Value: Sendable>(_ kind: ReadKind, _ body: @escaping @Sendable (ReadUnit) throws -> Value) async throws
        -> Value

    /// Runs `body` in a transaction and returns once it is durably committed (as durable as
    /// the driver's configured synchronous mode).
    func write<Value: Sendable>(_ body: @escaping @Sendable (UnitOfWork) throws -> Value) async throws -> Value

    /// `write`, for a transaction that writes in one zone only (a records/modify request): a
    /// driver that orders writes may order it with the writes of that zone alone, so a busy
    /// zone never holds up another (CloudKit orders writes per zone). Others just `write` (in
    /// the zone's database).
    func write<Value: Sendable>(inZone zone: ZoneOrder, _ body: @escaping @Sendable (UnitOfWork) throws -> Value)
        async throws -> Value

    /// `read` and `write`, for a transaction over one logical database's rows (its zones,
    /// records and subscriptions): a driver that keeps databases on several partitions runs it
    /// on the one that holds `database` (docs/scale-out.md, "Partitions: the design"); one
    /// store just runs it. Transactions that name no database (containers, the schema, the
    /// notification pipeline) use `read` and `write`. A transaction over several databases
    /// (a user's shared zones) is one transaction per database.
    func read<Value: Sendable>(_ kind: ReadKind, in database: DatabaseKey, _ body: @escaping @Sendable (ReadUnit) throws -> Value)
        async throws -> Value
    func write<Value: Sendable>(in database: DatabaseKey, _ body: @escaping @Sendable (UnitOfWork) throws -> Value)
        async throws -> Value

    /// `body` once on each partition, for a read of rows of every database (every stored
    /// subscription): the results, the home's first. One store answers once.
    func readEveryPartition<Value: Sendable>(_ kind: ReadKind, _ body: @escaping @Sendable (ReadUnit) throws -> Value)
        async throws -> [Value]

    /// `databases` grouped so that each group lives on one partition, for a read over several
    /// (`read(_:in:_:)` with any of a group names the partition of all). One store: one group.
    func partitionGroups(_ databases: [DatabaseKey]) async throws -> [[DatabaseKey]]

    /// `body` once on each partition, the home's first, for a write every partition makes over
    /// its own rows (an index granted in production, which each partition's records must be
    /// indexed for); schema changes it makes are each partition's own, not shared again. One
    /// store writes once.
    func writeEveryPartition<Value: Sendable>(_ body: @escaping @Sendable (UnitOfWork) throws -> Value) async throws -> [Value]

    /// Containers, API tokens, users, sessions (the coarse, async form).
    var accounts: any AccountStore { get }
    /// Push registrations and APNs credentials (the coarse, async form).
    var push: any PushStore { get }
    /// The registry of asset blobs (the coarse, async form; docs/assets.md).
    var assets: any AssetStore { get }
    /// Short GUIDs and share memberships (the coarse, async form; docs/sharing.md).
    var shares: any ShareStore { get }
    /// Outcomes of modify requests by operation ID (the coarse, async form; docs/protocol.md, "operationID").
    var operations: any OperationOutcomeStore { get }
    /// The dashboard's operators, their sessions and the audit log (the coarse, async form; docs/dashboard.md).
    var operators: any OperatorStore { get }
    /// This store's side of being one partition among several (ids, forwarded outboxes).
    var partitioning: any PartitionStore { get }

    /// Every partition but the home, for the notification pipeline, which forwards each one's
    /// change outbox to the home's and indexes each one's subscriptions (docs/scale-out.md).
    /// Empty for one store.
    var otherPartitions: [StoragePartition] { get }

    /// Finishes pending writes and releases the store.
    func close() async throws

    /// What every process on the store commits for the notification pipeline, heard as it
    /// commits (several nodes on one PostgreSQL); nil when the engine sends no such signals,
    /// and the pipeline then finds other processes' work by polling alone. Hints only: a
    /// signal may be lost, never the work it points to.
    func signals() -> AsyncStream<StoreSignal>?
}

extension StorageDriver {
    public func signals() -> AsyncStream<StoreSignal>? { nil }
    public var otherPartitions: [StoragePartition] { [] }
}

/// A driver over another (retries, injected faults, partitions) that keeps the other's side
/// stores (accounts, push, assets, shares, operation outcomes, operators) and its signals.
public protocol WrappingStorageDriver: StorageDriver {
    /// The driver whose side stores and signals these are.
    var wrapped: any StorageDriver { get }
}

extension WrappingStorageDriver {
    public var accounts: any AccountStore { wrapped.accounts }
    public var push: any PushStore { wrapped.push }
    public var assets: any AssetStore { wrapped.assets }
    public var shares: any ShareStore { wrapped.shares }
    public var operations: any OperationOutcomeStore { wrapped.operations }
    public var operators: any OperatorStore { wrapped.operators }
    public var partitioning: any PartitionStore { wrapped.partitioning }
    public var otherPartitions: [StoragePartition] { wrapped.otherPartitions }
    public func signals() -> AsyncStream<StoreSignal>? { wrapped.signals() }
}

/// What a commit left for the notification pipeline (`StorageDriver.signals()`).
public enum StoreSignal: String, Sendable {
    /// Change outbox entries to match.
    case outboxAppended = "outbox"
    /// Notifications stored in a collection, to push.
    case notificationsStored = "notifications"
}

/// How much work a read may do, so a driver can keep long reads from stalling short ones, and
/// whether a read replica may answer it.
public struct ReadKind: Sendable, Hashable {
    public enum Size: Sendable, Hashable {
        /// Bounded by the keys it names (a lookup, a token, a subscription list): it runs where
        /// it is called, without a hop to another thread.
        case point
        /// Work that grows with the data (a query, a change-feed page): the driver runs it on
        /// threads of its own, a bounded number at once, so a slow one never parks the threads
        /// that every request's async work needs. Queries also carry a time budget
        /// (`RecordQuery.budget`).
        case scan
    }
    public var size: Size
    /// Whether a read replica that has every write this node committed may answer it instead
    /// of the primary (PostgreSQL's standbys, docs/scale-out.md "Read replicas"): what a client
    /// reads back (lookups, queries, change feeds, zone lists). Reads the node decides from
    /// (the notification pipeline, a write's own loads, sign-in) stay on the primary.
    public var replicaMayServe: Bool

    public static let point = ReadKind(size: .point, replicaMayServe: false)
    public static let scan = ReadKind(size: .scan, replicaMayServe: false)

    /// The same read, which a caught-up replica may answer.
    public var onReplica: ReadKind { ReadKind(size: size, replicaMayServe: true) }
}

extension StorageDriver {
    /// A `.point` read.
    public func read<Value: Sendable>(_ body: @escaping @Sendable (ReadUnit) throws -> Value) async throws -> Value {
        try await read(.point, body)
    }
}

/// How to open the storage a server runs on, chosen by the composition root (the CLI from
/// `--database`, a test): NimbusCore and NimbusServer never name a driver. `open` receives the
/// data directory, where an embedded driver keeps its files unless told otherwise.
public struct StorageOpener: Sendable {
    /// What the server prints at start: the driver and where its data is.
    public var description: @Sendable (_ dataDirectory: String) -> String
    /// Async: a networked engine connects and migrates before the server listens.
    public var open: @Sendable (_ dataDirectory: String) async throws -> any StorageDriver
    /// How a backup's copy of this engine's store becomes the store `open` opens (`nimbus
    /// restore`); nil when the driver cannot restore.
    public var restorer: StoreRestorer?
    /// The file an embedded store lives in, so a command can tell a data directory that holds
    /// none (a mistyped `--data-dir`) before `open` makes a new one; nil for a networked engine.
    public var storeFile: (@Sendable (_ dataDirectory: String) -> String)?

    public init(
        description: @escaping @Sendable (_ dataDirectory: String) -> String,
        open: @escaping @Sendable (_ dataDirectory: String) async throws -> any StorageDriver,
        restorer: StoreRestorer? = nil, storeFile: (@Sendable (_ dataDirectory: String) -> String)? = nil
    ) {
        self.description = description
        self.open = open
        self.restorer = restorer
        self.storeFile = storeFile
    }
}
