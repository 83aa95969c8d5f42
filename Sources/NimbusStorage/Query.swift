/// Index rows and queries, in storage terms.
///
/// Every live record has index entries: one per scalar field, one per list element, and one
/// per system field (`___recordID`, `___createTime`, `___modTime`, `___createdBy`,
/// `___modifiedBy`), written in the same transaction as the record. Strings of searchable
/// fields also have token entries. Queries read only these and the records they select.

/// A value as indexed: numbers and texts (STRING, reference target names, BYTES as base64)
/// compare within their kind. Numbers are integers (INT64, TIMESTAMP milliseconds) or doubles
/// (DOUBLE, a location's latitude); the two compare by exact value, so an INT64 past 2^53
/// keeps its last digit (a double would round 9007199254740993 to ...992), and `.integer(3)`
/// equals `.number(3.0)`, as SQL engines compare them.
public enum IndexValue: Sendable, Hashable {
    case integer(Int64)
    case number(Double)
    case text(String)

    public var isNumeric: Bool {
        if case .text = self { return false }
        return true
    }

    /// The order of two numbers (-1, 0, 1), exact across integers and doubles; nil when
    /// either is text or NaN.
    public static func numericOrder(_ left: IndexValue, _ right: IndexValue) -> Int? {
        switch (left, right) {
        case (.integer(let a), .integer(let b)): return a < b ? -1 : (a > b ? 1 : 0)
        case (.number(let a), .number(let b)):
            if a.isNaN || b.isNaN { return nil }
            return a < b ? -1 : (a > b ? 1 : 0)
        case (.integer(let a), .number(let b)): return order(a, b)
        case (.number(let a), .integer(let b)): return order(b, a).map { -$0 }
        default: return nil
        }
    }

    /// `integer` against `double` without rounding either.
    private static func order(_ integer: Int64, _ double: Double) -> Int? {
        if double.isNaN { return nil }
        // 2^63 is exactly representable; every Int64 is below it and at or above -2^63.
        if double >= 9_223_372_036_854_775_808.0 { return -1 }
        if double < -9_223_372_036_854_775_808.0 { return 1 }
        let whole = double.rounded(.towardZero)
        let wholeInteger = Int64(whole)
        if integer != wholeInteger { return integer < wholeInteger ? -1 : 1 }
        let fraction = double - whole
        return fraction > 0 ? -1 : (fraction < 0 ? 1 : 0)
    }

    public static func == (left: IndexValue, right: IndexValue) -> Bool {
        switch (left, right) {
        case (.text(let a), .text(let b)): return a == b
        case (.text, _), (_, .text): return false
        default: return numericOrder(left, right) == 0
        }
    }

    public func hash(into hasher: inout Hasher) {
        switch self {
        case .text(let text):
            hasher.combine(1)
            hasher.combine(text)
        case .integer(let integer):
            hasher.combine(0)
            hasher.combine(integer)
        case .number(let double):
            hasher.combine(0)
            // A whole double hashes as the integer it equals.
            if double.rounded(.towardZero) == double, let integer = Int64(exactly: double) {
                hasher.combine(integer)
            } else {
                hasher.combine(double)
            }
        }
    }
}

/// One index entry of a record. `position` is -1 for a scalar field and the element's index
/// for a list element. Locations index latitude as `.number` and keep `longitude`.
public struct IndexEntry: Sendable, Hashable {
    public var field: String
    public var value: IndexValue
    public var longitude: Double?
    public var position: Int

    public init(field: String, value: IndexValue, longitude: Double? = nil, position: Int = -1) {
        self.field = field
        self.value = value
        self.longitude = longitude
        self.position = position
    }
}

/// A compound entry for one (equality field, sort field) pair: the record's scalar value of
/// each. Filtering on `field` and sorting by `sortField` then reads one range of an index in
/// result order, as a compound SQL index would, instead of every record the filter matches.
/// Only pairs the schema grants get them (`IndexGrants.sortedPairs`).
public struct SortedPairEntry: Sendable, Hashable {
    public var pair: SortedPair
    public var value: IndexValue
    public var sortValue: IndexValue

    public init(pair: SortedPair, value: IndexValue, sortValue: IndexValue) {
        self.pair = pair
        self.value = value
        self.sortValue = sortValue
    }
}

/// An equality field and a sort field whose records carry `SortedPairEntry`s.
public struct SortedPair: Sendable, Hashable {
    public var field: String
    public var sortField: String

    public init(field: String, sortField: String) {
        self.field = field
        self.sortField = sortField
    }
}

/// Everything a record is indexed under, written with it in one transaction.
public struct RecordIndexEntries: Sendable, Hashable {
    public var entries: [IndexEntry]
    public var tokens: [TokenEntry]
    public var pairs: [SortedPairEntry]

    public init(entries: [IndexEntry] = [], tokens: [TokenEntry] = [], pairs: [SortedPairEntry] = []) {
        self.entries = entries
        self.tokens = tokens
        self.pairs = pairs
    }

    /// A deleted record's: none.
    public static let none = RecordIndexEntries()
}

/// A search token of a string field (lowercased, diacritics folded).
public struct TokenEntry: Sendable, Hashable {
    public var field: String
    public var token: String

    public init(field: String, token: String) {
        self.field = field
        self.token = token
    }
}

public enum IndexComparison: String, Sendable, Hashable {
    case equal = "="
    case less = "<"
    case lessOrEqual = "<="
    case greater = ">"
    case greaterOrEqual = ">="
}

/// Which entries of a field a condition looks at.
public enum IndexScope: Sendable, Hashable {
    /// The field's scalar value.
    case scalar
    /// Any element of the list.
    case element
}

/// A condition on a record's index entries. Conditions are AND-ed.
public indirect enum IndexCondition: Sendable, Hashable {
    /// Some entry of `field` in `scope` compares to `value`.
    case compare(field: String, scope: IndexScope, IndexComparison, IndexValue)
    /// Some entry of `field` in `scope` is one of `values`.
    case oneOf(field: String, scope: IndexScope, [IndexValue])
    /// The list `field` holds every one of `values`.
    case allOf(field: String, [IndexValue])
    /// Some text entry of `field` in `scope` starts with `prefix`.
    case beginsWith(field: String, scope: IndexScope, prefix: String)
    /// The record has every (or any) of `tokens`, in `field` or in any searchable field when nil.
    case tokens(field: String?, [String], all: Bool)
    /// The location `field` is within `meters` of the point.
    case near(field: String, latitude: Double, longitude: Double, meters: Double)
    case not(IndexCondition)
}

/// A sort key: a scalar field's value, or a location field's distance from a point.
public struct IndexSort: Sendable, Hashable {
    public enum Key: Sendable, Hashable {
        case number(field: String)
        case text(field: String)
        case distance(field: String, latitude: Double, longitude: Double)

        /// The field the key sorts by.
        public var field: String {
            switch self {
            case .number(let field), .text(let field), .distance(let field, _, _): return field
            }
        }
    }

    public var key: Key
    public var ascending: Bool

    public init(_ key: Key, ascending: Bool) {
        self.key = key
        self.ascending = ascending
    }
}

/// Where a page ended: the last record's sort values and its storage identity (a driver's
/// stable id for the record, which also breaks ties). The next page starts strictly after it,
/// so records that did not change are neither repeated nor skipped.
public struct QueryPosition: Sendable, Hashable {
    public var sortValues: [IndexValue]
    public var recordID: Int64

    public init(sortValues: [IndexValue], recordID: Int64) {
        self.sortValues = sortValues
        self.recordID = recordID
    }
}

public struct RecordQuery: Sendable, Hashable {
    /// The logical database of every zone in `zoneIDs` (a query never spans databases). A
    /// driver that partitions tables by database names it in the statement, so the statement
    /// goes to the one shard that holds the zones (docs/scale-out.md, "Citus routing").
    public var databaseID: Int64
    public var zoneIDs: [Int64]
    public var recordType: String
    public var conditions: [IndexCondition]
    public var sorts: [IndexSort]
    public var after: QueryPosition?
    public var limit: Int
    /// The most time the query may take, counted as the processor time its thread spends (a
    /// busy machine does not make a query fail; work does). Past it the driver stops the
    /// query and throws `StorageError.queryTooExpensive`.
    public var budget: Duration = .milliseconds(250)
    /// The pairs whose records of this type carry `SortedPairEntry`s: an equality filter on
    /// `field` with `sortField` as first sort key reads those instead.
    public var sortedPairs: Set<SortedPair> = []

    public init(
        databaseID: Int64, zoneIDs: [Int64], recordType: String, conditions: [IndexCondition], sorts: [IndexSort],
        after: QueryPosition?, limit: Int
    ) {
        self.databaseID = databaseID
        self.zoneIDs = zoneIDs
        self.recordType = recordType
        self.conditions = conditions
        self.sorts = sorts
        self.after = after
        self.limit = limit
    }
}

extension RecordQuery {
    /// The condition sorted pair entries serve together with the first sort key: an equality
    /// on a scalar field whose pair with the first sort key (by value, not distance) the schema
    /// grants. The records it matches are then read from the pair entries already in result
    /// order, instead of every match being found and sorted.
    public var sortedPairCondition: Int? {
        guard !sortedPairs.isEmpty, let first = sorts.first else { return nil }
        let sortField: String
        switch first.key {
        case .number(let field), .text(let field): sortField = field
        case .distance: return nil
        }
        for (index, condition) in conditions.enumerated() {
            guard case .compare(let field, .scalar, .equal, _) = condition,
                sortedPairs.contains(SortedPair(field: field, sortField: sortField))
            else { continue }
            return index
        }
        return nil
    }
}

/// A page of query results with each record's position (for the continuation marker).
public struct QueryPage: Sendable {
    public var rows: [RecordRow]
    public var positions: [QueryPosition]

    public init(rows: [RecordRow], positions: [QueryPosition]) {
        self.rows = rows
        self.positions = positions
    }
}
