import Crypto
import Foundation
import NimbusStorage
import NimbusWire

/// `records/query`: filters, sorts and cursors over the transactional field index.
///
/// In development every field is queryable, sortable and searchable. In production a query
/// needs the index the schema grants: QUERYABLE for equality, membership and prefix
/// comparators, SORTABLE for ranges, NEAR and sorting, SEARCHABLE for token search.
extension NimbusService {
    typealias SchemaMap = [String: (type: FieldType, indexes: Int)]

    /// The fields of a record type in the database's environment, with their types and indexes.
    func schemaMap(recordType: String, key: DatabaseKey, tx: ReadUnit) throws -> SchemaMap {
        var schema: SchemaMap = [:]
        for field in try tx.schemaFields(container: key.container, environment: key.environment) where field.recordType == recordType {
            if let type = FieldType(wireName: field.fieldType) { schema[field.fieldName] = (type, field.indexes) }
        }
        return schema
    }

    public func queryRecords(_ target: DatabaseTarget, _ request: RecordsQueryRequest) async throws -> RecordsResponse {
        var key = try target.key()
        var target = target
        // In the shared database: the owner's zone, showing what the caller's shares cover.
        var shared: SharedZone?
        if target.scope == .shared {
            guard !request.zoneWide else {
                throw CloudKitError.badRequest(
                    "zoneWide queries are not served on the shared database; query one shared zone, naming its ownerRecordName")
            }
            let zone = try await sharedZone(request.zoneID, target)
            shared = zone
            key = zone.key
            target = target.viewingZones(of: zone.ownerRecordName)
        }
        return try await runQuery(target, key: key, request, shared: shared)
    }

    private func runQuery(_ target: DatabaseTarget, key: DatabaseKey, _ request: RecordsQueryRequest, shared: SharedZone?) async throws
        -> RecordsResponse
    {
        let database = try await databaseForReading(key)
        let access = try await publicAccess(target)
        return try await storage.read(.scan.onReplica, in: key) { tx in
            let zones: [ZoneRow]
            if request.zoneWide {
                zones = try tx.zones(databaseID: database.id)
            } else {
                zones = [try self.resolveZone(request.zoneID, in: database, target: target, tx: tx)]
            }
            let schema = try self.schemaMap(recordType: request.recordType, key: key, tx: tx)
            let locked = key.environment == .production
            if locked, try !tx.schemaRecordTypes(container: key.container, environment: key.environment).contains(request.recordType) {
                throw CloudKitError.badRequest("query.recordType: record type '\(request.recordType)' is not in the production schema")
            }
            // Apps may not list the user directory; an operator browsing the console may (review
            // defect 15): they see People anyway, and the browse is audited.
            if target.scope == .public, request.recordType == Names.usersRecordType, !target.operatorScan {
                try Self.checkUserDirectoryQuery(request, schema: schema)
            }
            // An operator's scan (docs/dashboard.md) reads every record of the type in pages and
            // filters them here, so it needs no production index.
            let scanning = target.operatorScan && locked
            let checked = locked && !scanning
            var conditions = try request.filters.map { try self.condition($0, schema: schema, locked: checked) }
            // The public database's security roles (docs/roles.md): a type only its creators read
            // answers the caller's own records.
            switch access?.queryReach(request.recordType) {
            case .ownRecords(let own)?:
                let createdBy = SystemField.createdBy.rawValue
                if locked, (schema[createdBy]?.indexes ?? 0) & SchemaFieldRow.Indexes.queryable == 0 {
                    throw CloudKitError.badRequest(
                        "query: only creators read records of type '\(request.recordType)', so a query answers the caller's own, which in production needs a QUERYABLE index on \(createdBy) (`nimbus schema index --environment production --record-type \(request.recordType) --field \(createdBy) --set queryable`)")
                }
                conditions.append(.compare(field: createdBy, scope: .scalar, .equal, .text(own)))
            case .denied?: try access?.require(.read, request.recordType, creator: nil)
            case .all?, nil: break
            }
            let sorts = try request.sorts.map { try self.sortKey($0, schema: schema, locked: checked) }
            // What a marker is bound to, worked out (a hash of the query) only when a marker is
            // read or written: most answers fit one page and carry none.
            var binding: [UInt8]?
            func bound() -> [UInt8] {
                if let binding { return binding }
                let made = self.cursorBinding(request, databaseID: database.id, zones: zones)
                binding = made
                return made
            }
            var after: QueryPosition?
            if let marker = request.continuationMarker {
                after = try self.decodeCursor(marker, binding: bound(), sortCount: scanning ? 0 : sorts.count)
            }
            var query = RecordQuery(
                databaseID: database.id, zoneIDs: zones.map(\.id), recordType: request.recordType, conditions: scanning ? [] : conditions,
                sorts: scanning ? [] : sorts, after: after, limit: request.resultsLimit + 1)
            query.budget = self.options.queryBudget
            // The pairs saves wrote (`IndexGrants.sortedPairs`; none in development).
            query.sortedPairs = Set(IndexGrants.of(key.environment, grants: schema.mapValues(\.indexes)).sortedPairs)
            var page: QueryPage
            do {
                page = zones.isEmpty ? QueryPage(rows: [], positions: []) : try tx.queryRecords(query)
            } catch StorageError.queryTooExpensive(let budget) {
                throw CloudKitError(
                    .badRequest,
                    "the query took more than its \(budget.wholeNanoseconds / 1_000_000) ms budget; filter on a more selective indexed field, use fewer NOT filters or ask for fewer results",
                    limitName: Limits.queryMilliseconds.name)
            }
            // A scan's page is `resultsLimit` records read; it shows those that match, and goes on
            // after the last one read whatever matched.
            var next: QueryPosition?
            if scanning {
                let read = min(page.rows.count, request.resultsLimit)
                if page.rows.count > request.resultsLimit { next = page.positions[read - 1] }
                page = try Self.filtered(QueryPage(rows: Array(page.rows.prefix(read)), positions: []), conditions, sorts)
            } else if page.rows.count > request.resultsLimit {
                next = page.positions[request.resultsLimit - 1]
            }
            let shown = min(page.rows.count, request.resultsLimit)
            let zoneByID = Dictionary(uniqueKeysWithValues: zones.map { ($0.id, $0) })
            var records: [ItemResult<RecordEntry>] = []
            records.reserveCapacity(shown)
            // Each row read where it lies: a `for` loop's copy of each would retain its strings.
            try page.rows.withUnsafeBufferPointer { rows in
                for index in 0..<shown {
                    guard let zone = zoneByID[rows[index].zoneID] else { continue }
                    if let shared, try shared.shows(rows[index], zone: zone, tx: tx) == nil { continue }
                    records.append(
                        .success(
                            .record(
                                try self.recordOutput(
                                    rows[index], zone: zone, target: target, desiredKeys: request.desiredKeys,
                                    numbersAsStrings: request.numbersAsStrings))))
                }
            }
            var response = RecordsResponse(records: records)
            if let next { response.continuationMarker = self.encodeCursor(next, binding: bound()) }
            return response
        }
    }

    /// An operator scan's page: the rows that meet every condition, in the sorts' order (within
    /// the page), each judged on all its fields (as in development, where every field is indexed).
    static func filtered(_ page: QueryPage, _ conditions: [IndexCondition], _ sorts: [IndexSort]) throws -> QueryPage {
        var kept: [QueriedRecord] = []
        for row in page.rows {
            let record = try QueriedRecord(row)
            if conditions.allSatisfy({ $0.matches(record) }) { kept.append(record) }
        }
        func value(_ key: IndexSort.Key, _ record: QueriedRecord) -> IndexValue? {
            switch key {
            case .number(let field), .text(let field):
                return record.scalar(field).flatMap { $0.longitude == nil ? $0.value : nil }
            case .distance(let field, let latitude, let longitude):
                guard let location = record.scalar(field),
                    case .number(let entryLatitude) = location.value, let entryLongitude = location.longitude
                else { return nil }
                return .number(Geodesy.greatCircleMeters(entryLatitude, entryLongitude, latitude, longitude))
            }
        }
        func order(_ left: IndexValue?, _ right: IndexValue?) -> Int {
            switch (left, right) {
            case (nil, nil): return 0
            case (nil, _): return 1  // records without the field come last, either way
            case (_, nil): return -1
            case (.text(let a)?, .text(let b)?): return a == b ? 0 : (a.utf8.lexicographicallyPrecedes(b.utf8) ? -1 : 1)
            case (let a?, let b?): return IndexValue.numericOrder(a, b) ?? 0
            }
        }
        if !sorts.isEmpty {
            kept.sort { left, right in
                for sort in sorts {
                    let a = value(sort.key, left)
                    let b = value(sort.key, right)
                    let compared = order(a, b)
                    if compared != 0 { return (a == nil || b == nil || sort.ascending) ? compared < 0 : compared > 0 }
                }
                return false
            }
        }
        return QueryPage(rows: kept.map(\.row), positions: [])
    }

    // MARK: Filters

    /// The system fields a query, an index or a schema row can name, with their types: the
    /// schema file's table (`SchemaFile.systemFields`) without `___etag`, which is declared but
    /// never indexed or queried.
    static let systemFieldTypes: [String: FieldType] = Dictionary(
        uniqueKeysWithValues: SchemaFile.systemFields.filter { $0.name != SchemaFile.etag }.map { ($0.name, $0.type) })

    /// The field's type and, in production, a check that the schema grants `index`.
    private func fieldType(
        _ name: String, value: JSON?, declared: DeclaredFieldType?, schema: SchemaMap, locked: Bool, index: Int,
        indexName: String, path: String
    ) throws -> FieldType {
        let known = schema[name]
        if let known, known.type.isEncrypted {
            throw CloudKitError.badRequest(
                "\(path): field '\(name)' is encrypted (\(known.type.wireName)); the server cannot read it, so it cannot filter or sort on it")
        }
        if case .exact(let type)? = declared, type.isEncrypted {
            throw CloudKitError.badRequest("\(path): \(type.wireName) values are ciphertext; they cannot be filtered or sorted on")
        }
        if locked {
            guard let known else {
                throw CloudKitError.badRequest(
                    "\(path): field '\(name)' is not in the production schema\(name.hasPrefix("___") ? "; declare it with an index to query it" : "")")
            }
            guard known.indexes & index != 0 else {
                throw CloudKitError.badRequest(
                    "\(path): field '\(name)' has no \(indexName) index in production; set it with `nimbus schema index --environment production --set \(indexName.lowercased())` (or in development, then deploy)")
            }
        }
        if let system = Self.systemFieldTypes[name] { return system }
        if let known { return known.type }
        if case .exact(let type)? = declared { return type }
        if let value, let inferred = FieldValue.inferType(of: value) { return inferred }
        throw CloudKitError.badRequest("\(path): cannot tell the type of field '\(name)'; send fieldValue.type")
    }

    private func indexValue(_ json: JSON, as scalar: ScalarType, path: String) throws -> IndexValue {
        // References may be given as a reference dictionary or, leniently, a bare record name.
        if scalar == .reference, case .string(let name) = json { return .text(name) }
        let value = try FieldValue.decode(json, as: FieldType(scalar), path: path)
        guard let indexed = RecordIndexer.indexValue(value) else {
            throw CloudKitError.badRequest("\(path): \(scalar.rawValue) values cannot be compared")
        }
        return indexed
    }

    private func indexValues(_ json: JSON, as scalar: ScalarType, path: String) throws -> [IndexValue] {
        guard case .array(let elements) = json else {
            throw CloudKitError.badRequest("\(path): this comparator takes a list of values, got \(json.kindName)")
        }
        return try elements.enumerated().map { try indexValue($0.element, as: scalar, path: "\(path)[\($0.offset)]") }
    }

    func condition(_ filter: QueryFilterInput, schema: SchemaMap, locked: Bool) throws -> IndexCondition {
        let condition = try positiveCondition(filter, schema: schema, locked: locked)
        return filter.comparator.isNegated ? .not(condition) : condition
    }

    /// The condition of a filter's comparator without its `NOT_`.
    private func positiveCondition(_ filter: QueryFilterInput, schema: SchemaMap, locked: Bool) throws -> IndexCondition {
        let path = filter.path
        let valuePath = "\(path).fieldValue.value"
        let queryable = (SchemaFieldRow.Indexes.queryable, "QUERYABLE")
        let sortable = (SchemaFieldRow.Indexes.sortable, "SORTABLE")
        func type(_ index: (Int, String), element: Bool = false) throws -> FieldType {
            guard let name = filter.fieldName else { throw CloudKitError.badRequest("\(path): missing fieldName") }
            // For IN and list comparators the value's shape says nothing about the field: infer from its elements.
            var sample: JSON? = filter.value
            if element, case .array(let elements) = filter.value { sample = elements.first }
            var declared = filter.declaredType
            if element, case .exact(let listType)? = declared { declared = .exact(FieldType(listType.scalar)) }
            return try fieldType(
                name, value: sample, declared: declared, schema: schema, locked: locked, index: index.0, indexName: index.1,
                path: path)
        }
        func requireScalar(_ type: FieldType, _ allowed: Set<ScalarType>) throws {
            guard !type.isList else {
                throw CloudKitError.badRequest(
                    "\(path): \(filter.comparator.rawValue) compares single values, but '\(filter.fieldName ?? "")' is a \(type.wireName); use LIST_CONTAINS and friends")
            }
            guard allowed.contains(type.scalar) else {
                throw CloudKitError.badRequest(
                    "\(path): \(filter.comparator.rawValue) does not apply to \(type.wireName) field '\(filter.fieldName ?? "")'")
            }
        }
        func requireList(_ type: FieldType, _ allowed: Set<ScalarType>? = nil) throws {
            guard type.isList || Self.systemFieldTypes[filter.fieldName ?? ""] == nil && !schemaKnows(filter.fieldName, schema) else {
                throw CloudKitError.badRequest(
                    "\(path): \(filter.comparator.rawValue) applies to list fields, but '\(filter.fieldName ?? "")' is a \(type.wireName)")
            }
            if let allowed, !allowed.contains(type.scalar) {
                throw CloudKitError.badRequest(
                    "\(path): \(filter.comparator.rawValue) does not apply to \(type.wireName) field '\(filter.fieldName ?? "")'")
            }
        }
        let comparable: Set<ScalarType> = [.string, .int64, .double, .timestamp, .bytes, .reference]
        let ordered: Set<ScalarType> = [.string, .int64, .double, .timestamp]
        let field = filter.fieldName ?? ""

        switch filter.comparator {
        case .equals, .notEquals:
            let fieldType = try type(queryable)
            try requireScalar(fieldType, comparable)
            return IndexCondition.compare(
                field: field, scope: .scalar, .equal, try indexValue(filter.value, as: fieldType.scalar, path: valuePath))
        case .lessThan, .lessThanOrEquals, .greaterThan, .greaterThanOrEquals:
            let fieldType = try type(sortable)
            try requireScalar(fieldType, ordered)
            let comparison: IndexComparison =
                switch filter.comparator {
                case .lessThan: .less
                case .lessThanOrEquals: .lessOrEqual
                case .greaterThan: .greater
                default: .greaterOrEqual
                }
            return .compare(field: field, scope: .scalar, comparison, try indexValue(filter.value, as: fieldType.scalar, path: valuePath))
        case .beginsWith, .notBeginsWith:
            let fieldType = try type(queryable)
            try requireScalar(fieldType, [.string])
            guard case .string(let prefix) = filter.value else {
                throw CloudKitError.badRequest("\(valuePath): BEGINS_WITH takes a string prefix, got \(filter.value.kindName)")
            }
            return IndexCondition.beginsWith(field: field, scope: .scalar, prefix: prefix)
        case .in, .notIn:
            let fieldType = try type(queryable, element: true)
            try requireScalar(fieldType, comparable)
            return IndexCondition.oneOf(
                field: field, scope: .scalar, try indexValues(filter.value, as: fieldType.scalar, path: valuePath))
        case .listContains, .notListContains:
            let fieldType = try type(queryable)
            try requireList(fieldType)
            return IndexCondition.compare(
                field: field, scope: .element, .equal, try indexValue(filter.value, as: fieldType.scalar, path: valuePath))
        case .listContainsAny, .notListContainsAny:
            let fieldType = try type(queryable, element: true)
            try requireList(fieldType)
            return IndexCondition.oneOf(
                field: field, scope: .element, try indexValues(filter.value, as: fieldType.scalar, path: valuePath))
        case .listContainsAll, .notListContainsAll:
            let fieldType = try type(queryable, element: true)
            try requireList(fieldType)
            return IndexCondition.allOf(field: field, try indexValues(filter.value, as: fieldType.scalar, path: valuePath))
        case .listMemberBeginsWith, .notListMemberBeginsWith:
            let fieldType = try type(queryable)
            try requireList(fieldType, [.string])
            guard case .string(let prefix) = filter.value else {
                throw CloudKitError.badRequest("\(valuePath): LIST_MEMBER_BEGINS_WITH takes a string prefix, got \(filter.value.kindName)")
            }
            return IndexCondition.beginsWith(field: field, scope: .element, prefix: prefix)
        case .near:
            let fieldType = try type(sortable)
            try requireScalar(fieldType, [.location])
            guard let distance = filter.distance else {
                throw CloudKitError.badRequest("\(path): NEAR needs a distance in meters (key 'distance')")
            }
            guard case .location(let location) = try FieldValue.decode(filter.value, as: FieldType(.location), path: valuePath) else {
                throw CloudKitError.badRequest("\(valuePath): NEAR takes a location")
            }
            return .near(field: field, latitude: location.latitude, longitude: location.longitude, meters: distance)
        case .containsAllTokens, .containsAnyTokens:
            if filter.fieldName != nil {
                let fieldType = try type((SchemaFieldRow.Indexes.searchable, "SEARCHABLE"))
                guard fieldType.scalar == .string else {
                    throw CloudKitError.badRequest("\(path): token search applies to STRING fields, not \(fieldType.wireName)")
                }
            }
            guard case .string(let text) = filter.value else {
                throw CloudKitError.badRequest("\(valuePath): token search takes a string, got \(filter.value.kindName)")
            }
            let tokens = Tokenizer.tokens(of: text)
            guard !tokens.isEmpty else {
                throw CloudKitError.badRequest("\(valuePath): the search text has no words to look for")
            }
            return .tokens(field: filter.fieldName, tokens, all: filter.comparator == .containsAllTokens)
        }
    }

    private func schemaKnows(_ name: String?, _ schema: SchemaMap) -> Bool {
        name.map { schema[$0] != nil } ?? false
    }

    private func sortKey(_ sort: QuerySortInput, schema: SchemaMap, locked: Bool) throws -> IndexSort {
        let type = try fieldType(
            sort.fieldName, value: nil, declared: sort.relativeLocation == nil ? nil : .exact(FieldType(.location)),
            schema: schema, locked: locked, index: SchemaFieldRow.Indexes.sortable, indexName: "SORTABLE", path: sort.path)
        guard !type.isList else {
            throw CloudKitError.badRequest("\(sort.path): cannot sort by list field '\(sort.fieldName)'")
        }
        switch type.scalar {
        case .location:
            guard let origin = sort.relativeLocation else {
                throw CloudKitError.badRequest("\(sort.path): sorting by location field '\(sort.fieldName)' needs relativeLocation")
            }
            return IndexSort(.distance(field: sort.fieldName, latitude: origin.latitude, longitude: origin.longitude), ascending: sort.ascending)
        case .int64, .double, .timestamp:
            return IndexSort(.number(field: sort.fieldName), ascending: sort.ascending)
        case .string, .reference, .bytes:
            return IndexSort(.text(field: sort.fieldName), ascending: sort.ascending)
        case .asset:
            throw CloudKitError.badRequest("\(sort.path): cannot sort by asset field '\(sort.fieldName)'")
        }
    }

    // MARK: Continuation markers

    /// What a marker is bound to: the database, the zones, and the query exactly as sent.
    private func cursorBinding(_ request: RecordsQueryRequest, databaseID: Int64, zones: [ZoneRow]) -> [UInt8] {
        // The zones' ids as an array's description spells them ("[1, 2]"): the same bytes as
        // before, so markers issued earlier still match, without the description's reflection.
        var bytes = Array("\(databaseID)|[\(zones.map { String($0.id) }.joined(separator: ", "))]|".utf8)
        bytes += request.queryJSON.serialized()
        return Array(SHA256.hash(data: bytes)).prefix(16).map { $0 }
    }

    private func encodeCursor(_ position: QueryPosition, binding: [UInt8]) -> String {
        var bytes = Self.cursorBody(position, binding: binding)
        bytes += keys.cursorMAC.code(for: bytes).prefix(16)
        return Credentials.base64URL(bytes)
    }

    /// A marker's body: `[1, binding in hex, [[kind, sort value], …], record id]` as JSON
    /// text, written straight, with no tree; the text a tree of it serializes to, so markers
    /// issued by earlier builds still read (`QueryCursorTests`).
    static func cursorBody(_ position: QueryPosition, binding: [UInt8]) -> [UInt8] {
        var writer = JSONWriter(reservingCapacity: 128)
        writer.openArray()
        writer.element()
        writer.int(1)
        writer.element()
        writer.string(Credentials.hex(binding))
        writer.element()
        writer.openArray()
        for value in position.sortValues {
            writer.element()
            writer.openArray()
            writer.element()
            switch value {
            case .integer(let integer):
                writer.string("i")
                writer.element()
                writer.int(integer)
            case .number(let number):
                writer.string("n")
                writer.element()
                writer.json(.double(number))
            case .text(let text):
                writer.string("t")
                writer.element()
                writer.string(text)
            }
            writer.closeArray()
        }
        writer.closeArray()
        writer.element()
        writer.int(position.recordID)
        writer.closeArray()
        return writer.bytes
    }

    private func decodeCursor(_ marker: String, binding: [UInt8], sortCount: Int) throws -> QueryPosition {
        let garbled = CloudKitError.badRequest("continuationMarker: the marker is garbled; run the query again without it")
        guard marker.utf8.count < 4_096, let bytes = Credentials.fromBase64URL(marker), bytes.count > 16 else { throw garbled }
        let body = Array(bytes.dropLast(16))
        let mac = keys.cursorMAC.code(for: body).prefix(16)
        guard Credentials.constantTimeEqual(Array(mac), Array(bytes.suffix(16))) else {
            throw CloudKitError.badRequest("continuationMarker: the marker was not issued by this server")
        }
        guard case .array(let parts)? = try? JSON.parse(body), parts.count == 4, parts[0] == .int(1),
            case .string(let boundTo) = parts[1], case .array(let values) = parts[2], case .int(let recordID) = parts[3]
        else { throw garbled }
        guard boundTo == Credentials.hex(binding), values.count == sortCount else {
            throw CloudKitError.badRequest(
                "continuationMarker: the marker belongs to another query; send it with the same query, zone and database it came from")
        }
        let sortValues: [IndexValue] = try values.map { value in
            guard case .array(let pair) = value, pair.count == 2 else { throw garbled }
            switch (pair[0], pair[1]) {
            case (.string("i"), .int(let integer)): return .integer(integer)
            case (.string("n"), let number): return .number(number.doubleValue ?? 0)
            case (.string("t"), .string(let text)): return .text(text)
            default: throw garbled
            }
        }
        return QueryPosition(sortValues: sortValues, recordID: recordID)
    }
}
