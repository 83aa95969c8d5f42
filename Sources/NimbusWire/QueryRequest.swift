/// `records/query` (reference §4).
public enum QueryComparator: String, Sendable, CaseIterable {
    case equals = "EQUALS", notEquals = "NOT_EQUALS"
    case lessThan = "LESS_THAN", lessThanOrEquals = "LESS_THAN_OR_EQUALS"
    case greaterThan = "GREATER_THAN", greaterThanOrEquals = "GREATER_THAN_OR_EQUALS"
    case near = "NEAR"
    case containsAllTokens = "CONTAINS_ALL_TOKENS", containsAnyTokens = "CONTAINS_ANY_TOKENS"
    case `in` = "IN", notIn = "NOT_IN"
    case listContains = "LIST_CONTAINS", notListContains = "NOT_LIST_CONTAINS"
    case listContainsAny = "LIST_CONTAINS_ANY", notListContainsAny = "NOT_LIST_CONTAINS_ANY"
    case listContainsAll = "LIST_CONTAINS_ALL", notListContainsAll = "NOT_LIST_CONTAINS_ALL"
    case beginsWith = "BEGINS_WITH", notBeginsWith = "NOT_BEGINS_WITH"
    case listMemberBeginsWith = "LIST_MEMBER_BEGINS_WITH", notListMemberBeginsWith = "NOT_LIST_MEMBER_BEGINS_WITH"

    /// The `NOT_…` comparators: the negation of their positive twin.
    public var isNegated: Bool { rawValue.hasPrefix("NOT_") }

    /// The comparator that matches exactly what this one does not (`NOT (x < 5)` is `x >= 5`),
    /// where CloudKit has one.
    public var negation: QueryComparator? {
        switch self {
        case .equals: .notEquals
        case .notEquals: .equals
        case .in: .notIn
        case .notIn: .in
        case .listContains: .notListContains
        case .notListContains: .listContains
        case .listContainsAny: .notListContainsAny
        case .notListContainsAny: .listContainsAny
        case .listContainsAll: .notListContainsAll
        case .notListContainsAll: .listContainsAll
        case .beginsWith: .notBeginsWith
        case .notBeginsWith: .beginsWith
        case .listMemberBeginsWith: .notListMemberBeginsWith
        case .notListMemberBeginsWith: .listMemberBeginsWith
        case .lessThan: .greaterThanOrEquals
        case .greaterThanOrEquals: .lessThan
        case .greaterThan: .lessThanOrEquals
        case .lessThanOrEquals: .greaterThan
        case .near, .containsAllTokens, .containsAnyTokens: nil
        }
    }
}

public struct QueryFilterInput: Sendable {
    public var comparator: QueryComparator
    /// `fieldName`, or the schema name of `systemFieldName` (`___createTime`, …).
    public var fieldName: String?
    public var value: JSON
    public var declaredType: DeclaredFieldType?
    public var distance: Double?
    public var path: String
}

public struct QuerySortInput: Sendable {
    public var fieldName: String
    public var ascending: Bool
    public var relativeLocation: Location?
    public var path: String
}

public struct RecordsQueryRequest: Sendable {
    public var recordType: String
    public var filters: [QueryFilterInput]
    public var sorts: [QuerySortInput]
    public var zoneID: WireZoneID
    public var zoneWide: Bool
    public var resultsLimit: Int
    public var continuationMarker: String?
    public var desiredKeys: [String]?
    public var numbersAsStrings: Bool
    /// The `query` object as sent, which a continuation marker is bound to.
    public var queryJSON: JSON

    /// Filters and sort keys per query, bounded like operations.
    public static let maximumTerms = Limit(name: "queryTerms", value: 50)

    public init(json: ObjectReader) throws(CloudKitError) {
        let query = try json.requiredObject(WireKey.query)
        queryJSON = .object(query.object)
        recordType = try query.requiredString(WireKey.recordType)
        try Names.validateIdentifier(recordType, kind: "record type", path: query.childPath(WireKey.recordType))
        zoneWide = try json.bool(WireKey.zoneWide) ?? false
        zoneID = try WireZoneID.orDefault(json)
        resultsLimit = try readResultsLimit(json)
        continuationMarker = try json.string(WireKey.continuationMarker)
        desiredKeys = try readDesiredKeys(json)
        numbersAsStrings = try readNumbersAsStrings(json)
        filters = try QueryFilterInput.filters(of: query)
        sorts = []
        for element in try query.array(WireKey.sortBy) ?? [] {
            if sorts.count == Self.maximumTerms.value {
                throw .limitExceeded(Self.maximumTerms, actual: sorts.count + 1, what: "the number of sort keys")
            }
            let sort = try element.object()
            guard let field = try Self.fieldName(sort, optional: false) else { throw sort.missing(WireKey.fieldName) }
            var location: Location?
            if let relative = try sort.object(WireKey.relativeLocation) {
                let value = try relative.object(WireKey.value) ?? relative
                location = try Location(json: value)
            }
            sorts.append(
                QuerySortInput(fieldName: field, ascending: try sort.bool(WireKey.ascending) ?? true, relativeLocation: location, path: element.path))
        }
    }

    fileprivate static func fieldName(_ json: ObjectReader, optional: Bool) throws(CloudKitError) -> String? {
        if let system = try json.string(WireKey.systemFieldName) {
            guard let field = SystemField(wireName: system) else {
                throw .badRequest(
                    "\(json.childPath(WireKey.systemFieldName)): '\(Names.escaped(system))' is not a system field; use \(SystemField.allCases.map(\.wireName).sorted().joined(separator: ", "))")
            }
            return field.rawValue
        }
        guard let name = try json.string(WireKey.fieldName) else {
            if optional { return nil }
            throw json.missing(WireKey.fieldName)
        }
        if name == "___recordId" { return SystemField.recordID.rawValue }
        if name.hasPrefix("___") {
            guard SystemField(rawValue: name) != nil || name == SystemField.allTokens else {
                throw .badRequest("\(json.childPath(WireKey.fieldName)): '\(Names.escaped(name))' is not a system field")
            }
            return name == SystemField.allTokens ? nil : name
        }
        if name == "allTokens", optional { return nil }
        try Names.validateIdentifier(name, kind: "field name", path: json.childPath(WireKey.fieldName))
        return name
    }
}

extension QueryFilterInput {
    /// The `filterBy` array of a `query` object (a query's or a query subscription's).
    public static func filters(of query: ObjectReader) throws(CloudKitError) -> [QueryFilterInput] {
        var filters: [QueryFilterInput] = []
        for element in try query.array(WireKey.filterBy) ?? [] {
            if filters.count == RecordsQueryRequest.maximumTerms.value {
                throw .limitExceeded(RecordsQueryRequest.maximumTerms, actual: filters.count + 1, what: "the number of filters")
            }
            let filter = try element.object()
            let name = try filter.requiredString(WireKey.comparator)
            guard let comparator = QueryComparator(rawValue: name.uppercased()) else {
                throw .badRequest(
                    "\(filter.childPath(WireKey.comparator)): '\(Names.escaped(name))' is not a comparator; use one of \(QueryComparator.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            let field = try RecordsQueryRequest.fieldName(filter, optional: comparator == .containsAllTokens || comparator == .containsAnyTokens)
            let fieldValue = try filter.requiredObject(WireKey.fieldValue)
            var declared: DeclaredFieldType?
            if let typeName = try fieldValue.string(WireKey.type) {
                guard let parsed = DeclaredFieldType(wire: typeName) else {
                    throw .badRequest("\(fieldValue.childPath(WireKey.type)): '\(Names.escaped(typeName))' is not a field type")
                }
                declared = parsed
            }
            guard let value = fieldValue.value(WireKey.value) else { throw fieldValue.missing(WireKey.value) }
            var distance: Double?
            if let raw = filter.value(WireKey.distance) {
                guard let number = raw.doubleValue, number.isFinite, number >= 0 else {
                    throw .badRequest("\(filter.childPath(WireKey.distance)): expected a distance in meters (a number of 0 or more)")
                }
                distance = number
            }
            filters.append(
                QueryFilterInput(
                    comparator: comparator, fieldName: field, value: value, declaredType: declared, distance: distance,
                    path: element.path))
        }
        return filters
    }
}
