/// The storage protocol in its coarse form, for engines where every statement is a network
/// round trip (docs/scale-out.md). A driver implements three calls and `UnitOfWorkDriver`
/// turns them into the whole `StorageDriver`:
///
/// - `load` reads committed rows by the keys a unit of work names (one round trip);
/// - `apply` commits a unit's writes in one transaction, after checking that what the unit
///   decided from is still so (`UnitOfWorkChanges.expectations`): if not, it throws
///   `StorageError.serializationFailure` and the unit runs again from fresh rows;
/// - `reserveIDs` hands out blocks of storage ids, so a unit can name new rows before they
///   exist (ids are never reused; gaps are fine).
///
/// NimbusCore's transaction closures run unchanged against the unit of work, in memory: a read
/// of something not loaded stops the closure, `load` fetches it, and the closure runs again
/// from the start with more rows at hand. Closures are pure already (`RetryingStorage` runs
/// them again too), so running one twice changes nothing.
public protocol CoarseStorage: Sendable {
    func load(_ request: LoadRequest) async throws -> LoadedRows
    func apply(_ changes: UnitOfWorkChanges) async throws
    func reserveIDs(_ kind: StorageIDKind, count: Int) async throws -> ClosedRange<Int64>

    var accounts: any AccountStore { get }
    var push: any PushStore { get }
    var assets: any AssetStore { get }
    var shares: any ShareStore { get }
    var operations: any OperationOutcomeStore { get }
    var operators: any OperatorStore { get }
    var partitioning: any PartitionStore { get }
    func close() async throws
    /// See `StorageDriver.signals()`.
    func signals() -> AsyncStream<StoreSignal>?

    /// Runs `body` over rows the engine answers in process, from one consistent view of the
    /// store (`UnitRowSource`), so a unit of work loads what it reads as it reads it and runs
    /// once; nil, without running it, when every load is a round trip (the default). `kind`
    /// says where a read runs (`ReadKind`); a write's decision is `.point`. The body is
    /// `@Sendable`: an engine may run it on a thread of its own (SQLite's scan lane).
    func withRowSource<Value>(_ kind: ReadKind, _ body: @Sendable (any UnitRowSource) throws -> Value) async throws -> Value?
}

extension CoarseStorage {
    public func signals() -> AsyncStream<StoreSignal>? { nil }
    public func withRowSource<Value>(_ kind: ReadKind, _ body: @Sendable (any UnitRowSource) throws -> Value) async throws -> Value? {
        nil
    }
}

/// Committed rows answered in process (SQLite, inside a read transaction): a load costs no
/// round trip, so a unit of work loads each key as it reads it instead of running again.
public protocol UnitRowSource {
    /// One key, as a unit reads it.
    func load(_ key: LoadKey, into rows: inout LoadedRows) throws
    /// A zone's records by name, with the zone and its database (as `.recordPath` keys would
    /// load them): what a batch's write reads first (`ReadUnit.expect`), without a key made,
    /// hashed and grouped again for each record.
    func load(records names: [String], inZone zoneName: String, of database: DatabaseKey, into rows: inout LoadedRows) throws
    /// A zone's records by name with the zone, in a database whose row the caller has (a
    /// lookup: the service keeps databases): one statement for what a fetch by ID reads.
    func load(records names: [String], inZone zoneName: String, ofDatabase database: DatabaseRow, into rows: inout LoadedRows)
        throws
    /// A scan, answered at once (a unit in process never asks the same one twice for nothing).
    func scan(_ scan: LoadScan) throws -> ScanResult
}

/// An engine that decides writes inside its own write transaction (SQLite: one writer, group
/// committed): a write's unit of work loads from that transaction as it reads, and what it
/// decided is applied there at once, with nothing to check, since nothing else wrote between
/// the reads and the writes. `UnitOfWorkDriver` uses it instead of its load-decide-apply loop.
public protocol InProcessStorage: CoarseStorage {
    func writeInProcess<Value: Sendable>(_ body: @escaping @Sendable (any UnitTransaction) throws -> Value) async throws -> Value
}

/// A networked engine that can give one writer a zone to itself for a while: the zone's turn.
/// Units are optimistic (load, decide, apply with checks), so two nodes flooding one zone can
/// keep invalidating each other's decisions; a zone pipeline that collided takes turns instead
/// (`UnitGroupCommitter`), and writers queue in the engine rather than fail and run again.
public protocol ZoneTurns: CoarseStorage {
    /// Runs `body` holding the zone's turn: the `load` and `apply` calls made from within
    /// `body` run in one transaction of the engine that holds the zone, so no other writer's
    /// apply touching the zone commits between them (it waits, then fails its check, and its
    /// pipeline takes turns too). Returns once that transaction has committed; on an error the
    /// transaction is rolled back and nothing `body` applied stays. A zone that does not exist
    /// (yet) holds nothing: `body` runs as it would have without the turn.
    func withZoneTurn<Value: Sendable>(_ zone: ZoneOrder, _ body: @escaping @Sendable () async throws -> Value) async throws
        -> Value
}

/// The write transaction a unit of work is decided and applied in (`InProcessStorage`).
public protocol UnitTransaction: UnitRowSource {
    /// Ids no row has: the transaction's rows are all it must pass (it holds the write lock).
    func newIDs(_ kind: StorageIDKind, count: Int) throws -> ClosedRange<Int64>
    /// The unit's writes, unchecked but for the records its creates took to be absent
    /// (`UnitOfWorkChanges.recordsAssumedAbsent`, and a new record's insert): one that exists
    /// throws `CreatedRecordExists`.
    func applyDecided(_ changes: UnitOfWorkChanges) throws
    /// Throws `CreatedRecordExists` when a record (or a tombstone) of one of `keys` exists.
    func requireAbsent(_ keys: Set<RecordKey>) throws
}

/// A unit decided in process took a record its write creates to be absent without reading it
/// (`ReadUnit.expect`), and the record, or its tombstone, exists: the unit is undone and
/// decided again from the records read (`UnitOfWorkDriver`). Never reaches a caller.
public struct CreatedRecordExists: Error, CustomStringConvertible {
    public let recordName: String
    public init(recordName: String) { self.recordName = recordName }
    public var description: String { "record '\(recordName)', created as new, exists" }
}

/// The kinds of rows whose ids a unit of work chooses.
public enum StorageIDKind: String, Sendable, CaseIterable {
    case database, zone, record
}

/// A key a unit of work may read by, answered from committed data.
public enum LoadKey: Hashable, Sendable {
    case installationSecret
    case indexRebuildRequest
    case containers
    case container(String)
    case database(DatabaseKey)
    case databaseByID(Int64)
    case zone(databaseID: Int64, name: String)
    case zoneByID(Int64)
    case zones(databaseID: Int64)
    case record(zoneID: Int64, name: String)
    /// A zone by its database's key and its name, with the database (and, as for `zone`, the
    /// schema): what `zone` needs two round trips for, the database's id first.
    case zonePath(DatabaseKey, zoneName: String)
    /// A record by its database's key, its zone's name and its name, with the database and the
    /// zone (`ReadUnit.expect`): three levels in one round trip.
    case recordPath(DatabaseKey, zoneName: String, recordName: String)
    case referrers(zoneID: Int64, name: String, action: String)
    case schema(container: String, environment: Environment)
    case subscriptions(databaseID: Int64, userID: Int64)
    case subscriptionsVersion
    case notificationsPrunedThrough
    case newestNotificationSequence
    case badge(NotificationOwner)
}

/// A read whose size grows with the data: answered as asked, from committed data (a unit of
/// work's own writes are not in it).
public enum LoadScan: Sendable, Hashable {
    /// Zones stamped in `(after, through]` of their database's feed, oldest first.
    case zoneChanges(databaseID: Int64, after: Int64, through: Int64, limit: Int)
    case recordChanges(zoneID: Int64, after: Int64, recordTypes: [String]?, limit: Int)
    case liveRecords(container: String, environment: Environment, recordType: String, afterID: Int64, limit: Int)
    case query(RecordQuery)
    case allSubscriptions
    case subscriptionChanges(after: Int64, limit: Int)
    case ownerNotifications(NotificationOwner, after: Int64, limit: Int)
    case notifications(after: Int64, limit: Int)
    case existingNotificationIDs(NotificationOwner, [String])
    case outbox(limit: Int)
    case notificationsCreatedBefore(Int64)
}

/// What a scan returned.
public enum ScanResult: Sendable {
    case zones([ZoneRow])
    case records([RecordRow])
    case identifiedRecords([(id: Int64, row: RecordRow)])
    case page(QueryPage)
    case subscriptions([SubscriptionRow])
    case subscriptionChanges([SubscriptionChange]?)
    case notifications([NotificationRow])
    case strings([String])
    case outbox([OutboxEntry])
    case count(Int)
    /// The scan failed in a way the closure handles itself (a query past its time budget):
    /// thrown where the closure makes the call.
    case failed(StorageError)
}

public struct LoadRequest: Sendable {
    public var keys: Set<LoadKey>
    /// A scan is its own identity: the same call with the same arguments, whenever a closure
    /// makes it, is answered by the same result (a closure that skips a scan on its second run,
    /// say because this process's subscription index caught up meanwhile, still reads right).
    /// Hashed, not printed: its printed form cost an eighth of a query's CPU on PostgreSQL.
    public var scans: Set<LoadScan>
    /// Whether a zone's load brings its database's schema along. Writes and queries read the
    /// schema next (to check fields, to plan), so it saves them a round trip; a point read (a
    /// lookup, a zone fetch) never reads it, and on PostgreSQL planning its three branches cost
    /// more than the rest of a lookup's first statement.
    public var schemaWithZones: Bool
    /// Whether a schema the load brings comes with the version it was read at
    /// (`StoredSchema.version`): a write's, which the zone's next unit may carry (`DecidedRows`).
    /// A read never carries its rows, and a query's load had no use for the extra branch.
    public var schemaWithVersion: Bool
    /// Which server may answer, for an engine with read replicas; others have one and ignore it.
    public var source: LoadSource

    public init(
        keys: Set<LoadKey> = [], scans: Set<LoadScan> = [], schemaWithZones: Bool = true, schemaWithVersion: Bool = false,
        source: LoadSource = .primary
    ) {
        self.keys = keys
        self.scans = scans
        self.source = source
        self.schemaWithZones = schemaWithZones
        self.schemaWithVersion = schemaWithVersion
    }
}

/// Committed rows, by the key they were loaded by. A key that was loaded and found nothing is
/// present with nil (or an empty list).
/// Which server may answer a load (`LoadRequest.source`), for an engine with read replicas.
public enum LoadSource: Sendable, Hashable {
    /// The primary: every write's loads, and reads a node decides from.
    case primary
    /// A replica that has every write this node committed, or the primary when none has
    /// (`ReadKind.replicaMayServe`).
    case caughtUpReplica
    /// The server that answered this unit's first load (`LoadedRows.server`): a unit's later
    /// loads never read an older state than its earlier ones did.
    case server(Int)
}

public struct LoadedRows: Sendable {
    /// Which replica answered (the engine's own numbering), nil for the primary.
    public var server: Int?
    public var installationSecret: [UInt8]?
    public var indexRebuildPending: Bool?
    public var containers: [ContainerRow]?
    public var container: [String: ContainerRow?] = [:]
    public var databases: [DatabaseKey: DatabaseRow?] = [:]
    public var databasesByID: [Int64: DatabaseRow?] = [:]
    public var zones: [ZoneKey: ZoneRow?] = [:]
    public var zonesByID: [Int64: ZoneRow?] = [:]
    public var zoneLists: [Int64: [ZoneRow]] = [:]
    public var records: [RecordKey: StoredRecord?] = [:]
    public var referrers: [ReferrerKey: [ReferenceRow]] = [:]
    public var schemas: [SchemaKey: StoredSchema] = [:]
    public var subscriptions: [SubscriberKey: [SubscriptionRow]] = [:]
    public var subscriptionsVersion: Int64?
    public var notificationsPrunedThrough: Int64?
    public var newestNotificationSequence: Int64?
    public var badges: [NotificationOwner: Int64] = [:]
    public var scans: [LoadScan: ScanResult] = [:]

    public init() {}

    /// Adds what `other` loaded that this has not: a row already here stays as it was read.
    /// A unit's later load may carry rows it read before (PostgreSQL answers loads that waited
    /// together, `PostgresKeyLoads`), and a unit decides from the rows it read, not newer ones.
    public mutating func merge(_ other: LoadedRows) {
        installationSecret = installationSecret ?? other.installationSecret
        indexRebuildPending = indexRebuildPending ?? other.indexRebuildPending
        containers = containers ?? other.containers
        Self.keepFirst(&container, other.container)
        Self.keepFirst(&databases, other.databases)
        Self.keepFirst(&databasesByID, other.databasesByID)
        Self.keepFirst(&zones, other.zones)
        Self.keepFirst(&zonesByID, other.zonesByID)
        Self.keepFirst(&zoneLists, other.zoneLists)
        Self.keepFirst(&records, other.records)
        Self.keepFirst(&referrers, other.referrers)
        Self.keepFirst(&schemas, other.schemas)
        Self.keepFirst(&subscriptions, other.subscriptions)
        subscriptionsVersion = subscriptionsVersion ?? other.subscriptionsVersion
        notificationsPrunedThrough = notificationsPrunedThrough ?? other.notificationsPrunedThrough
        newestNotificationSequence = newestNotificationSequence ?? other.newestNotificationSequence
        Self.keepFirst(&badges, other.badges)
        Self.keepFirst(&scans, other.scans)
    }

    /// `mine` with the keys of `theirs` it lacks. Most of a unit's dictionaries are empty on
    /// one side (a fetch's first load fills every one from nothing): then the other side is
    /// taken as it is, shared, where `Dictionary.merge` hashed every key into new storage
    /// (8.6% of a PostgreSQL node's CPU for a fetch by ID, docs/benchmarks.md).
    @inline(__always)
    private static func keepFirst<Key: Hashable, Value>(_ mine: inout [Key: Value], _ theirs: [Key: Value]) {
        if theirs.isEmpty { return }
        if mine.isEmpty {
            mine = theirs
        } else {
            mine.merge(theirs) { first, _ in first }
        }
    }
}

public struct ZoneKey: Hashable, Sendable {
    public var databaseID: Int64
    public var name: String
    public init(databaseID: Int64, name: String) {
        self.databaseID = databaseID
        self.name = name
    }
}

public struct RecordKey: Hashable, Sendable {
    public var zoneID: Int64
    public var name: String
    public init(zoneID: Int64, name: String) {
        self.zoneID = zoneID
        self.name = name
    }
}

public struct ReferrerKey: Hashable, Sendable {
    public var zoneID: Int64
    public var name: String
    public var action: String
    public init(zoneID: Int64, name: String, action: String) {
        self.zoneID = zoneID
        self.name = name
        self.action = action
    }
}

public struct SchemaKey: Hashable, Sendable {
    public var container: String
    public var environment: Environment
    public init(container: String, environment: Environment) {
        self.container = container
        self.environment = environment
    }
}

public struct SubscriberKey: Hashable, Sendable {
    public var databaseID: Int64
    public var userID: Int64
    public init(databaseID: Int64, userID: Int64) {
        self.databaseID = databaseID
        self.userID = userID
    }
}

/// A record with its storage id.
public struct StoredRecord: Sendable, Hashable {
    public var id: Int64
    public var row: RecordRow
    public init(id: Int64, row: RecordRow) {
        self.id = id
        self.row = row
    }
}

/// A container environment's schema.
public struct StoredSchema: Sendable, Hashable {
    public var fields: [SchemaFieldRow]
    public var recordTypes: [String]
    /// The engine's schema version these rows were read at, where it keeps one (PostgreSQL:
    /// every schema change moves it): what a unit decided over a schema carried from the group
    /// before it checks when it is applied (`UnitOfWorkChanges.schemaVersionRead`).
    public var version: Int64?
    public init(fields: [SchemaFieldRow], recordTypes: [String], version: Int64? = nil) {
        self.fields = fields
        self.recordTypes = recordTypes
        self.version = version
    }
}

/// A unit of work's writes and what they were decided from.
public struct UnitOfWorkChanges: Sendable {
    public var writes: [StorageWrite] = []
    /// The record sequences of the zones whose records the unit changed, or that it deleted:
    /// the zone's `recordSequence` read and the one it leaves. `apply` refuses (with
    /// `serializationFailure`) when a zone's is no longer the one read or the zone was
    /// deleted meanwhile. Every change to a zone's records takes a sequence, so this one check
    /// covers everything the unit read of the zone; writers of other zones never fail it
    /// (issue 35: order only where CloudKit orders). Zones the unit created are not checked.
    public var zoneSequences: [Int64: (read: Int64, final: Int64)] = [:]
    /// Zones the unit made, deleted, or changed records of, that their database's change feed
    /// lists (a default zone's record changes are not listed): `apply` stamps each with one
    /// of the database's next sequences (`ZoneRow.changeSequence`) at its end, databases in id
    /// order, after taking the sequence above every record sequence those zones handed out.
    /// Writers of different zones queue only for that moment, instead of deciding the value
    /// and colliding. By zone id, each with its database's.
    public var zonesChanged: [Int64: Int64] = [:]
    /// Databases whose zone list the unit read and wrote from (the development reset): their
    /// `sequence` must still be the one read, which any zone change anywhere in them moves.
    public var databasesRead: [Int64: Int64] = [:]
    /// The subscriptions version the unit read, if it did, and how many changes it made: the
    /// version must still be the one read.
    public var subscriptionsVersion: (read: Int64, changes: Int64)?
    /// Badges read and then set: the value read must still be there.
    public var badgesRead: [NotificationOwner: Int64] = [:]
    /// Bytes added to (or freed from) each database's `usedBytes` by record writes, with what
    /// the unit read and the quota it checked growth against. Writers of other zones change
    /// the usage too, so `apply` adds the bytes whatever it finds, and refuses only growth
    /// that the usage it finds no longer leaves room for (`UsageChange.fits`). Zone deletions
    /// free their bytes in `apply` itself.
    public var usage: [Int64: UsageChange] = [:]
    /// Growth the unit refused for quota over a database row carried from its zone's last
    /// group (`DecidedRows`), whose used bytes may be seconds old: each database's smallest,
    /// beyond the usage read (the unit's own growth included). `apply` refuses the unit
    /// (`serializationFailure`, so it is decided again from fresh rows) when the usage it finds
    /// would let that growth fit (`UsageChange.isStillRefused`).
    public var quotaRefusalsOverCarriedRows: [Int64: UsageChange] = [:]
    /// Every database the unit writes in (records, zones, subscriptions; an outbox entry may
    /// name another database, a share's mirror, and does not count): a
    /// networked `apply` takes each one's row as it commits and refuses the unit when a move
    /// between partitions fenced it meanwhile (`DatabaseRelocation`), which the decision
    /// already refuses when it reads the fence.
    public var databasesWritten: Set<Int64> = []
    /// The schema version of a schema the unit decided over without loading it (carried from
    /// the group before it, `DecidedRows`): the engine's must still be that.
    public var schemaVersionRead: Int64?
    /// Records the unit took to be absent without loading them (creates in a zone whose rows
    /// the group before it left, `ReadUnit.expect`) and did not save: none may exist when it
    /// commits. One it saved is checked as every save is: a record under its name with
    /// another id fails the unit.
    public var recordsAssumedAbsent: Set<RecordKey> = []
    /// Zones whose rows an earlier group left and this unit decided over without changing
    /// them (`DecidedRows`), with the record sequence they were left at: each must still have
    /// it and not be deleted, so an answer decided over them (a conflict, a refusal, a record
    /// not found) is as true as one decided over rows loaded for it.
    public var zonesRead: [Int64: Int64] = [:]

    public init() {}

    /// Zones the unit makes (on their own, or as a new database's default zone): nothing
    /// committed to check them against.
    public var createdZones: Set<Int64> {
        var ids = Set<Int64>()
        for write in writes {
            switch write {
            case .createDatabase(_, let zoneID): ids.insert(zoneID)
            case .createZone(let zone, _): ids.insert(zone.id)
            default: break
            }
        }
        return ids
    }

    /// Nothing to write (what was read needs no check then: nothing commits).
    public var isEmpty: Bool {
        writes.isEmpty && zoneSequences.isEmpty && zonesChanged.isEmpty && usage.isEmpty && (subscriptionsVersion?.changes ?? 0) == 0
            && recordsAssumedAbsent.isEmpty && zonesRead.isEmpty && quotaRefusalsOverCarriedRows.isEmpty
    }
}

/// A unit's change to a database's `usedBytes`.
public struct UsageChange: Sendable, Hashable {
    /// What the unit read.
    public var read: Int64
    public var bytes: Int64
    /// What the unit checked growth against.
    public var quota: Int64

    public init(read: Int64, bytes: Int64, quota: Int64) {
        self.read = read
        self.bytes = bytes
        self.quota = quota
    }

    /// Whether growth refused over the usage read is still refused over `current`.
    public func isStillRefused(over current: Int64) -> Bool {
        let (total, overflow) = current.addingReportingOverflow(bytes)
        return overflow || total > quota
    }

    /// Whether the change may commit over `current`: what the unit read is still so (it
    /// decided exactly), or it frees bytes, or it still fits under the quota.
    public func fits(_ current: Int64) -> Bool {
        if current == read || bytes <= 0 { return true }
        let (total, overflow) = current.addingReportingOverflow(bytes)
        return !overflow && total <= quota
    }
}
