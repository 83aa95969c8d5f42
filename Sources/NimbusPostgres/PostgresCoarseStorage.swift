import Foundation
import NIOCore
import NimbusStorage
import PostgresNIO

/// PostgreSQL behind the coarse protocol (`CoarseStorage`), which `UnitOfWorkDriver` turns into
/// the whole storage protocol: `load` reads committed rows by key in one statement (and each
/// scan in one more); `apply` is one call of the apply function (`PostgresApply`: one round
/// trip, one transaction); ids come in blocks from `id_blocks`.
/// Record queries are one statement each (`PostgresQuerySQL`).
public struct PostgresCoarseStorage: CoarseStorage {
    public let storage: PostgresStorage

    public init(_ storage: PostgresStorage) { self.storage = storage }

    public var accounts: any AccountStore { storage.accounts }
    public var push: any PushStore { storage.push }
    public var assets: any AssetStore { storage.assets }
    public var shares: any ShareStore { storage.shares }
    public var operations: any OperationOutcomeStore { storage.operations }
    public var operators: any OperatorStore { storage.operators }
    public var partitioning: any PartitionStore { storage.partitioning }
    public func close() async throws { await storage.close() }
    public func signals() -> AsyncStream<StoreSignal>? { storage.signals.stream(storage.primary, logger: storage.logger) }

    public func reserveIDs(_ kind: StorageIDKind, count: Int) async throws -> ClosedRange<Int64> {
        let rows = try await storage.rows(
            "UPDATE id_blocks SET next_id = next_id + \(Int64(count)) WHERE kind = \(kind.rawValue) RETURNING next_id - \(Int64(count))")
        guard let first = try rows.first?.decode(Int64.self) else { throw StorageError.corrupt("no id block for \(kind.rawValue)") }
        return first...(first + Int64(count) - 1)
    }

    public func apply(_ changes: UnitOfWorkChanges) async throws {
        let databaseOf = DatabaseOfZone(changes, memo: storage.zoneDatabases)
        // Zones made here are read by their ids next (a unit that makes a zone and then saves
        // into it): their databases are known from now on, as the unit knows them.
        storage.zoneDatabases.note(databaseOf.known.lazy.map { ($0.key, $0.value) })
        var rows = PostgresApply.Rows()
        let json = String(decoding: Self.json(changes, databases: databaseOf, rows: &rows).serialized(), as: UTF8.self)
        // The unit's database first, by which a Citus coordinator routes the call: NULL for a
        // unit of the coordinator's tables only, and for a group whose writes reach several
        // databases, which says so (scripts/statement-routes.py counts those).
        let touched = Self.databases(touchedBy: changes, databaseOf)
        let database = touched.count == 1 ? touched.first : nil
        let several = touched.count > 1 ? " AS several_databases" : ""
        var binds = PostgresBindings()
        binds.append(database)
        binds.append(json)
        rows.bind(into: &binds)
        try await storage.rows(PostgresQuery(unsafeSQL: PostgresApply.call + several, binds: binds))
        // Made and committed: every node reads these ids from the directory, this one knows them.
        storage.databaseIDs.note(changes.writes.lazy.compactMap { write in
            guard case .createDatabase(let row, _) = write else { return nil }
            return (row.key, row.id)
        })
        storage.plannerStatistics.noteChanges(on: storage)
        // Zones the unit marked pending in their databases' feeds, stamped once committed (a
        // turn's commit is still to come: a zone it holds is stamped by a later pass).
        if !changes.zonesChanged.isEmpty { storage.feedStamper.note(Set(changes.zonesChanged.values), on: storage) }
        // Inside a zone's turn the commit is still to come: the turn notes it (PostgresZoneTurns).
        if !storage.replicas.isEmpty && ZoneTurn.held == nil { await storage.replicas.noteCommit(on: storage) }
    }

    // MARK: Scans (loads by key: PostgresCoarseStorage+Load.swift)

    func scan(_ scan: LoadScan, on pools: (any PostgresPools)? = nil) async throws -> ScanResult {
        func rows(_ query: PostgresQuery) async throws -> [PostgresRow] { try await storage.rows(query, on: pools) }
        switch scan {
        case .zoneChanges(let databaseID, let after, let through, let limit):
            // On the primary the database's pending zones that no write holds are stamped first
            // (PostgresDatabaseFeed), so each change is listed once and pages never split them;
            // a stamp that fails leaves them pending, listed as such, which is as correct.
            if pools == nil, ZoneTurn.held == nil { try? await storage.stampFeed(of: databaseID) }
            // Stamped zones through the database's sequence in this statement's own snapshot
            // (PostgresDatabaseFeed: a stamp commits with the sequence that covers it), which
            // is at least `through`: a zone stamped since the caller read `through` is listed,
            // not skipped this time round. A zone still pending is listed at `through`, after
            // every stamped one: it will be stamped above it.
            let zones = try await rows(
                """
                SELECT \(unescaped: Self.zoneColumns), feed_pending FROM zones
                WHERE database_id = \(databaseID)
                  AND ((change_sequence > \(after)
                        AND change_sequence <= (SELECT sequence FROM databases WHERE id = \(databaseID))) OR feed_pending)
                ORDER BY feed_pending, change_sequence LIMIT \(Int64(limit))
                """
            ).map { try Self.zone($0, pendingAt: max(through, after)) }
            storage.zoneDatabases.note(zones.lazy.map { ($0.id, $0.databaseID) })
            return .zones(zones)
        case .recordChanges(let zoneID, let after, let recordTypes, let limit):
            let types = recordTypes ?? []
            return .records(
                try await rows(
                    """
                    SELECT \(unescaped: Self.recordColumns) FROM records
                    WHERE \(unescaped: storage.databaseCondition(ofZone: zoneID)) AND zone_id = \(zoneID) AND change_sequence > \(after)
                      AND (cardinality(\(types)::text[]) = 0 OR record_type = ANY(\(types)::text[]))
                    ORDER BY change_sequence LIMIT \(Int64(limit))
                    """
                ).map { try Self.storedRecord($0).row })
        case .liveRecords(let container, let environment, let recordType, let afterID, let limit):
            // The records' databases after their columns: an index rebuild writes their entries
            // next, naming each zone's database (`PostgresZoneDatabases`), on a node (`nimbus
            // schema index`) that may have read none of these zones.
            var zones: [(zone: Int64, database: Int64)] = []
            defer { storage.zoneDatabases.note(zones) }
            return .identifiedRecords(
                try await rows(
                    """
                    SELECT \(unescaped: Self.recordColumns.split(separator: ",").map { "r." + $0.trimmingCharacters(in: .whitespacesAndNewlines) }.joined(separator: ", ")), r.database_id
                    FROM records r JOIN zones z ON z.database_id = r.database_id AND z.id = r.zone_id JOIN databases d ON d.id = z.database_id
                    WHERE d.container = \(container) AND d.environment = \(environment.rawValue) AND r.record_type = \(recordType)
                      AND NOT r.deleted AND r.id > \(afterID)
                    ORDER BY r.id LIMIT \(Int64(limit))
                    """
                ).map { row in
                    let stored = try Self.storedRecord(row)
                    zones.append((stored.row.zoneID, try Array(row)[Self.recordColumnCount].decode(Int64.self)))
                    return (id: stored.id, row: stored.row)
                })
        case .query(let query):
            return try await page(query, on: pools)
        case .allSubscriptions:
            return .subscriptions(
                try await rows(
                    // A database being moved off this store has its subscriptions filed from its target
                    // (their copy there), so the source's removal as the move cleans up removes none.
                    "SELECT \(unescaped: Self.subscriptionColumns) FROM subscriptions s JOIN databases d ON d.id = s.database_id WHERE d.moving_to IS NULL"
                ).map(Self.subscription))
        case .subscriptionChanges(let after, let limit):
            let bounds = try await rows(
                "SELECT (SELECT min(version) FROM subscription_changes), (SELECT value FROM counters WHERE key = 'subscriptions_version')"
            ).first
            let (oldest, version) = try bounds?.decode((Int64?, Int64?).self) ?? (nil, nil)
            if let oldest, oldest > after + 1 { return .subscriptionChanges(nil) }
            if oldest == nil, (version ?? 0) > after { return .subscriptionChanges(nil) }
            return .subscriptionChanges(
                try await rows(
                    """
                    SELECT version, database_id, user_id, subscription_id FROM subscription_changes
                    WHERE version > \(after) ORDER BY version LIMIT \(Int64(limit))
                    """
                ).map { row in
                    let (version, databaseID, userID, subscriptionID) = try row.decode((Int64, Int64, Int64, String).self)
                    return SubscriptionChange(version: version, databaseID: databaseID, userID: userID, subscriptionID: subscriptionID)
                })
        case .ownerNotifications(let owner, let after, let limit):
            return .notifications(
                try await rows(
                    """
                    SELECT \(unescaped: Self.notificationColumns) FROM notifications
                    WHERE user_id = \(owner.userID) AND container = \(owner.container) AND environment = \(owner.environment.rawValue)
                      AND sequence > \(after)
                    ORDER BY sequence LIMIT \(Int64(limit))
                    """
                ).map(Self.notification))
        case .notifications(let after, let limit):
            return .notifications(
                try await rows(
                    "SELECT \(unescaped: Self.notificationColumns) FROM notifications WHERE sequence > \(after) ORDER BY sequence LIMIT \(Int64(limit))"
                ).map(Self.notification))
        case .existingNotificationIDs(let owner, let ids):
            let found = Set(
                try await rows(
                    """
                    SELECT DISTINCT notification_id FROM notifications
                    WHERE user_id = \(owner.userID) AND container = \(owner.container) AND environment = \(owner.environment.rawValue)
                      AND notification_id = ANY(\(ids)::text[])
                    """
                ).map { try $0.decode(String.self) })
            return .strings(ids.filter(found.contains))
        case .outbox(let limit):
            return .outbox(
                try await rows(
                    "SELECT sequence, database_id, body, created_at FROM change_outbox ORDER BY sequence LIMIT \(Int64(limit))"
                ).map { row in
                    let (sequence, databaseID, body, createdAt) = try row.decode((Int64, Int64, ByteBuffer, Int64).self)
                    return OutboxEntry(sequence: sequence, databaseID: databaseID, body: Array(body.readableBytesView), createdAt: createdAt)
                })
        case .notificationsCreatedBefore(let time):
            let count = try await rows(
                """
                SELECT count(*) FROM notifications
                WHERE sequence <= (SELECT max(sequence) FROM notifications WHERE created_at < \(time))
                """
            ).first?.decode(Int64.self) ?? 0
            return .count(Int(count))
        }
    }

    /// A page of a record query: one statement (`PostgresQuerySQL`), stopped by the server
    /// once it has run for the query's budget (`PostgresStorage.rows(_:timeout:)`).
    private func page(_ query: RecordQuery, on pools: (any PostgresPools)?) async throws -> ScanResult {
        let sql = PostgresQuerySQL(query)
        let rows = try await storage.rows(sql.query, timeout: query.budget, on: pools)
        var page = QueryPage(rows: [], positions: [])
        page.rows.reserveCapacity(rows.count)
        page.positions.reserveCapacity(rows.count)
        for row in rows {
            var cells = PostgresCells(row)
            let stored = try Self.storedRecord(&cells)
            // After the record's columns its id again, then one column per sort key (`PostgresQuerySQL.init`).
            cells.skip()
            var values: [IndexValue] = []
            values.reserveCapacity(query.sorts.count)
            for sort in query.sorts {
                switch sort.key {
                case .number: values.append(Self.indexValue(numericText: try cells.next(String.self)))
                case .text: values.append(.text(String(buffer: try cells.next(ByteBuffer.self))))
                case .distance: values.append(.number(try cells.next(Double.self)))
                }
            }
            page.rows.append(stored.row)
            page.positions.append(QueryPosition(sortValues: values, recordID: stored.id))
        }
        return .page(page)
    }

    // MARK: Rows

    static let zoneColumns = "id, database_id, name, change_sequence, record_sequence, deleted"

    /// A zone read as `zoneColumns`; with `pendingAt`, `feed_pending` after them, and a zone
    /// pending in its database's feed reads as changed at that sequence.
    static func zone(_ row: PostgresRow, pendingAt: Int64? = nil) throws -> ZoneRow {
        var cells = PostgresCells(row)
        let id = try cells.next(Int64.self), databaseID = try cells.next(Int64.self), name = try cells.next(String.self)
        var sequence = try cells.next(Int64.self)
        let recordSequence = try cells.next(Int64.self), deleted = try cells.next(Bool.self)
        if let pendingAt, try cells.next(Bool.self) { sequence = pendingAt }
        return ZoneRow(
            id: id, databaseID: databaseID, name: name, changeSequence: sequence, recordSequence: recordSequence, isDeleted: deleted)
    }

    static let recordColumns = """
        id, zone_id, record_name, record_type, fields, parent, change_sequence, created_at, created_by, created_device,
        modified_at, modified_by, modified_device, deleted
        """
    static let recordColumnCount = 14

    static func storedRecord(_ row: PostgresRow) throws -> StoredRecord {
        var cells = PostgresCells(row)
        return try storedRecord(&cells)
    }

    /// The record in `recordColumns`, read from the cells' next.
    static func storedRecord(_ cells: inout PostgresCells) throws -> StoredRecord {
        let id = try cells.next(Int64.self), zoneID = try cells.next(Int64.self)
        let name = try cells.next(String.self), type = try cells.next(String.self)
        let fields = try cells.next(ByteBuffer.self), parent = try cells.next(String?.self)
        let sequence = try cells.next(Int64.self)
        let createdAt = try cells.next(Int64.self), createdBy = try cells.next(String.self), createdDevice = try cells.next(String.self)
        let modifiedAt = try cells.next(Int64.self), modifiedBy = try cells.next(String.self), modifiedDevice = try cells.next(String.self)
        let deleted = try cells.next(Bool.self)
        return StoredRecord(
            id: id,
            row: RecordRow(
                zoneID: zoneID, recordName: name, recordType: type, fields: Array(fields.readableBytesView), parent: parent,
                changeSequence: sequence, created: ChangeStamp(timestamp: createdAt, userRecordName: createdBy, deviceID: createdDevice),
                modified: ChangeStamp(timestamp: modifiedAt, userRecordName: modifiedBy, deviceID: modifiedDevice), isDeleted: deleted))
    }

    static let subscriptionColumns = """
        s.database_id, s.user_id, s.subscription_id, s.definition, s.created_at, d.container, d.environment, d.scope, d.owner_id
        """

    static func subscription(_ row: PostgresRow) throws -> SubscriptionRow {
        let (databaseID, userID, subscriptionID, definition, createdAt, container, environment, scope, owner) = try row.decode(
            (Int64, Int64, String, ByteBuffer, Int64, String, String, String, Int64).self)
        return SubscriptionRow(
            databaseID: databaseID,
            database: DatabaseKey(
                container: container, environment: Environment(rawValue: environment) ?? .development,
                scope: DatabaseScope(rawValue: scope) ?? .public, ownerID: owner),
            userID: userID, subscriptionID: subscriptionID, definition: Array(definition.readableBytesView), createdAt: createdAt)
    }

    static let notificationColumns = """
        sequence, container, environment, user_id, notification_id, origin_device, payload, created_at, read, collapse_id, silent
        """

    static func notification(_ row: PostgresRow) throws -> NotificationRow {
        let (sequence, container, environment, userID, id, origin, payload, createdAt, read, collapseID, silent) = try row.decode(
            (Int64, String, String, Int64, String, String, ByteBuffer, Int64, Bool, String?, Bool).self)
        guard let environment = Environment(rawValue: environment) else {
            throw StorageError.corrupt("notification \(sequence) names environment \(environment)")
        }
        return NotificationRow(
            sequence: sequence, owner: NotificationOwner(container: container, environment: environment, userID: userID),
            notificationID: id, originDeviceID: origin, payload: Array(payload.readableBytesView), createdAt: createdAt, isRead: read,
            delivery: NotificationDelivery(collapseID: collapseID, isSilent: silent))
    }
}

extension PostgresStorage {
    /// The PostgreSQL database at `location` as the server's storage: the coarse driver behind
    /// a unit of work (`UnitOfWorkDriver`). The data directory keeps only what is a node's
    /// own (its logs, `bootstrap.json`); every node given the same location serves the same
    /// containers.
    public static func opener(
        _ location: PostgresLocation, readReplicas: [PostgresLocation] = [], maximumConnections: Int = defaultMaximumConnections
    ) -> StorageOpener {
        StorageOpener(
            description: { _ in
                "PostgreSQL at \(location)" + (readReplicas.isEmpty ? "" : ", read replicas " + readReplicas.map(\.description).joined(separator: ", "))
                    + ", pools of \(maximumConnections) connections"
            },
            open: { _ in
                let storage = try await PostgresStorage(location, readReplicas: readReplicas, maximumConnections: maximumConnections)
                return try await withPartitions(home: UnitOfWorkDriver(PostgresCoarseStorage(storage)), catalog: storage.partitionCatalog) {
                    location, replicas in
                    let partition: PostgresStorage
                    do {
                        partition = try await PostgresStorage(location, readReplicas: replicas, maximumConnections: maximumConnections)
                    } catch where !replicas.isEmpty {
                        // A replica that does not answer must not take its partition's users
                        // down with it: the primary serves every read until the next open.
                        storage.logger.error(
                            "a partition's read replicas could not be opened; its primary serves its reads",
                            metadata: ["partition": "\(location)", "error": "\(error)"])
                        partition = try await PostgresStorage(location, maximumConnections: maximumConnections)
                    }
                    return UnitOfWorkDriver(PostgresCoarseStorage(partition))
                }
            },
            restorer: PostgresStorage.restorer(location))
    }

    /// The home and every partition its catalog names (`nimbus partitions add`) behind
    /// `PartitionedStorage`, each partition opened (by `open`, with its read replicas) at its
    /// first use, so one that does not answer holds up no one else. With none yet, the home
    /// serves every database and the node asks the catalog once a second whether one was
    /// added, so a node started before the first partition serves it without a restart.
    public static func withPartitions(
        home: any StorageDriver, catalog: PostgresPartitionCatalog,
        open: @escaping @Sendable (PostgresLocation, [PostgresLocation]) async throws -> any StorageDriver
    ) async throws -> any StorageDriver {
        @Sendable func listed() async throws -> [StoragePartition] {
            try await catalog.partitions().map { entry in
                let location = try PostgresLocation(url: entry.url)
                let replicas = try entry.replicas.map { try PostgresLocation(url: $0) }
                let store = LazyPartition(name: entry.name, home: home) { try await open(location, replicas) }
                return StoragePartition(name: entry.name, number: entry.number, store: store, addedAt: entry.addedAt)
            }
        }
        let homeStorage = catalog.storage
        return PartitionedStorage(
            home: home, partitions: try await listed(), catalog: catalog, discover: listed,
            placementsMoved: {
                // A database moved to the home is on its primary; this node's replicas of the
                // home serve it once they have replayed past now.
                if !homeStorage.replicas.isEmpty { await homeStorage.replicas.noteCommit(on: homeStorage) }
            })
    }
}
