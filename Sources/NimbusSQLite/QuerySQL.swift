import Foundation
import GRDB
import NimbusStorage

/// Turns a `RecordQuery` into one SQL statement over `records`, `field_index`, `token_index`
/// and `pair_index`.
///
/// The plan names what drives it (`Driver`): the records of the type in name order, the first
/// sort key's index walked in order, the entries one selective filter matches, or the sorted
/// pair entries of an equality filter and the first sort key (already in result order). Every
/// condition is then checked per candidate with a correlated `EXISTS` probe of the record's
/// own entries (`NOT EXISTS` for negations). Sort keys are joined from the field index
/// (records lacking a sort field are not listed); the page starts strictly after the previous
/// page's last (sort values, record id), so paging is stable under writes. Ties break by the
/// record's id (its rowid) in the first key's direction, whatever the driver, so a cursor
/// means the same whichever plan served the page. `SQLiteTransaction.queryRecords` picks the
/// driver by counting, up to a cap, what each filter matches.
struct QuerySQL {
    private(set) var text = ""
    private(set) var arguments: [(any DatabaseValueConvertible)?] = []
    /// Where candidates come from.
    enum Driver: Equatable {
        case records
        case firstSort
        /// The entries of `query.conditions[index]` (a positive condition).
        case condition(Int)
        /// The sorted pair entries of `query.conditions[index]` (an equality on a scalar) and
        /// the first sort key.
        case pair(Int)

        /// The driving condition, if one drives.
        var conditionIndex: Int? {
            switch self {
            case .condition(let index), .pair(let index): return index
            case .records, .firstSort: return nil
            }
        }
    }

    /// The sorted-pair plan, when the query has one (`RecordQuery.sortedPairCondition`).
    static func pairDriver(for query: RecordQuery) -> Driver? {
        query.sortedPairCondition.map(Driver.pair)
    }

    /// How a condition is written: a correlated probe of the candidate `r`, or a standalone
    /// `SELECT record_id` of the records it matches (to drive or to count).
    private enum Form {
        case probe
        case standalone
    }

    private var form = Form.probe
    /// The integer keys of the fields and pairs the query names (`EntryKeys`).
    private let keys: EntryKeyMap
    /// The column naming the candidate (its record id) a probe checks.
    private var candidate = "c.record_id"

    /// `nimbus_distance(lat1, lon1, lat2, lon2)`: great-circle distance in meters (haversine).
    static let distanceFunction = DatabaseFunction("nimbus_distance", argumentCount: 4, pure: true) { values in
        guard let lat1 = Double.fromDatabaseValue(values[0]), let lon1 = Double.fromDatabaseValue(values[1]),
            let lat2 = Double.fromDatabaseValue(values[2]), let lon2 = Double.fromDatabaseValue(values[3])
        else { return nil }
        return Geodesy.greatCircleMeters(lat1, lon1, lat2, lon2)
    }

    /// `?, ?, ?`: `count` parameter placeholders.
    static func marks(_ count: Int) -> String {
        Array(repeating: "?", count: count).joined(separator: ", ")
    }

    /// How many entries a filter may match before the plan prefers walking the sort index.
    static let selectiveMatches = 2_000

    /// `columns` (a comma-separated list) each prefixed with `table.`: made once per list, not
    /// per query (trimming with Foundation's character sets took longer than the rest of the
    /// statement's text; docs/benchmarks.md).
    static func qualified(_ columns: String, by table: String) -> String {
        columns.split(separator: ",").map { "\(table).\($0.trimmingCharacters(in: .whitespacesAndNewlines))" }
            .joined(separator: ", ")
    }

    /// `pageColumns`: the record's columns as the page's records read them (`r.`, `qualified`);
    /// `keys`: the entry keys of every name the query reads (`RecordQuery.entryNames`).
    init(query: RecordQuery, pageColumns: String, driver: Driver, keys: EntryKeyMap) {
        self.keys = keys
        let zoneMarks = Self.marks(query.zoneIDs.count)
        let tieDirection = (query.sorts.first?.ascending ?? true) ? "ASC" : "DESC"

        // The driver: where candidates come from, each named by its record id (`c.record_id`).
        var from: String
        var fromArguments: [(any DatabaseValueConvertible)?] = []
        var whereClause: [String] = []
        var whereArguments: [(any DatabaseValueConvertible)?] = []
        switch driver {
        case .records:
            from = "(SELECT rowid AS record_id, zone_id, record_type, deleted FROM records) c"
            whereClause.append("c.zone_id IN (\(zoneMarks)) AND c.record_type = ? AND c.deleted = 0")
            whereArguments = query.zoneIDs.map { $0 } + [query.recordType]
        case .firstSort:
            from = "field_index c"
        case .condition(let index):
            // The records the selective filter matches, each once.
            var standalone = QuerySQL(keys: keys)
            standalone.form = .standalone
            standalone.append(query.conditions[index], query: query, zoneMarks: zoneMarks)
            // A scalar field has one entry per record: no record can come twice, and SQLite
            // need not build a temporary table to make them distinct.
            from = Self.yieldsEachRecordOnce(query.conditions[index])
                ? "(\(standalone.text)) c" : "(SELECT DISTINCT record_id FROM (\(standalone.text))) c"
            fromArguments = standalone.arguments
        case .pair(let index):
            guard case .compare(let field, _, _, let value) = query.conditions[index], let first = query.sorts.first else {
                preconditionFailure("a pair driver is chosen for an equality condition and a sort key")
            }
            from = "pair_index c"
            whereClause.append("c.zone_id IN (\(zoneMarks)) AND c.pair_key = ? AND c.value = ?")
            whereArguments = query.zoneIDs.map { $0 } + [keys.pair(field, sortField: first.key.field), Self.argument(value)]
        }

        // Sort keys, joined from the candidate's entries (the first one is the driver itself
        // when the sort index drives).
        var joins = ""
        var joinArguments: [(any DatabaseValueConvertible)?] = []
        var keyExpressions: [String] = []
        for (index, sort) in query.sorts.enumerated() {
            if index == 0, case .pair = driver {
                keyExpressions.append("c.sort_value")
                continue
            }
            let driving = index == 0 && driver == .firstSort
            let alias = driving ? "c" : "s\(index)"
            var filter = "\(alias).field_key = ? AND \(alias).position = -1"
            let field: String
            let expression: String
            switch sort.key {
            case .number(let name):
                field = name
                filter += " AND \(alias).num IS NOT NULL AND \(alias).lon IS NULL"
                expression = "\(alias).num"
            case .text(let name):
                field = name
                filter += " AND \(alias).text IS NOT NULL"
                expression = "\(alias).text"
            case .distance(let name, let latitude, let longitude):
                field = name
                filter += " AND \(alias).lon IS NOT NULL"
                expression = "nimbus_distance(\(alias).num, \(alias).lon, \(latitude), \(longitude))"
            }
            let keyArguments: [(any DatabaseValueConvertible)?] = [keys.field(field)]
            if driving {
                whereClause.append("c.zone_id IN (\(zoneMarks)) AND " + filter)
                whereArguments += query.zoneIDs.map { $0 } + keyArguments
            } else {
                joins += " JOIN field_index \(alias) ON \(alias).record_id = c.record_id AND "
                joins += filter
                joinArguments += keyArguments
            }
            keyExpressions.append(expression)
        }

        // The page's keys, chosen from index entries alone.
        var inner = "SELECT c.record_id AS record_id"
        inner.reserveCapacity(512)
        for (index, expression) in keyExpressions.enumerated() { inner += ", \(expression) AS k\(index)" }
        inner += " FROM \(from)\(joins)"
        var innerArguments = fromArguments + joinArguments
        for (index, condition) in query.conditions.enumerated() {
            // The driver's own candidates match it by construction: probing again would double
            // the seeks per candidate (most of an equality + sort query's time).
            if driver.conditionIndex == index, Self.drivesExactly(condition) { continue }
            var probe = QuerySQL(keys: keys)
            probe.append(condition, query: query, zoneMarks: zoneMarks)
            whereClause.append(probe.text)
            whereArguments += probe.arguments
        }
        if let after = query.after {
            var keyset = QuerySQL(keys: keys)
            keyset.appendKeyset(
                after, keys: keyExpressions, sorts: query.sorts, idColumn: "c.record_id", tieAscending: tieDirection == "ASC")
            whereClause.append(keyset.text)
            whereArguments += keyset.arguments
        }
        if !whereClause.isEmpty { inner += " WHERE " + whereClause.joined(separator: " AND ") }
        innerArguments += whereArguments
        var innerOrder = query.sorts.enumerated().map { "\(keyExpressions[$0.offset]) \($0.element.ascending ? "ASC" : "DESC")" }
        innerOrder.append("c.record_id \(tieDirection)")
        inner += " ORDER BY " + innerOrder.joined(separator: ", ") + " LIMIT ?"
        innerArguments.append(query.limit)

        // Then the records of that page only, in the page's order. The page (a subquery with its
        // own ORDER BY and LIMIT, never flattened into a join) runs as a co-routine that yields
        // its rows in order, and CROSS JOIN keeps it the outer loop, so each record comes out in
        // the order its page row went in. Sorting again by the same keys built a temporary B-tree
        // of every page row with all of its record's columns, fields included (about a tenth of
        // SQLite's time for a page of 20). The query suites check every plan's order
        // (`sortDrivenPlanPagesCorrectlyThroughManyMatches` and `sortedPairsPageLikePerFieldEntries`
        // among others fail when a page comes out in any other).
        text.reserveCapacity(pageColumns.utf8.count + inner.utf8.count + 128)
        text += "SELECT " + pageColumns
        text += ", page.record_id AS record_id"
        for index in keyExpressions.indices { text += ", page.k\(index) AS k\(index)" }
        text += " FROM (\(inner)) page CROSS JOIN records r ON r.rowid = page.record_id"
        arguments = innerArguments
    }

    /// Whether a condition can supply candidates: positive, and naming at least one value.
    static func canDrive(_ condition: IndexCondition) -> Bool {
        switch condition {
        case .not: return false
        case .oneOf(_, _, let values), .allOf(_, let values): return !values.isEmpty
        case .tokens(_, let tokens, _): return !tokens.isEmpty
        case .compare, .beginsWith, .near: return true
        }
    }

    /// Whether a driving condition's standalone form selects exactly the records it matches
    /// (lists of values and token groups drive by their first value only; the probe checks
    /// the rest).
    private static func drivesExactly(_ condition: IndexCondition) -> Bool {
        switch condition {
        case .compare, .oneOf, .beginsWith, .near: return true
        case .allOf, .tokens, .not: return false
        }
    }

    /// Whether a driving condition's standalone form lists each record at most once: it
    /// reads scalar entries (one per record and field).
    private static func yieldsEachRecordOnce(_ condition: IndexCondition) -> Bool {
        switch condition {
        case .compare(_, .scalar, _, _), .oneOf(_, .scalar, _), .beginsWith(_, .scalar, _), .near: return true
        default: return false
        }
    }

    /// `SELECT COUNT(*)` of the index entries matching one positive condition, counting no
    /// further than `cap`: the planner's estimate of how selective it is.
    static func boundedCount(_ condition: IndexCondition, in query: RecordQuery, keys: EntryKeyMap, cap: Int) -> QuerySQL {
        var standalone = QuerySQL(keys: keys)
        standalone.form = .standalone
        let zoneMarks = Self.marks(query.zoneIDs.count)
        standalone.append(condition, query: query, zoneMarks: zoneMarks)
        var sql = QuerySQL(keys: keys)
        sql.text = "SELECT COUNT(*) FROM (\(standalone.text) LIMIT ?)"
        sql.arguments = standalone.arguments + [cap]
        return sql
    }

    private init(keys: EntryKeyMap) { self.keys = keys }

    /// A probe `EXISTS (SELECT 1 FROM field_index f WHERE <r's entries of field> AND …)`, or
    /// standalone `SELECT f.record_id FROM field_index f WHERE <zone, type, field> AND …`.
    private mutating func entriesOf(
        _ field: String, scope: IndexScope, query: RecordQuery, zoneMarks: String, negated: Bool = false,
        _ predicate: (inout QuerySQL) -> Void
    ) {
        switch form {
        case .probe:
            text += "\(negated ? "NOT " : "")EXISTS (SELECT 1 FROM field_index f"
            text += " WHERE f.record_id = \(candidate) AND f.field_key = ?"
        case .standalone:
            text += "SELECT f.record_id AS record_id FROM field_index f"
            text += " WHERE f.zone_id IN (\(zoneMarks)) AND f.field_key = ?"
            arguments += query.zoneIDs.map { $0 }
        }
        arguments.append(keys.field(field))
        switch scope {
        case .scalar: text += " AND f.position = -1"
        case .element: text += " AND f.position >= 0"
        }
        text += " AND "
        predicate(&self)
        if form == .probe { text += ")" }
    }

    private static func column(_ value: IndexValue) -> String {
        value.isNumeric ? "f.num" : "f.text"
    }

    static func argument(_ value: IndexValue) -> any DatabaseValueConvertible {
        switch value {
        case .integer(let integer): return integer
        case .number(let number): return number
        case .text(let text): return text
        }
    }

    private mutating func append(_ condition: IndexCondition, query: RecordQuery, zoneMarks: String, negated: Bool = false) {
        switch condition {
        case .not(let inner):
            append(inner, query: query, zoneMarks: zoneMarks, negated: !negated)
        case .compare(let field, let scope, let comparison, let value):
            entriesOf(field, scope: scope, query: query, zoneMarks: zoneMarks, negated: negated) { sql in
                sql.text += "\(Self.column(value)) \(comparison.rawValue) ?"
                if value.isNumeric { sql.text += " AND f.lon IS NULL" }
                sql.arguments.append(Self.argument(value))
            }
        case .oneOf(let field, let scope, let values):
            guard !values.isEmpty else {
                text += negated ? "1" : "0"
                return
            }
            entriesOf(field, scope: scope, query: query, zoneMarks: zoneMarks, negated: negated) { sql in
                // Numbers and texts compare within their kind: one IN list each.
                let numbers = values.filter(\.isNumeric)
                let texts = values.filter { !$0.isNumeric }
                var parts: [String] = []
                if !numbers.isEmpty {
                    parts.append("(f.num IN (\(Self.marks(numbers.count))) AND f.lon IS NULL)")
                    sql.arguments += numbers.map(Self.argument)
                }
                if !texts.isEmpty {
                    parts.append("f.text IN (\(Self.marks(texts.count)))")
                    sql.arguments += texts.map(Self.argument)
                }
                sql.text += "(" + parts.joined(separator: " OR ") + ")"
            }
        case .allOf(let field, let values):
            let distinct = Array(Set(values))
            guard !distinct.isEmpty else {
                text += negated ? "0" : "1"
                return
            }
            if form == .standalone {
                // Candidates: records holding the first value; the probe checks the rest.
                append(.compare(field: field, scope: .element, .equal, distinct[0]), query: query, zoneMarks: zoneMarks)
                return
            }
            text += negated ? "NOT (" : "("
            for (index, value) in distinct.enumerated() {
                if index > 0 { text += " AND " }
                append(.compare(field: field, scope: .element, .equal, value), query: query, zoneMarks: zoneMarks)
            }
            text += ")"
        case .beginsWith(let field, let scope, let prefix):
            entriesOf(field, scope: scope, query: query, zoneMarks: zoneMarks, negated: negated) { sql in
                // A range on the text index: [prefix, prefix + U+10FFFF).
                sql.text += "f.text >= ? AND f.text < ?"
                sql.arguments.append(prefix)
                sql.arguments.append(prefix + "\u{10FFFF}")
            }
        case .tokens(let field, let tokens, let all):
            let distinct = Array(Set(tokens)).sorted()
            guard !distinct.isEmpty else {
                text += negated ? "0" : "1"
                return
            }
            let groups = all ? distinct.map { [$0] } : [distinct]
            if form == .standalone {
                // Candidates: records with the first group's tokens; the probe checks the rest.
                text += "SELECT t.record_id AS record_id FROM token_index t"
                text += " WHERE t.zone_id IN (\(zoneMarks)) AND t.record_type = ?"
                arguments += query.zoneIDs.map { $0 }
                arguments.append(query.recordType)
                appendTokenMatch(groups[0], field: field)
                return
            }
            text += negated ? "NOT (" : "("
            for (index, group) in groups.enumerated() {
                if index > 0 { text += " AND " }
                text += "EXISTS (SELECT 1 FROM token_index t WHERE t.record_id = \(candidate)"
                appendTokenMatch(group, field: field)
                text += ")"
            }
            text += ")"
        case .near(let field, let latitude, let longitude, let meters):
            entriesOf(field, scope: .scalar, query: query, zoneMarks: zoneMarks, negated: negated) { sql in
                // A latitude band first (it uses the number index), then the exact distance.
                let band = meters / 111_000 + 0.001
                sql.text += "f.num BETWEEN ? AND ? AND f.lon IS NOT NULL"
                sql.arguments += [latitude - band, latitude + band]
                // And a longitude band, where it neither wraps the antimeridian nor nears a pole.
                let cosine = cos((abs(latitude) + band) * Double.pi / 180)
                if abs(latitude) + band < 89, cosine > 0.01 {
                    let lonBand = band / cosine
                    if longitude - lonBand > -180, longitude + lonBand < 180 {
                        sql.text += " AND f.lon BETWEEN ? AND ?"
                        sql.arguments += [longitude - lonBand, longitude + lonBand]
                    }
                }
                sql.text += " AND nimbus_distance(f.num, f.lon, ?, ?) <= ?"
                sql.arguments += [latitude, longitude, meters]
            }
        }
    }

    /// ` AND t.token IN (…) [AND t.field = ?]`: a token entry is one of `tokens`, in `field` if given.
    private mutating func appendTokenMatch(_ tokens: [String], field: String?) {
        text += " AND t.token IN (\(Self.marks(tokens.count)))"
        arguments += tokens.map { $0 }
        if let field {
            text += " AND t.field = ?"
            arguments.append(field)
        }
    }

    /// Strictly after `position` in the sort order: the first key that differs decides, and
    /// ties fall to the record id in the first key's direction. With one key (or none) this is
    /// a row-value comparison SQLite can answer from the index.
    private mutating func appendKeyset(
        _ position: QueryPosition, keys: [String], sorts: [IndexSort], idColumn: String, tieAscending: Bool
    ) {
        var terms: [(String, any DatabaseValueConvertible, Bool)] = []
        for (index, key) in keys.enumerated() where index < position.sortValues.count {
            terms.append((key, Self.argument(position.sortValues[index]), sorts[index].ascending))
        }
        terms.append((idColumn, position.recordID, tieAscending))
        if terms.allSatisfy({ $0.2 == tieAscending }) {
            text += "(" + terms.map(\.0).joined(separator: ", ") + ") \(tieAscending ? ">" : "<") ("
            text += Self.marks(terms.count) + ")"
            arguments += terms.map(\.1)
            return
        }
        var alternatives: [String] = []
        for (index, (expression, value, ascending)) in terms.enumerated() {
            var parts: [String] = []
            for (prefixExpression, prefixValue, _) in terms.prefix(index) {
                parts.append("\(prefixExpression) = ?")
                arguments.append(prefixValue)
            }
            parts.append("\(expression) \(ascending ? ">" : "<") ?")
            arguments.append(value)
            alternatives.append("(" + parts.joined(separator: " AND ") + ")")
        }
        text += "(" + alternatives.joined(separator: " OR ") + ")"
    }
}
