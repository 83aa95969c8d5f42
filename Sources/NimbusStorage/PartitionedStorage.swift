import Foundation
import Synchronization

/// Where logical databases live when a deployment has partitions (docs/scale-out.md,
/// "Partitions: the design"): kept by the home store, so every node reads the same answer.
public protocol PartitionCatalog: Sendable {
    /// The partition `database` was placed on; nil when it never was.
    func placement(of database: DatabaseKey) async throws -> String?
    /// Places `database` on `partition` unless it was placed already (by another node, say),
    /// and returns where it lives.
    func place(_ database: DatabaseKey, on partition: String) async throws -> String
    /// How many databases each partition holds (a partition with none may be missing).
    func placementCounts() async throws -> [String: Int]
    /// A number that moves whenever a placement changes (a move's switch), so nodes know when
    /// to forget the placements they keep; nil when placements never change.
    func placementsVersion() async throws -> Int64?
    /// Moves between partitions a crash or a refusal left half-way (`nimbus partitions move`).
    func movesUnderway() async throws -> [PartitionMoveUnderway]
}

extension PartitionCatalog {
    public func placementsVersion() async throws -> Int64? { nil }
    public func movesUnderway() async throws -> [PartitionMoveUnderway] { [] }
}

/// One database's move between partitions as the catalog records it: the step it runs next.
public struct PartitionMoveUnderway: Sendable, Hashable {
    public let database: DatabaseKey
    public let source: String
    public let target: String
    /// copy, fence, catch-up, switch or clean.
    public let nextStep: String
    /// Whether the database's writes are refused until the move is run again.
    public let fenced: Bool

    public init(database: DatabaseKey, source: String, target: String, nextStep: String, fenced: Bool) {
        self.database = database
        self.source = source
        self.target = target
        self.nextStep = nextStep
        self.fenced = fenced
    }
}

/// Several stores behind one driver, each a partition holding whole logical databases: a
/// transaction that names a database runs on the partition the catalog places it on, and
/// everything else (containers, the schema, accounts and the other side stores, the
/// notification pipeline) runs on the home, the first partition, which also keeps the catalog.
///
/// A database is placed when it is first written (`ensureDatabase` is a write, so every
/// database a request reaches is): one the home already holds (made before the deployment
/// had partitions) stays there; a new one goes to the partition holding the fewest of those
/// that answer and were added at least `newPartitionSettle` ago. Each partition hands out ids
/// from its own range (`PartitionIDs`). Nodes that race to place one database agree, since the
/// catalog keeps the first placement. A read of a database never placed runs on the home,
/// where it is absent or from before partitions.
///
/// A node that knows no partition but the home serves every database there without asking
/// the catalog, and asks it for partitions at most every `placementsRecheck`: so a node started
/// before the deployment's first partition learns of it well before any node places a
/// database there, and never makes a second copy of a database on the home. A partition's
/// first use on a node gives it the home's schema (what it lacks of it).
///
/// A node keeps each placement it has seen, and forgets them all when the catalog's placements
/// version moved (a user was moved: `nimbus partitions move`), which it checks at most every
/// `placementsRecheck`. A request that meets a moving database on its old partition
/// (`StorageError.moving`: the move's fence, or the pointer its switch left) reads the
/// placement again and goes where it leads; one that meets the fence itself fails with
/// `moving`, which clients see as TRY_AGAIN_LATER.
public final class PartitionedStorage: WrappingStorageDriver {
    /// The home's name among the partitions.
    public static let home = "home"

    private let homeStore: any StorageDriver
    /// The partitions this node knows, the home included; grows when `discover` finds more.
    private let partitions: Mutex<[String: StoragePartition]>
    /// The catalog's partitions now, each a store opened at its first use: asked when a
    /// placement names a partition this node does not know, at most every 5 s.
    private let discover: (@Sendable () async throws -> [StoragePartition])?
    private let lastDiscovery = Mutex<ContinuousClock.Instant?>(nil)
    private let catalog: any PartitionCatalog
    private let placed = Mutex<[DatabaseKey: String]>([:])
    /// When this node last asked for the catalog's placements version, and what it was.
    private let placementsChecked = Mutex<(at: ContinuousClock.Instant, version: Int64?)?>(nil)
    /// How often a node asks whether placements changed, and, while it knows no partition but
    /// the home, whether one was added: a move cleans its source up only after several of these
    /// (`PartitionMove.settle`), so no node reads a cleaned source.
    public static let placementsRecheck: Duration = .seconds(1)
    /// How long a partition just added takes no new database: by then every node has asked
    /// the catalog several times and routes to it (nodes' clocks in step to within a second).
    public static let newPartitionSettle: Duration = placementsRecheck * 5
    /// Milliseconds since 1970, to compare with when a partition was added.
    private let now: @Sendable () -> Int64
    /// Called when this node learns that a move switched a database's placement, before it
    /// reads where that database lives: PostgreSQL raises the home's replica floor then, so a
    /// database moved to the home (whose replicas are each node's own, not the catalog's, and
    /// so not waited for by the move) is read from them only once they have its copy.
    private let placementsMoved: (@Sendable () async -> Void)?
    /// Partitions whose id range this node has made sure of (`PartitionIDs`): before a
    /// partition's first transaction, so one that does not answer at start holds up nobody.
    private let rangesSet = Mutex<Set<String>>([PartitionedStorage.home])
    /// When a schema change was last not made on every partition, and when the schemas were
    /// last made equal to the home's since (`synchronizeSchemas`); nil: all are equal.
    fileprivate let schemasBehind = Mutex<(since: ContinuousClock.Instant, tried: ContinuousClock.Instant?)?>(nil)

    /// `partitions` besides the home, each with its catalog number (1 and up; the home is 0).
    /// `discover` lists the catalog's partitions again, so a partition added while this node
    /// runs is opened when this node first meets a database placed on it.
    public init(
        home: any StorageDriver, partitions: [StoragePartition], catalog: any PartitionCatalog,
        discover: (@Sendable () async throws -> [StoragePartition])? = nil,
        now: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970 * 1_000) },
        placementsMoved: (@Sendable () async -> Void)? = nil
    ) {
        precondition(Set(partitions.map(\.number)).count == partitions.count && partitions.allSatisfy { $0.number > 0 && $0.name != Self.home })
        var all = Dictionary(uniqueKeysWithValues: partitions.map { ($0.name, $0) })
        all[Self.home] = StoragePartition(name: Self.home, number: 0, store: home)
        self.homeStore = home
        self.partitions = Mutex(all)
        self.catalog = catalog
        self.discover = discover
        self.now = now
        self.placementsMoved = placementsMoved
    }

    public var wrapped: any StorageDriver { homeStore }

    /// The partitions' names, the home's first.
    public var names: [String] { [Self.home] + partitions.withLock { $0.keys.filter { $0 != Self.home }.sorted() } }

    public var otherPartitions: [StoragePartition] {
        let known = partitions.withLock { $0 }
        return names.dropFirst().compactMap { known[$0] }
    }

    /// Each partition this node knows, the home first, with why it could not be reached the
    /// last time it was tried (nil: it answers, or was not needed yet), for operators; none
    /// while the home is the only store.
    public var partitionStates: [(name: String, number: Int64, problem: String?)] {
        let others = otherPartitions
        guard !others.isEmpty else { return [] }
        return [(Self.home, 0, nil)] + others.map { ($0.name, $0.number, ($0.store as? LazyPartition)?.problem) }
    }

    /// Moves between partitions under way (an operator's dashboard shows them: a database
    /// left fenced refuses its writes until the move is run again).
    public func movesUnderway() async throws -> [PartitionMoveUnderway] { try await catalog.movesUnderway() }

    /// Asks the catalog for partitions this node does not know yet, unless it asked less than
    /// `interval` ago; true when it learned of one.
    private func discoverPartitions(atMostEvery interval: Duration = .seconds(5)) async throws -> Bool {
        guard let discover else { return false }
        let due = lastDiscovery.withLock { last -> Bool in
            if let last, ContinuousClock.now - last < interval { return false }
            last = ContinuousClock.now
            return true
        }
        guard due else { return false }
        let found = try await discover()
        return partitions.withLock { known in
            var added = false
            for partition in found where known[partition.name] == nil && partition.name != Self.home {
                known[partition.name] = partition
                added = true
            }
            return added
        }
    }

    /// Whether this node knows no partition but the home, and the catalog named none when it
    /// last asked, at most `placementsRecheck` ago: then every database is the home's and the
    /// catalog is not asked where one lives (a deployment that never adds a partition pays a
    /// small read a second for them).
    private func servesHomeOnly() async throws -> Bool {
        guard partitions.withLock({ $0.count == 1 }) else { return false }
        _ = try await discoverPartitions(atMostEvery: Self.placementsRecheck)
        return partitions.withLock { $0.count == 1 }
    }

    /// Whether the partition may take a new database: the home always, another once every node
    /// has had time to learn of it (`newPartitionSettle`).
    private func takesNewDatabases(_ name: String) -> Bool {
        guard name != Self.home, let added = partitions.withLock({ $0[name]?.addedAt }) else { return true }
        return now() - added >= Int64(Self.newPartitionSettle.components.seconds) * 1_000
    }

    /// Every partition's signals as one stream: a write on any partition wakes the pipeline.
    public func signals() -> AsyncStream<StoreSignal>? {
        // The partitions known as the pipeline starts; one discovered later is found by its poll.
        let streams = ([homeStore] + otherPartitions.map(\.store)).compactMap { $0.signals() }
        guard streams.count > 1 else { return streams.first }
        return AsyncStream { continuation in
            let tasks = streams.map { stream in
                Task { for await signal in stream { continuation.yield(signal) } }
            }
            continuation.onTermination = { _ in tasks.forEach { $0.cancel() } }
        }
    }

    /// The partition a database lives on, as this node last learned (nil: never placed).
    public func partition(of database: DatabaseKey) async throws -> String? {
        // Whether a move switched since this node last asked: at most every second for a
        // placement it keeps; for one it does not (first met, or forgotten after a move) at
        // once, before the catalog is read.
        await forgetPlacementsIfMoved(always: placed.withLock { $0[database] } == nil)
        if let known = placed.withLock({ $0[database] }) { return known }
        guard let name = try await catalog.placement(of: database) else { return nil }
        placed.withLock { $0[database] = name }
        return name
    }

    /// Forgets every placement kept when the catalog's placements version moved since this
    /// node last asked, at most every `placementsRecheck` unless `always` (the one request that
    /// asks waits for the answer; a home that does not answer leaves them as they are), and
    /// then tells `placementsMoved`.
    private func forgetPlacementsIfMoved(always: Bool = false) async {
        let now = ContinuousClock.now
        let due = placementsChecked.withLock { checked -> (due: Bool, version: Int64?) in
            if !always, let checked, now - checked.at < Self.placementsRecheck { return (false, nil) }
            let version = checked?.version
            checked = (now, version)
            return (true, version)
        }
        guard due.due, let version = try? await catalog.placementsVersion() else { return }
        placementsChecked.withLock { $0 = (now, version) }
        // The first answer since this node started counts as a move: one may have switched
        // before it, while this node kept nothing to forget but its replicas' floor.
        guard due.version != version else { return }
        placed.withLock { $0.removeAll() }
        await placementsMoved?()
    }

    /// `run` on the store of the partition `database` lives on (`pick` finds it: placing it
    /// first, for a write); when the database turns out to be moving off that partition, the
    /// placement is read again and `run` goes to the new one, if the move has switched it.
    private func routed<Value>(
        _ database: DatabaseKey, pick: (DatabaseKey) async throws -> String,
        _ run: (_ partition: String, _ store: any StorageDriver) async throws -> Value
    ) async throws -> Value {
        let name = try await pick(database)
        do {
            return try await run(name, try await store(named: name))
        } catch StorageError.moving(let detail) {
            placed.withLock { _ = $0.removeValue(forKey: database) }
            let now = try await pick(database)
            guard now != name else { throw StorageError.moving(detail) }
            return try await run(now, try await store(named: now))
        }
    }

    /// `run` on each partition in turn, the home's first, skipping `skipped`; the results in order.
    fileprivate func eachPartition<Value>(skipping skipped: String? = nil, _ run: (any StorageDriver) async throws -> Value)
        async throws -> [Value]
    {
        var values: [Value] = []
        for name in names where name != skipped { values.append(try await run(try await store(named: name))) }
        return values
    }

    fileprivate func store(named name: String) async throws -> any StorageDriver {
        var partition = partitions.withLock { $0[name] }
        if partition == nil, try await discoverPartitions() { partition = partitions.withLock { $0[name] } }
        guard let partition else {
            throw StorageError.unavailable("the catalog places a database on partition '\(name)', which this node does not have")
        }
        if !rangesSet.withLock({ $0.contains(name) }) {
            try await partition.store.partitioning.startIDs(atLeast: PartitionIDs.first(ofPartition: partition.number))
            // A partition added after the schema was made has none of it: a production write
            // there would be refused for types the deployment has.
            try await copySchemas(onto: partition.store, removingExtras: false)
            rangesSet.withLock { _ = $0.insert(name) }
        }
        return partition.store
    }

    private func partitionForReading(_ database: DatabaseKey) async throws -> String {
        if try await servesHomeOnly() { return Self.home }
        return try await partition(of: database) ?? Self.home
    }

    /// The partition a write of `database` runs on, placing the database if it never was.
    private func partitionForWriting(_ database: DatabaseKey) async throws -> String {
        if try await servesHomeOnly() { return Self.home }
        if let name = try await partition(of: database) { return name }
        let home = wrapped
        let fromBefore = try await home.read(.point, in: database) { try $0.database(database) != nil }
        var chosen = Self.home
        if !fromBefore, let target = try await moveTarget(forOwnerOf: database) {
            chosen = target
        } else if !fromBefore {
            // A partition that does not answer gets no new database: its user would be held
            // up until it came back. The home answered the read above.
            var candidates = names.filter(takesNewDatabases)
            while true {
                chosen = try await leastPlaced(among: candidates)
                if chosen == Self.home { break }
                do {
                    _ = try await store(named: chosen)
                    break
                } catch {
                    candidates.removeAll { $0 == chosen }
                }
            }
        }
        let name = try await catalog.place(database, on: chosen)
        placed.withLock { $0[database] = name }
        return name
    }

    /// Where a move of the database's owner under way goes (`nimbus partitions move`), for a
    /// new database of theirs, so the move leaves none behind; nil for a public database and
    /// when no move of theirs runs.
    private func moveTarget(forOwnerOf database: DatabaseKey) async throws -> String? {
        guard database.scope != .public else { return nil }
        return try await catalog.movesUnderway().first { $0.database.ownerID == database.ownerID }?.target
    }

    /// Of `candidates`, the partition holding the fewest databases; ties go to the first by
    /// name, the home first.
    private func leastPlaced(among candidates: [String]) async throws -> String {
        let counts = try await catalog.placementCounts()
        return candidates.min { counts[$0, default: 0] < counts[$1, default: 0] } ?? Self.home
    }

    public func read<Value: Sendable>(_ kind: ReadKind, _ body: @escaping @Sendable (ReadUnit) throws -> Value) async throws
        -> Value
    {
        try await wrapped.read(kind, body)
    }

    public func read<Value: Sendable>(
        _ kind: ReadKind, in database: DatabaseKey, _ body: @escaping @Sendable (ReadUnit) throws -> Value
    ) async throws -> Value {
        try await routed(database, pick: partitionForReading) { _, store in try await store.read(kind, in: database, body) }
    }

    public func partitionGroups(_ databases: [DatabaseKey]) async throws -> [[DatabaseKey]] {
        if try await servesHomeOnly() { return databases.isEmpty ? [] : [databases] }
        var groups: [String: [DatabaseKey]] = [:]
        var order: [String] = []
        for database in databases {
            let name = try await partition(of: database) ?? Self.home
            if groups[name] == nil { order.append(name) }
            groups[name, default: []].append(database)
        }
        return order.map { groups[$0] ?? [] }
    }

    public func readEveryPartition<Value: Sendable>(_ kind: ReadKind, _ body: @escaping @Sendable (ReadUnit) throws -> Value)
        async throws -> [Value]
    {
        try await eachPartition { try await $0.read(kind, body) }
    }

    public func writeEveryPartition<Value: Sendable>(_ body: @escaping @Sendable (UnitOfWork) throws -> Value)
        async throws -> [Value]
    {
        try await eachPartition { try await $0.write(body) }
    }

    public func write<Value: Sendable>(_ body: @escaping @Sendable (UnitOfWork) throws -> Value) async throws -> Value {
        try await sharingSchemaChanges(body, from: Self.home) { try await self.wrapped.write($0) }
    }

    public func write<Value: Sendable>(in database: DatabaseKey, _ body: @escaping @Sendable (UnitOfWork) throws -> Value)
        async throws -> Value
    {
        try await routed(database, pick: partitionForWriting) { name, store in
            try await sharingSchemaChanges(body, from: name) { try await store.write(in: database, $0) }
        }
    }

    public func write<Value: Sendable>(inZone zone: ZoneOrder, _ body: @escaping @Sendable (UnitOfWork) throws -> Value)
        async throws -> Value
    {
        try await routed(zone.database, pick: partitionForWriting) { name, store in
            try await sharingSchemaChanges(body, from: name) { try await store.write(inZone: zone, $0) }
        }
    }

    public func close() async throws {
        let known = partitions.withLock { $0 }
        for name in names.reversed() { try await known[name]?.store.close() }
    }
}

// MARK: The schema on every partition

/// Every partition keeps a copy of the schema (a unit loads it with its zones, from its own
/// store): the changes a committed write made to it (a deploy or an edit on the home, a
/// development write's just-in-time admissions on any partition) are made again on every
/// other partition. One that cannot be (a partition that does not answer) leaves the schemas
/// to be made equal to the home's (`synchronizeSchemas`) before the next write.
extension PartitionedStorage {
    fileprivate func sharingSchemaChanges<Value: Sendable>(
        _ body: @escaping @Sendable (UnitOfWork) throws -> Value, from origin: String,
        on write: (@escaping @Sendable (UnitOfWork) throws -> SchemaChanged<Value>) async throws -> SchemaChanged<Value>
    ) async throws -> Value {
        repairSchemasIfDue()
        let written = try await write { unit in SchemaChanged(value: try body(unit), changes: unit.schemaChanges) }
        guard !written.changes.isEmpty else { return written.value }
        do {
            _ = try await eachPartition(skipping: origin) { try await $0.write { unit in try unit.repeatSchemaChanges(written.changes) } }
        } catch {
            schemasBehind.withLock { $0 = $0 ?? (ContinuousClock.now, nil) }
        }
        return written.value
    }

    /// At most every ten seconds while some partition's schema is behind, in the background:
    /// a partition that does not answer must not hold up writes to the others.
    private func repairSchemasIfDue() {
        let due = schemasBehind.withLock { behind -> Bool in
            guard let state = behind else { return false }
            if let tried = state.tried, ContinuousClock.now - tried < .seconds(10) { return false }
            behind = (state.since, ContinuousClock.now)
            return true
        }
        if due { Task { try? await self.synchronizeSchemas() } }
    }

    /// Makes every partition's schema, every container's, both environments, the home's.
    public func synchronizeSchemas() async throws {
        let started = ContinuousClock.now
        _ = try await eachPartition(skipping: Self.home) { try await self.copySchemas(onto: $0, removingExtras: true) }
        // A change that failed to reach a partition after this began is still to be made.
        schemasBehind.withLock { if let behind = $0, behind.since <= started { $0 = nil } }
    }

    /// Gives `partition` the home's schema, every container's, both environments: what it
    /// lacks, and, with `removingExtras`, without what the home does not have.
    fileprivate func copySchemas(onto partition: any StorageDriver, removingExtras: Bool) async throws {
        let home = wrapped
        let schemas = try await home.read(.scan) { tx in
            try tx.containers().flatMap { container in
                try [Environment.development, .production].map { environment in
                    (
                        key: SchemaKey(container: container.id, environment: environment),
                        types: try tx.schemaRecordTypes(container: container.id, environment: environment),
                        fields: try tx.schemaFields(container: container.id, environment: environment)
                    )
                }
            }
        }
        try await partition.write { unit in
            for schema in schemas {
                let (container, environment) = (schema.key.container, schema.key.environment)
                if removingExtras {
                    let fields = Dictionary(schema.fields.map { ("\($0.recordType).\($0.fieldName)", $0) }, uniquingKeysWith: { $1 })
                    for type in try unit.schemaRecordTypes(container: container, environment: environment) where !schema.types.contains(type) {
                        try unit.removeFromSchema(container: container, environment: environment, recordType: type, fieldName: nil)
                    }
                    for field in try unit.schemaFields(container: container, environment: environment) {
                        let wanted = fields["\(field.recordType).\(field.fieldName)"]
                        if wanted == nil || wanted?.fieldType != field.fieldType {
                            try unit.removeFromSchema(
                                container: container, environment: environment, recordType: field.recordType, fieldName: field.fieldName)
                        }
                    }
                }
                for type in schema.types { try unit.addSchemaRecordType(container: container, environment: environment, type) }
                for field in schema.fields {
                    try unit.addSchemaField(container: container, environment: environment, field)
                    _ = try unit.setSchemaFieldIndexes(
                        container: container, environment: environment, recordType: field.recordType, fieldName: field.fieldName,
                        indexes: field.indexes)
                }
            }
        }
    }
}

/// A write's value with the schema changes its unit made.
struct SchemaChanged<Value: Sendable>: Sendable {
    var value: Value
    var changes: [StorageWrite]
}

// MARK: What is the home's

/// Budgets shared across nodes, the lasting request log and the pools' figures belong to no
/// user's data: they are the home's, as the accounts are; replicas are every partition's.
extension PartitionedStorage: SharedBudgetsStoring, RequestLogStoring, StoreFigures, StoreCopying {
    public var sharedBudgets: (any SharedBudgetLedger)? { (wrapped as? any SharedBudgetsStoring)?.sharedBudgets }
    public var requestLog: (any RequestLogStore)? { (wrapped as? any RequestLogStoring)?.requestLog }
    public func storeBytes() async throws -> Int64 { try await (wrapped as? any StoreFigures)?.storeBytes() ?? 0 }
    public var poolUse: PoolUse? { (wrapped as? any StoreFigures)?.poolUse }
    /// The home's replicas, and each opened partition's, named "partition/host:port".
    public var replicas: [ReplicaFigures] {
        var all = (wrapped as? any StoreFigures)?.replicas ?? []
        for partition in otherPartitions {
            for var replica in (partition.storeAsOpened as? any StoreFigures)?.replicas ?? [] {
                replica.name = "\(partition.name)/\(replica.name)"
                all.append(replica)
            }
        }
        return all
    }

    /// The home's copy while it is the only store; with partitions, a copy of the home alone
    /// would restore as a deployment that lost every partition's databases: refused, saying
    /// what to do instead.
    public func copyStore(into directory: String) async throws -> StoreCopy {
        if try await servesHomeOnly() {
            guard let home = wrapped as? any StoreCopying else { throw StoreCopyRefusal("this storage driver cannot make backups") }
            return try await home.copyStore(into: directory)
        }
        throw StoreCopyRefusal(
            "this deployment has partitions (\(names.joined(separator: ", "))), and `nimbus backup` copies one store: back up each partition's PostgreSQL with its own tools (pg_basebackup, or Patroni's), the home included")
    }
}
