/// Where Nimbus keeps its data, spoken in CloudKit's terms (containers, logical databases,
/// zones, records, change sequences) rather than in one database's dialect.
///
/// A transaction is a closure: everything it does commits together or not at all, and the
/// handle it receives lives only inside it.
///
/// ```swift
/// let zone = try await storage.write { tx in
///     let database = try tx.ensureDatabase(key)
///     return try tx.createZone(databaseID: database.id, name: "Notes")
/// }
/// ```
///
/// Drivers may group concurrent `write` calls into one commit (SQLite does), but each call
/// still succeeds or fails on its own: a throwing closure leaves no trace.
extension StorageReader {
    public func expect(records names: [String], inZone zoneName: String, of database: DatabaseKey) {}
}

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
    public func write<Value: Sendable>(inZone zone: ZoneOrder, _ body: @escaping @Sendable (any StorageWriter) throws -> Value)
        async throws -> Value
    {
        try await write(body)
    }
}

public protocol StorageDriver: Sendable {
    /// Runs `body` on a consistent snapshot of committed data. `kind` says how much work the
    /// read may take: a driver serves `.scan` reads so that they never hold up `.point` ones.
    func read<Value: Sendable>(_ kind: ReadKind, _ body: @escaping @Sendable (any StorageReader) throws -> Value) async throws
        -> Value

    /// Runs `body` in a transaction and returns once it is durably committed (as durable as
    /// the driver's configured synchronous mode).
    func write<Value: Sendable>(_ body: @escaping @Sendable (any StorageWriter) throws -> Value) async throws -> Value

    /// `write`, for a transaction that writes in one zone only (a records/modify request): a
    /// driver that orders writes may order it with the writes of that zone alone, so a busy
    /// zone never holds up another (CloudKit orders writes per zone). Others just `write`.
    func write<Value: Sendable>(inZone zone: ZoneOrder, _ body: @escaping @Sendable (any StorageWriter) throws -> Value)
        async throws -> Value

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
}

/// What a commit left for the notification pipeline (`StorageDriver.signals()`).
public enum StoreSignal: String, Sendable {
    /// Change outbox entries to match.
    case outboxAppended = "outbox"
    /// Notifications stored in a collection, to push.
    case notificationsStored = "notifications"
}

/// How much work a read may do, so a driver can keep long reads from stalling short ones.
public enum ReadKind: Sendable {
    /// Bounded by the keys it names (a lookup, a token, a subscription list): it runs where
    /// it is called, without a hop to another thread.
    case point
    /// Work that grows with the data (a query, a change-feed page): the driver runs it on
    /// threads of its own, a bounded number at once, so a slow one never parks the threads
    /// that every request's async work needs. Queries also carry a time budget
    /// (`RecordQuery.budget`).
    case scan
}

extension StorageDriver {
    /// A `.point` read.
    public func read<Value: Sendable>(_ body: @escaping @Sendable (any StorageReader) throws -> Value) async throws -> Value {
        try await read(.point, body)
    }
}

/// Reads, valid inside one transaction closure.
public protocol StorageReader {
    /// A hint, before reading them, of rows the transaction is about to read by name: the
    /// database, one of its zones, and records of that zone (none for the zone alone). A unit of
    /// work (`UnitOfWork`) loads all three levels at once: over the network in one round trip
    /// instead of one level at a time, stopping the transaction here to run it again with them;
    /// in process (SQLite) at once, a batch's records in a few statements, and the run goes on.
    func expect(records names: [String], inZone zoneName: String, of database: DatabaseKey) throws

    // MARK: Installation-wide
    /// A random secret made when the store was created; keys for tokens derive from it.
    func installationSecret() throws -> [UInt8]

    // MARK: Containers (the rest of accounts is `AccountStore`)
    func container(id: String) throws -> ContainerRow?
    func containers() throws -> [ContainerRow]

    // MARK: Databases and zones
    func database(_ key: DatabaseKey) throws -> DatabaseRow?
    func zone(databaseID: Int64, name: String) throws -> ZoneRow?
    /// Live zones (not tombstones), by name.
    func zones(databaseID: Int64) throws -> [ZoneRow]
    /// Zones (live and deleted) whose change sequence is after `sequence`, oldest change first.
    func zoneChanges(databaseID: Int64, after sequence: Int64, limit: Int) throws -> [ZoneRow]

    // MARK: Records
    /// The record or its tombstone.
    func record(zoneID: Int64, name: String) throws -> RecordRow?
    /// Records and tombstones changed after `sequence`, in change order. `recordTypes`
    /// restricts the result when given.
    func recordChanges(zoneID: Int64, after sequence: Int64, recordTypes: [String]?, limit: Int) throws -> [RecordRow]
    /// Live records of a type in every database of a container environment, with their
    /// storage ids, in storage-id order after `afterID`: for rebuilding index entries.
    func liveRecords(container: String, environment: Environment, recordType: String, afterID: Int64, limit: Int) throws
        -> [(id: Int64, row: RecordRow)]

    // MARK: References
    /// References with `action` that point at the record.
    func referrers(targetZoneID: Int64, targetName: String, action: String) throws -> [ReferenceRow]

    // MARK: Queries
    /// Live records of the query's type matching every condition, in sort order (ties by the
    /// driver's record id), after `query.after`, at most `query.limit`.
    func queryRecords(_ query: RecordQuery) throws -> QueryPage

    // MARK: Schema
    func schemaFields(container: String, environment: Environment) throws -> [SchemaFieldRow]
    func schemaRecordTypes(container: String, environment: Environment) throws -> [String]

    // MARK: Subscriptions and notifications
    /// One user's subscriptions to one database, by subscription ID.
    func subscriptions(databaseID: Int64, userID: Int64) throws -> [SubscriptionRow]
    func subscription(databaseID: Int64, userID: Int64, subscriptionID: String) throws -> SubscriptionRow?
    /// Every subscription of the installation (to build the matcher's index at start).
    func allSubscriptions() throws -> [SubscriptionRow]
    /// The owner's notifications after `sequence`, oldest first.
    func notifications(owner: NotificationOwner, after sequence: Int64, limit: Int) throws -> [NotificationRow]
    /// Every owner's notifications after `sequence`, oldest first: what live delivery pushes.
    /// Sequences become visible in order (a later one is never seen before an earlier one
    /// commits), so a reader that remembers the last it saw misses none.
    func notifications(after sequence: Int64, limit: Int) throws -> [NotificationRow]
    /// The newest notification's sequence (0 when there is none).
    func newestNotificationSequence() throws -> Int64
    /// A number that changes whenever any subscription is saved or deleted, by any process:
    /// a node whose subscription index was built at another version builds it again.
    func subscriptionsVersion() throws -> Int64
    /// The subscriptions saved or deleted after `version`, oldest first, at most `limit`: how
    /// a node catches up. Nil when the driver no longer keeps changes that old (build the index
    /// again from `allSubscriptions`).
    func subscriptionChanges(after version: Int64, limit: Int) throws -> [SubscriptionChange]?
    /// The highest sequence removed by pruning: a token before it has missed notifications.
    func notificationsPrunedThrough() throws -> Int64
    /// The oldest entries of the change outbox, in the order their transactions committed
    /// (see `appendOutbox`).
    func outbox(limit: Int) throws -> [OutboxEntry]
    func badge(owner: NotificationOwner) throws -> Int64
}

/// Reads and writes, valid inside one write transaction closure.
public protocol StorageWriter: StorageReader {
    /// Runs `body` so that if it throws, its writes are undone and the transaction goes on.
    func savepoint<Value>(_ body: () throws -> Value) throws -> Value

    /// Whether a storage upgrade asked for the index entries of production records to be
    /// rewritten (it added a kind of entry older saves lack); asking clears the request.
    func takeIndexRebuildRequest() throws -> Bool

    /// The database's row, created with its default zone on first use.
    func ensureDatabase(_ key: DatabaseKey) throws -> DatabaseRow
    /// The sequence of a change to a record of `zone`: strictly greater than every sequence a
    /// record of the zone had before (never reused). The zone is also marked changed for its
    /// database's change feed (`ZoneRow.changeSequence`, stamped by the driver; a default zone,
    /// which no database feed lists, may be left unmarked). Sequences are ordered per zone:
    /// writers of different zones need not wait for one another to take them.
    func nextRecordSequence(in zone: ZoneRow) throws -> Int64

    /// Creates a zone, replacing a tombstone of the same name (with a new id), stamped with
    /// its database's next sequence.
    func createZone(databaseID: Int64, name: String) throws -> ZoneRow
    /// Marks a zone deleted (stamped with its database's next sequence) and removes its
    /// records, their references and their asset references; the bytes its live records took
    /// (`RecordRow.storedBytes`, and the sizes of the assets they held) leave its database's
    /// `usedBytes`.
    func deleteZone(id: Int64) throws
    /// Adds `bytes` (negative: frees them) to the database's `usedBytes`. The caller keeps it
    /// true for record saves and deletions; zone deletion keeps it itself. `quota` is what the
    /// caller checked growth against: a driver whose writers do not see one another's
    /// uncommitted usage refuses a commit that grows the database past it because of writes
    /// the caller did not see (`serializationFailure`, so the caller decides again).
    func addUsage(databaseID: Int64, bytes: Int64, quota: Int64) throws

    /// Inserts or replaces the record (or tombstone) with the same zone and name; returns its
    /// storage id, which stays the same for that zone and name while the zone exists.
    /// `isNew` promises there is no row (not even a tombstone) of that zone and name yet,
    /// which saves looking for one.
    @discardableResult
    func putRecord(_ row: RecordRow, isNew: Bool) throws -> Int64

    /// Indexes the record with storage id `recordID` by its typed fields and its type's grants,
    /// in the driver's own layout; `nil` (a deletion) removes what indexed it. `hadEntries`
    /// false promises nothing indexes it yet (a new record), which saves the deletes.
    func indexRecord(recordID: Int64, zoneID: Int64, recordType: String, _ record: IndexedRecord?, hadEntries: Bool) throws

    /// Replaces the outgoing references of a record (none after a deletion).
    func replaceReferences(sourceZoneID: Int64, sourceName: String, with rows: [ReferenceRow]) throws

    /// Replaces the blobs a record's asset fields hold (none after a deletion): what keeps a
    /// blob from collection (`AssetStore.collectBlobs`). Their sizes count in the database's
    /// `usedBytes`, which the caller keeps true as for record bytes; a zone's deletion removes
    /// them and frees their bytes itself.
    func replaceAssetReferences(sourceZoneID: Int64, sourceName: String, container: String, with rows: [AssetReferenceRow])
        throws

    func addSchemaField(container: String, environment: Environment, _ field: SchemaFieldRow) throws
    /// Sets the index flags (`SchemaFieldRow.Indexes`) of a field that exists in the schema;
    /// returns false when it does not.
    func setSchemaFieldIndexes(container: String, environment: Environment, recordType: String, fieldName: String, indexes: Int)
        throws -> Bool

    func addSchemaRecordType(container: String, environment: Environment, _ recordType: String) throws

    /// Takes a field out of a schema, or (`fieldName` nil) a record type with all its fields.
    /// Only the schema: whoever calls it sees to the records first (docs/dashboard.md).
    func removeFromSchema(container: String, environment: Environment, recordType: String, fieldName: String?) throws

    /// Inserts or replaces the subscription with the same database, user and ID (and changes
    /// `subscriptionsVersion`).
    func putSubscription(_ row: SubscriptionRow) throws
    /// Returns false when there was no such subscription (and changes `subscriptionsVersion`
    /// when there was).
    func deleteSubscription(databaseID: Int64, userID: Int64, subscriptionID: String) throws -> Bool
    /// Appends what this transaction changed, for subscription matching, to the change outbox:
    /// it commits with the change or not at all, so a change whose write was acknowledged is
    /// matched even if the process dies right after the commit. Entries of one database come
    /// out in the order of their commits.
    func appendOutbox(databaseID: Int64, body: [UInt8], createdAt: Int64) throws
    /// Removes matched entries (the same transaction stores their notifications).
    func removeOutbox(sequences: [Int64]) throws
    /// Appends to the owner's collection. Its sequence is handed out as it commits (so that
    /// sequences become visible in order), which is why it is not returned.
    func insertNotification(
        owner: NotificationOwner, notificationID: String, originDeviceID: String, payload: [UInt8], createdAt: Int64,
        delivery: NotificationDelivery
    ) throws
    /// Marks the owner's notifications with these IDs read; returns the IDs that exist.
    func markNotificationsRead(owner: NotificationOwner, notificationIDs: [String]) throws -> [String]
    /// Removes notifications created before `time`; returns how many.
    func pruneNotifications(createdBefore time: Int64) throws -> Int
    func setBadge(owner: NotificationOwner, value: Int64) throws
}

extension StorageWriter {
    /// Inserts or replaces the record (or tombstone) with the same zone and name.
    @discardableResult
    public func putRecord(_ row: RecordRow) throws -> Int64 { try putRecord(row, isNew: false) }
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
