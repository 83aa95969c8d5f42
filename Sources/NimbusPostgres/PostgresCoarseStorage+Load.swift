import NIOCore
import NimbusStorage
import PostgresNIO

/// Loading by key in one statement (one round trip), whatever kinds of keys a unit of work
/// asks for: each kind is a branch of one `UNION ALL`, and every branch fills the same wide row
/// (`kind`, six bigints, seven texts, a bytea, a boolean) with its columns, NULL elsewhere, so
/// rows come back in PostgreSQL's binary form with no JSON between. Scans (queries, change
/// feeds) grow with the data and stay statements of their own.
extension PostgresCoarseStorage {
    /// On the primary, or on a read replica when the request allows one and one has caught up
    /// (`PostgresReplicas.route`); a replica that fails the load leaves it to the primary.
    public func load(_ request: LoadRequest) async throws -> LoadedRows {
        guard let replica = await storage.replicas.route(request.source) else {
            // Scans run one statement each, and a zone's turn runs its loads in its own
            // transaction: those go alone. Loads by key may go together (`PostgresKeyLoads`).
            guard request.scans.isEmpty, ZoneTurn.held == nil else { return try await load(request, on: nil) }
            return try await storage.keyLoads.load(request) { [self] in try await load($0, on: nil) }
        }
        do {
            var rows = try await load(request, on: replica)
            rows.server = replica.index
            replica.served()
            return rows
        } catch StorageError.unavailable(_), StorageError.serializationFailure(_) {
            // Gone (marked down by the statement), or a query cancelled for a conflict with the
            // replay of the primary's WAL: the primary has it all.
            return try await load(request, on: nil)
        }
    }

    private func load(_ request: LoadRequest, on pools: (any PostgresPools)?) async throws -> LoadedRows {
        var rows = LoadedRows()
        var statement = KeyLoad()
        var records: [RecordKey] = [], zones: [ZoneKey] = [], referrers: [ReferrerKey] = []
        var databaseKeys: [DatabaseKey] = [], databaseIDs: [Int64] = [], zoneIDs: [Int64] = [], zoneLists: [Int64] = []
        var schemas: [SchemaKey] = [], subscribers: [SubscriberKey] = [], badges: [NotificationOwner] = [], containers: [String] = []
        var counters = false, secret = false, newest = false, containerList = false
        // By database key and names (`LoadKey.zonePath`, `.recordPath`): the levels in one go.
        var zonePaths: Set<ZonePath> = [], recordPaths: [(zone: ZonePath, name: String)] = []
        for key in request.keys {
            switch key {
            case .record(let zoneID, let name): records.append(RecordKey(zoneID: zoneID, name: name))
            case .zonePath(let database, let zoneName): zonePaths.insert(ZonePath(database: database, zoneName: zoneName))
            case .recordPath(let database, let zoneName, let name):
                let zone = ZonePath(database: database, zoneName: zoneName)
                zonePaths.insert(zone)
                recordPaths.append((zone, name))
            case .zone(let databaseID, let name): zones.append(ZoneKey(databaseID: databaseID, name: name))
            case .referrers(let zoneID, let name, let action): referrers.append(ReferrerKey(zoneID: zoneID, name: name, action: action))
            case .databaseByID(let id): databaseIDs.append(id)
            case .zoneByID(let id): zoneIDs.append(id)
            case .subscriptionsVersion, .notificationsPrunedThrough, .indexRebuildRequest: counters = true
            case .installationSecret: secret = true
            case .containers: containerList = true
            case .container(let id): containers.append(id)
            case .database(let key): databaseKeys.append(key)
            case .zones(let databaseID): zoneLists.append(databaseID)
            case .schema(let container, let environment): schemas.append(SchemaKey(container: container, environment: environment))
            case .subscriptions(let databaseID, let userID): subscribers.append(SubscriberKey(databaseID: databaseID, userID: userID))
            case .newestNotificationSequence: newest = true
            case .badge(let owner): badges.append(owner)
            }
        }

        for path in zonePaths {
            if !databaseKeys.contains(path.database) { databaseKeys.append(path.database) }
            let schema = SchemaKey(container: path.database.container, environment: path.database.environment)
            if request.schemaWithZones, !schemas.contains(schema) { schemas.append(schema) }
        }

        // Databases named by key are read by id, as every later statement names them: the ids
        // this node does not know yet come from the directory first (one more round trip, once
        // per key and node: `PostgresDatabaseIDs`). A key the directory does not hold has no
        // database: absent, with its zones and records.
        let ids = try await storage.directoryIDs(of: databaseKeys, on: pools)
        // Zones asked for by database id bring their schema (below); a path's zone has its
        // schema asked for by key already.
        let schemaZones = request.schemaWithZones ? zones : []
        for path in zonePaths {
            if let id = ids[path.database] { zones.append(ZoneKey(databaseID: id, name: path.zoneName)) }
        }

        // What was asked for and not found reads as absent (or empty), as on SQLite.
        for key in records { rows.records[key] = .some(nil) }
        for key in zones { rows.zones[key] = .some(nil) }
        for key in referrers { rows.referrers[key] = [] }
        for key in databaseKeys { rows.databases[key] = .some(nil) }
        for id in databaseIDs { rows.databasesByID[id] = .some(nil) }
        for id in zoneIDs { rows.zonesByID[id] = .some(nil) }
        for id in zoneLists { rows.zoneLists[id] = [] }
        for key in schemas { rows.schemas[key] = StoredSchema(fields: [], recordTypes: []) }
        for key in subscribers { rows.subscriptions[key] = [] }
        for owner in badges { rows.badges[owner] = 0 }
        for id in containers { rows.container[id] = .some(nil) }

        let zoneDatabases = storage.zoneDatabases
        if let zone = records.first?.zoneID, records.count > 1, records.allSatisfy({ $0.zoneID == zone }) {
            // Several names in one zone (a batch's records, fetches in one zone): the unique
            // key's index searched for all of them in one scan (`= ANY`), not one lookup per
            // key joined laterally, whose per-key rescans cost 11 µs a name (52 ms for a zone
            // group's 4,711 names, docs/benchmarks.md).
            let zoneID = statement.bind(zone)
            let database = Self.databases(of: [zone], zoneDatabases, column: "database_id", key: zoneID, &statement)
            statement.branch(
                .record, "FROM records WHERE \(database) AND zone_id = \(zoneID) AND record_name = ANY(\(statement.bind(records.map(\.name))))")
        } else if !records.isEmpty {
            // Keys name the zone; the zone names its database, which leads the unique key. One
            // lookup of the unique key per key (LATERAL): joined as a set, the planner guessed
            // ten keys for any array and hashed them against a scan of every record (6 ms a
            // load at 8,000 records, growing with the table).
            let zoneIDs = records.map(\.zoneID)
            let keys = """
                unnest(\(statement.bind(zoneIDs)), \(statement.bind(records.map(\.name)))) AS k(key_zone, key_name)
                CROSS JOIN LATERAL (SELECT * FROM records r
                    WHERE \(Self.databases(of: zoneIDs, zoneDatabases, column: "r.database_id", key: "k.key_zone", &statement))
                      AND r.zone_id = k.key_zone AND r.record_name = k.key_name) records
                """
            statement.branch(.record, "FROM " + keys)
        }
        if zones.count == 1, let zone = zones.first {
            // One zone (a fetch by ID, a save in one zone): scalars, not arrays to encode and unnest.
            statement.branch(.zone, "FROM zones WHERE database_id = \(statement.bind(zone.databaseID)) AND name = \(statement.bind(zone.name))")
        } else if !zones.isEmpty {
            let databases = statement.bind(zones.map(\.databaseID))
            let pairs = "(database_id, name) IN (SELECT * FROM unnest(\(databases), \(statement.bind(zones.map(\.name)))))"
            statement.branch(.zone, "FROM zones WHERE database_id = ANY(\(databases)) AND " + pairs)
        }
        if !zoneIDs.isEmpty {
            let (known, unknown) = zoneDatabases.values(of: zoneIDs)
            let databases = unknown.isEmpty ? "database_id = ANY(\(statement.bind(Array(Set(known.values))))) AND " : ""
            statement.branch(.zoneByID, "FROM zones WHERE " + databases + "id = ANY(\(statement.bind(zoneIDs)))")
        }
        if !zoneLists.isEmpty {
            // In name order (byte order, as SQLite's): the fifth number is the rank.
            statement.branch(.zoneList, "FROM zones WHERE database_id = ANY(\(statement.bind(zoneLists))) AND NOT deleted")
        }
        let knownRecordPaths = recordPaths.compactMap { path in ids[path.zone.database].map { (database: $0, zone: path.zone.zoneName, name: path.name) } }
        if !knownRecordPaths.isEmpty {
            // The zones first, fenced (OFFSET 0), then one lookup of the records' unique key per
            // path: joined in one level, the planner looked records up by zone alone and
            // filtered the names (every record of the zone read per key, 20 ms a load at 3,600).
            let databases = Self.equalsAny(Array(Set(knownRecordPaths.map(\.database))), &statement)
            let keys: String
            if knownRecordPaths.count == 1, let path = knownRecordPaths.first {
                // One path (a fetch by ID, a save in one zone): scalars, not one-element arrays
                // to encode and unnest, and a plan that knows it looks up one key.
                keys = "(SELECT \(statement.bind(path.zone))::text AS key_zone, \(statement.bind(path.name))::text AS key_name) k"
                statement.branch(
                    .record, """
                        FROM (SELECT z.database_id AS path_database, z.id AS path_zone, k.key_name AS path_name FROM \(keys)
                            JOIN zones z ON z.name = k.key_zone WHERE z.database_id \(databases) OFFSET 0) p
                        CROSS JOIN LATERAL (SELECT * FROM records r
                            WHERE r.database_id \(databases) AND r.zone_id = p.path_zone AND r.record_name = p.path_name) records
                        """)
            } else {
                keys = "unnest(\(statement.bind(knownRecordPaths.map(\.database))), \(statement.bind(knownRecordPaths.map(\.zone))), "
                    + "\(statement.bind(knownRecordPaths.map(\.name)))) AS k(key_database, key_zone, key_name)"
                statement.branch(
                    .record, """
                        FROM (SELECT z.database_id AS path_database, z.id AS path_zone, k.key_name AS path_name FROM \(keys)
                            JOIN zones z ON z.database_id = k.key_database AND z.name = k.key_zone WHERE z.database_id \(databases) OFFSET 0) p
                        CROSS JOIN LATERAL (SELECT * FROM records r
                            WHERE r.database_id \(databases) AND r.database_id = p.path_database
                              AND r.zone_id = p.path_zone AND r.record_name = p.path_name) records
                        """)
            }
        }
        if !ids.isEmpty {
            statement.branch(.database, "FROM databases WHERE id " + Self.equalsAny(Array(Set(ids.values)), &statement))
        }
        if !databaseIDs.isEmpty {
            statement.branch(.databaseByID, "FROM databases WHERE id = ANY(\(statement.bind(databaseIDs)))")
        }
        // A zone's load brings its database's schema along unless the request says not to
        // (`LoadRequest.schemaWithZones`, SQLiteStorage.load).
        if !schemas.isEmpty || !schemaZones.isEmpty {
            // The zones' databases only when there are such zones: a Citus coordinator cannot
            // prune `databases` by an empty `ANY`, and read every shard for it (seen on Citus 13.2).
            var keys = "SELECT * FROM unnest(\(statement.bind(schemas.map(\.container))), \(statement.bind(schemas.map(\.environment.rawValue))))"
            if !schemaZones.isEmpty {
                let zoneDatabases = statement.bind(schemaZones.map(\.databaseID))
                statement.branch(
                    .zoneSchema, "FROM (SELECT DISTINCT container, environment FROM databases WHERE id = ANY(\(zoneDatabases))) d")
                keys += " UNION SELECT container, environment FROM databases WHERE id = ANY(\(zoneDatabases))"
            }
            let wanted = "(container, environment) IN (\(keys))"
            // A write's, with the schema version they were read at (`StoredSchema.version`).
            if request.schemaWithVersion { counters = true }
            statement.branch(.schemaField, "FROM schema_fields WHERE " + wanted)
            statement.branch(.schemaType, "FROM schema_types WHERE " + wanted)
        }
        if !referrers.isEmpty {
            // One index lookup per key, as for records.
            let zoneIDs = referrers.map(\.zoneID)
            let keys = """
                unnest(\(statement.bind(zoneIDs)), \(statement.bind(referrers.map(\.name))),
                    \(statement.bind(referrers.map(\.action)))) AS k(key_zone, key_name, key_action)
                CROSS JOIN LATERAL (SELECT * FROM record_references r
                    WHERE \(Self.databases(of: zoneIDs, zoneDatabases, column: "r.database_id", key: "k.key_zone", &statement))
                      AND r.target_zone_id = k.key_zone AND r.target_name = k.key_name AND r.action = k.key_action) record_references
                """
            statement.branch(.referrer, "FROM " + keys)
        }
        if counters {
            // The schema's version as one more counter (its own table: `v34-schema-version`).
            statement.branch(.counter, "FROM (SELECT key, value FROM counters UNION ALL SELECT 'schema_version', version FROM schema_version) counters")
        }
        if secret { statement.branch(.secret, "FROM meta WHERE key = 'installation_secret'") }
        if containerList {
            // In id order (byte order): the second number is the rank.
            statement.branch(.containerList, "FROM containers")
        }
        if !containers.isEmpty {
            statement.branch(.container, "FROM containers WHERE id = ANY(\(statement.bind(containers)))")
        }
        if !subscribers.isEmpty {
            let databases = statement.bind(subscribers.map(\.databaseID))
            let keys = """
                s.database_id = ANY(\(databases)) AND (s.database_id, s.user_id) IN (SELECT * FROM unnest(\(databases),
                    \(statement.bind(subscribers.map(\.userID)))))
                """
            statement.branch(.subscription, "FROM subscriptions s JOIN databases d ON d.id = s.database_id WHERE " + keys)
        }
        if newest { statement.branch(.newest, "FROM notifications") }
        if !badges.isEmpty {
            let users = statement.bind(badges.map(\.userID))
            let keys = """
                user_id = ANY(\(users)) AND (user_id, container, environment) IN (SELECT * FROM unnest(\(users),
                    \(statement.bind(badges.map(\.container))), \(statement.bind(badges.map(\.environment.rawValue)))))
                """
            statement.branch(.badge, "FROM badges WHERE " + keys)
        }

        if !statement.isEmpty {
            var zoneListRanks: [Int64: [(rank: Int64, zone: ZoneRow)]] = [:]
            var schemaFields: [SchemaKey: [(rank: Int64, field: SchemaFieldRow)]] = [:]
            var schemaTypes: [SchemaKey: [(rank: Int64, type: String)]] = [:]
            var subscriptionRanks: [SubscriberKey: [(rank: Int64, row: SubscriptionRow)]] = [:]
            var counterValues: [String: Int64] = [:]
            var containerRanks: [(rank: Int64, row: ContainerRow)] = []
            // Every zone read, for the statements that name it by id next (`PostgresZoneDatabases`).
            var zonesSeen: [(Int64, Int64)] = []
            defer { zoneDatabases.note(zonesSeen) }
            for row in try await storage.rows(statement.query, on: pools) {
                let wide = try WideRow(row)
                switch wide.kind {
                case "record":
                    let stored = try wide.record()
                    rows.records[RecordKey(zoneID: stored.row.zoneID, name: stored.row.recordName)] = .some(stored)
                case "zone":
                    let zone = try wide.zone()
                    zonesSeen.append((zone.id, zone.databaseID))
                    rows.zones[ZoneKey(databaseID: zone.databaseID, name: zone.name)] = .some(zone)
                case "zone_by_id":
                    let zone = try wide.zone()
                    zonesSeen.append((zone.id, zone.databaseID))
                    rows.zonesByID[zone.id] = .some(zone)
                case "zone_list":
                    let zone = try wide.zone()
                    zonesSeen.append((zone.id, zone.databaseID))
                    zoneListRanks[zone.databaseID, default: []].append((try wide.number(4), zone))
                case "database":
                    let database = try wide.database()
                    rows.databases[database.key] = .some(database)
                case "database_by_id":
                    let database = try wide.database()
                    rows.databasesByID[database.id] = .some(database)
                case "zone_schema":
                    let key = try wide.schemaKey()
                    if rows.schemas[key] == nil { rows.schemas[key] = StoredSchema(fields: [], recordTypes: []) }
                case "schema_field":
                    let field = SchemaFieldRow(
                        recordType: try wide.text(2), fieldName: try wide.text(3), fieldType: try wide.text(4), indexes: Int(try wide.number(0)))
                    schemaFields[try wide.schemaKey(), default: []].append((try wide.number(1), field))
                case "schema_type":
                    schemaTypes[try wide.schemaKey(), default: []].append((try wide.number(0), try wide.text(2)))
                case "referrer":
                    let reference = ReferenceRow(
                        sourceZoneID: try wide.number(0), sourceName: try wide.text(0), fieldName: try wide.text(1),
                        targetZoneID: try wide.number(1), targetName: try wide.text(2), action: try wide.text(3))
                    rows.referrers[ReferrerKey(zoneID: reference.targetZoneID, name: reference.targetName, action: reference.action), default: []]
                        .append(reference)
                case "counter": counterValues[try wide.text(0)] = try wide.number(0)
                case "secret":
                    guard let bytes = wide.bytes else { throw StorageError.corrupt("the installation secret is missing") }
                    rows.installationSecret = Array(bytes.readableBytesView)
                case "container":
                    let id = try wide.text(0)
                    rows.container[id] = .some(ContainerRow(id: id, createdAt: try wide.number(0)))
                case "container_list":
                    containerRanks.append((try wide.number(1), ContainerRow(id: try wide.text(0), createdAt: try wide.number(0))))
                case "subscription":
                    let subscription = try wide.subscription()
                    subscriptionRanks[SubscriberKey(databaseID: subscription.databaseID, userID: subscription.userID), default: []]
                        .append((try wide.number(4), subscription))
                case "newest": rows.newestNotificationSequence = try wide.number(0)
                case "badge":
                    guard let environment = Environment(rawValue: try wide.text(1)) else { continue }
                    rows.badges[NotificationOwner(container: try wide.text(0), environment: environment, userID: try wide.number(0))] =
                        try wide.number(1)
                default: throw StorageError.corrupt("a load returned rows of kind \(wide.kind)")
                }
            }
            // An id this node kept whose row is gone (a store restored from an older backup):
            // read from the directory again next time.
            let vanished = ids.keys.filter { (rows.databases[$0] ?? nil) == nil }
            if !vanished.isEmpty { storage.databaseIDs.forget(vanished) }
            for (databaseID, ranked) in zoneListRanks { rows.zoneLists[databaseID] = ranked.sorted { $0.rank < $1.rank }.map(\.zone) }
            for key in Set(schemaFields.keys).union(schemaTypes.keys) {
                rows.schemas[key] = StoredSchema(
                    fields: (schemaFields[key] ?? []).sorted { $0.rank < $1.rank }.map(\.field),
                    recordTypes: (schemaTypes[key] ?? []).sorted { $0.rank < $1.rank }.map(\.type))
            }
            if let version = counterValues["schema_version"] {
                for key in rows.schemas.keys { rows.schemas[key]?.version = version }
            }
            if containerList { rows.containers = containerRanks.sorted { $0.rank < $1.rank }.map(\.row) }
            for (key, ranked) in subscriptionRanks { rows.subscriptions[key] = ranked.sorted { $0.rank < $1.rank }.map(\.row) }
            // Paths whose database (and zone) exist: what was not found there is absent.
            for path in zonePaths {
                guard let database = rows.databases[path.database] ?? nil else { continue }
                let key = ZoneKey(databaseID: database.id, name: path.zoneName)
                if rows.zones[key] == nil { rows.zones[key] = .some(nil) }
            }
            for (path, name) in recordPaths {
                guard let database = rows.databases[path.database] ?? nil,
                    let zone = rows.zones[ZoneKey(databaseID: database.id, name: path.zoneName)] ?? nil
                else { continue }
                let key = RecordKey(zoneID: zone.id, name: name)
                if rows.records[key] == nil { rows.records[key] = .some(nil) }
            }
            if counters {
                rows.subscriptionsVersion = counterValues["subscriptions_version"] ?? 0
                rows.notificationsPrunedThrough = counterValues["notifications_pruned_through"] ?? 0
                rows.indexRebuildPending = counterValues["index_rebuild_pending"] != nil
            }
        }

        for scan in request.scans {
            do {
                rows.scans[scan] = try await self.scan(scan, on: pools)
            } catch let error as StorageError {
                guard case .queryTooExpensive = error else { throw error }
                rows.scans[scan] = .failed(error)
            }
        }
        return rows
    }
}

extension PostgresCoarseStorage {
    /// The condition that names the databases of `zones` (each zone's, in `key`), as a Citus
    /// coordinator routes by: `column = $n` for one database (nearly every unit), `= ANY` for
    /// several. A zone this node has not read yet is looked up inside the statement instead
    /// (`PostgresZoneDatabases`): the same rows, not routable.
    fileprivate static func databases(
        of zones: [Int64], _ memo: PostgresZoneDatabases, column: String, key: String, _ statement: inout KeyLoad
    ) -> String {
        let (known, unknown) = memo.values(of: zones)
        guard unknown.isEmpty else { return "\(column) = nimbus_zone_database(\(key))" }
        let distinct = Array(Set(known.values))
        if distinct.count == 1 { return "\(column) = \(statement.bind(distinct[0]))" }
        return "\(column) = ANY(\(statement.bind(distinct))) AND \(column) = nimbus_zone_database(\(key))"
    }
}

/// A zone named by its database's key and its name.
struct ZonePath: Hashable {
    let database: DatabaseKey
    let zoneName: String
}

extension PostgresCoarseStorage {
    /// `= $n` for one value, `= ANY($n)` for several, bound once and written after a column as
    /// often as needed: how a statement names the databases it reads, which a Citus
    /// coordinator routes by.
    fileprivate static func equalsAny(_ values: [Int64], _ statement: inout KeyLoad) -> String {
        values.count == 1 ? "= \(statement.bind(values[0]))" : "= ANY(\(statement.bind(values)))"
    }
}

/// One `UNION ALL` of key-load branches, with its bindings.
private struct KeyLoad {
    private var branches: [String] = []
    private var bindings = PostgresBindings()

    var isEmpty: Bool { branches.isEmpty }
    var query: PostgresQuery { PostgresQuery(unsafeSQL: branches.joined(separator: "\nUNION ALL\n"), binds: bindings) }

    /// Binds a value and returns its placeholder.
    mutating func bind<Value: PostgresDynamicTypeEncodable>(_ value: Value) -> String {
        bindings.append(value)
        return "$\(bindings.count)"
    }

    /// A branch: `select`'s columns, then `rest`, its FROM and WHERE.
    mutating func branch(_ select: WideSelect, _ rest: String) {
        branches.append(select.text + rest)
    }
}

/// The SELECT list of one kind of key-load branch: `kind`, then the columns given in the wide
/// row's places (`WideRow`), NULL in the rest. Texts are cast to one collation so the branches
/// unite. Each kind's list is spelled once, here, and built once: assembled on every load it was
/// about 3% of a PostgreSQL node's CPU for a fetch by ID (`perf`, docs/benchmarks.md).
private struct WideSelect {
    let text: String

    init(_ kind: String, numbers: [String] = [], texts: [String] = [], bytes: String? = nil, flag: String? = nil) {
        precondition(numbers.count <= WideRow.numbers && texts.count <= WideRow.texts)
        let numberColumns = (0..<WideRow.numbers).map { $0 < numbers.count ? "(\(numbers[$0]))::bigint" : "NULL::bigint" }
        let textColumns = (0..<WideRow.texts).map { $0 < texts.count ? "(\(texts[$0]))::text COLLATE \"C\"" : "NULL::text COLLATE \"C\"" }
        let columns = ["'\(kind)'::text"] + numberColumns + textColumns + [bytes.map { "(\($0))::bytea" } ?? "NULL::bytea"]
            + [flag.map { "(\($0))::boolean" } ?? "NULL::boolean"]
        text = "SELECT " + columns.joined(separator: ", ") + " "
    }

    /// Records (`WideRow.record()` reads them), from a FROM that names them `records`.
    static let record = WideSelect(
        "record", numbers: ["id", "zone_id", "change_sequence", "created_at", "modified_at"],
        texts: ["record_name", "record_type", "parent", "created_by", "created_device", "modified_by", "modified_device"],
        bytes: "fields", flag: "deleted")
    private static let zoneNumbers = ["id", "database_id", "change_sequence", "record_sequence"]
    static let zone = WideSelect("zone", numbers: zoneNumbers, texts: ["name"], flag: "deleted")
    static let zoneByID = WideSelect("zone_by_id", numbers: zoneNumbers, texts: ["name"], flag: "deleted")
    static let zoneList = WideSelect(
        "zone_list", numbers: zoneNumbers + ["row_number() OVER (ORDER BY database_id, name)"], texts: ["name"], flag: "deleted")
    private static let databaseColumns = (
        numbers: ["id", "owner_id", "sequence", PostgresDatabaseFeed.usedBytes], texts: ["container", "environment", "scope", "moving_to"], flag: "moved"
    )
    static let database = WideSelect(
        "database", numbers: databaseColumns.numbers, texts: databaseColumns.texts, flag: databaseColumns.flag)
    static let databaseByID = WideSelect(
        "database_by_id", numbers: databaseColumns.numbers, texts: databaseColumns.texts, flag: databaseColumns.flag)
    static let zoneSchema = WideSelect("zone_schema", texts: ["container", "environment"])
    static let schemaField = WideSelect(
        "schema_field", numbers: ["indexes", "row_number() OVER (ORDER BY record_type, field_name)"],
        texts: ["container", "environment", "record_type", "field_name", "field_type"])
    static let schemaType = WideSelect(
        "schema_type", numbers: ["row_number() OVER (ORDER BY record_type)"], texts: ["container", "environment", "record_type"])
    static let referrer = WideSelect(
        "referrer", numbers: ["source_zone_id", "target_zone_id"], texts: ["source_name", "field_name", "target_name", "action"])
    static let counter = WideSelect("counter", numbers: ["value"], texts: ["key"])
    static let secret = WideSelect("secret", bytes: "value")
    static let containerList = WideSelect("container_list", numbers: ["created_at", "row_number() OVER (ORDER BY id)"], texts: ["id"])
    static let container = WideSelect("container", numbers: ["created_at"], texts: ["id"])
    static let subscription = WideSelect(
        "subscription",
        numbers: ["s.database_id", "s.user_id", "s.created_at", "d.owner_id", "row_number() OVER (ORDER BY s.subscription_id)"],
        texts: ["s.subscription_id", "d.container", "d.environment", "d.scope"], bytes: "s.definition")
    static let newest = WideSelect("newest", numbers: ["coalesce(max(sequence), 0)"])
    static let badge = WideSelect("badge", numbers: ["user_id", "value"], texts: ["container", "environment"])
}

/// A row of a key load (`KeyLoad`), read back by place.
private struct WideRow {
    static let numbers = 6
    static let texts = 7

    let kind: String
    let numbers: [Int64?]
    let texts: [String?]
    let bytes: ByteBuffer?
    let flag: Bool?

    init(_ row: PostgresRow) throws {
        var cells = PostgresCells(row)
        kind = try cells.next(String.self)
        var numbers: [Int64?] = []
        numbers.reserveCapacity(Self.numbers)
        for _ in 0..<Self.numbers { numbers.append(try cells.next(Int64?.self)) }
        var texts: [String?] = []
        texts.reserveCapacity(Self.texts)
        for _ in 0..<Self.texts { texts.append(try cells.next(String?.self)) }
        self.numbers = numbers
        self.texts = texts
        bytes = try cells.next(ByteBuffer?.self)
        flag = try cells.next(Bool?.self)
    }

    func number(_ index: Int) throws -> Int64 {
        guard let value = numbers[index] else { throw StorageError.corrupt("a \(kind) row lacks number \(index)") }
        return value
    }

    func text(_ index: Int) throws -> String {
        guard let value = texts[index] else { throw StorageError.corrupt("a \(kind) row lacks text \(index)") }
        return value
    }

    func record() throws -> StoredRecord {
        guard let fields = bytes, let deleted = flag else { throw StorageError.corrupt("a record row lacks its fields") }
        return StoredRecord(
            id: try number(0),
            row: RecordRow(
                zoneID: try number(1), recordName: try text(0), recordType: try text(1), fields: Array(fields.readableBytesView),
                parent: texts[2], changeSequence: try number(2),
                created: ChangeStamp(timestamp: try number(3), userRecordName: try text(3), deviceID: try text(4)),
                modified: ChangeStamp(timestamp: try number(4), userRecordName: try text(5), deviceID: try text(6)), isDeleted: deleted))
    }

    func zone() throws -> ZoneRow {
        ZoneRow(
            id: try number(0), databaseID: try number(1), name: try text(0), changeSequence: try number(2), recordSequence: try number(3),
            isDeleted: flag ?? false)
    }

    func database() throws -> DatabaseRow {
        guard let environment = Environment(rawValue: try text(1)), let scope = DatabaseScope(rawValue: try text(2)) else {
            throw StorageError.corrupt("database \(numbers[0] ?? 0) names an unknown environment or scope")
        }
        // A move's fence names the partition it copies to; the switch marks the row moved.
        let relocation = texts[3].map { flag == true ? DatabaseRelocation.moved(to: $0) : .fenced(to: $0) }
        return DatabaseRow(
            id: try number(0), key: DatabaseKey(container: try text(0), environment: environment, scope: scope, ownerID: try number(1)),
            sequence: try number(2), usedBytes: try number(3), relocation: relocation)
    }

    func schemaKey() throws -> SchemaKey {
        guard let environment = Environment(rawValue: try text(1)) else { throw StorageError.corrupt("a schema names environment \(texts[1] ?? "")") }
        return SchemaKey(container: try text(0), environment: environment)
    }

    func subscription() throws -> SubscriptionRow {
        guard let definition = bytes, let environment = Environment(rawValue: try text(2)), let scope = DatabaseScope(rawValue: try text(3))
        else { throw StorageError.corrupt("a subscription row does not read") }
        return SubscriptionRow(
            databaseID: try number(0),
            database: DatabaseKey(container: try text(1), environment: environment, scope: scope, ownerID: try number(3)),
            userID: try number(1), subscriptionID: try text(0), definition: Array(definition.readableBytesView), createdAt: try number(2))
    }
}
