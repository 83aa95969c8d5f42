import Foundation
import NIOCore
import NimbusStorage
import PostgresNIO

/// A `RecordQuery` as one PostgreSQL statement (one round trip), written for PostgreSQL's
/// planner rather than copied from SQLite's (`NimbusSQLite/QuerySQL`, which must name its plan
/// because SQLite's planner cannot weigh index entries against each other):
///
/// - candidates are the records of the type in the zones; every filter is an `EXISTS` over the
///   record's own entries, and each names the zone and the entry's key (its type and field,
///   `PostgresEntryKey`) too, so the planner may drive from whichever index is most selective
///   (`field_index_by_number`/`_by_text`, typed btree keys: exact `numeric` for INT64, DOUBLE
///   and TIMESTAMP, byte-ordered `text`);
/// - tokens are one `tsvector` per record with a GIN index (`record_tokens`); a field's token
///   is the lexeme `field:token` and any field's the bare `token` (tokens are letters and
///   digits only, so the two never collide);
/// - NEAR reads a GiST index of the entry's point (`point(longitude, latitude)`) within a
///   bounding box, then keeps what the great-circle distance (`nimbus_distance`, the same
///   haversine as `Geodesy`) puts within the radius;
/// - an equality filter whose pair with the first sort key the schema grants reads
///   `pair_index` in result order (`RecordQuery.sortedPairCondition`);
/// - sort keys are joined from the record's scalar entries; the page starts strictly after
///   the previous page's (sort values, record id), ties broken by the record's id in the
///   first key's direction, as on SQLite, so a cursor means the same on both.
struct PostgresQuerySQL {
    private(set) var text = ""
    private(set) var bindings = PostgresBindings()
    /// The queried record type, whose fields' keys the statement names.
    private let recordType: String
    /// The record's columns as the page reads them (`r.`), made once: splitting and trimming
    /// them per query cost more than the rest of the statement's text on SQLite's twin
    /// (`QuerySQL.qualified`, docs/benchmarks.md).
    static let pageColumns = PostgresCoarseStorage.recordColumns.split(separator: ",")
        .map { "r." + $0.trimmingCharacters(in: .whitespacesAndNewlines) }.joined(separator: ", ")

    var query: PostgresQuery { PostgresQuery(unsafeSQL: text, binds: bindings) }

    init(_ query: RecordQuery) {
        recordType = query.recordType
        // One zone (nearly every query) is an equality, which lets an index whose next column
        // is the sort key hand rows over in result order and stop at the page's end; `= ANY`
        // of a one-element array made PostgreSQL read every match and sort it (a page of the
        // benchmark's filtered list read 400 rows for 21).
        let inZones = query.zoneIDs.count == 1 ? "= \(bind(query.zoneIDs[0]))" : "= ANY(\(bind(query.zoneIDs)))"
        // The database as well as the zones, though the zones alone select the same rows: a
        // Citus coordinator routes the statement to one shard by it (docs/scale-out.md).
        let database = bind(query.databaseID)
        let type = bind(query.recordType)
        let tieDirection = (query.sorts.first?.ascending ?? true) ? "ASC" : "DESC"

        var from = "records r"
        var joins = ""
        var conditions = ["r.database_id = \(database) AND r.zone_id \(inZones) AND r.record_type = \(type) AND NOT r.deleted"]
        var keys: [(expression: String, isNumeric: Bool, isText: Bool)] = []
        // Ties go to the record id; in the sorted pair plan, the entry's copy of it, the last
        // column of the index that then hands rows over in result order.
        var tie = "r.id"
        // The sorted pair plan: the entries of (equality field, first sort key) in the order of
        // one of `pair_index`'s partial indexes; the records then joined by id.
        let pairCondition = query.sortedPairCondition
        if let pairCondition, case .compare(let field, _, _, let value) = query.conditions[pairCondition],
            let first = query.sorts.first
        {
            let sortField: String
            let sortIsNumeric: Bool
            switch first.key {
            case .number(let name): (sortField, sortIsNumeric) = (name, true)
            case .text(let name), .distance(let name, _, _): (sortField, sortIsNumeric) = (name, false)
            }
            from = "pair_index p JOIN records r ON r.database_id = p.database_id AND r.id = p.record_id"
            // The entries name zone and keys, which a record never changes: the records are
            // only looked up by key, whatever the planner's statistics (on tables not yet
            // analyzed it otherwise scanned a type's records once per entry). The record's type
            // is checked on the row read anyway, so another type's names under the same keys
            // (`PostgresEntryKey`) could never join.
            conditions = ["NOT r.deleted AND r.record_type = \(type)"]
            tie = "p.record_id"
            var pair = "p.database_id = \(database) AND p.zone_id \(inZones)"
            pair += " AND p.field_key = \(bindKey(field)) AND p.sort_key = \(bindKey(sortField))"
            switch value {
            case .text(let text): pair += " AND " + Self.compareText("p.value_text", .equal, bindText(text))
            case .integer, .number: pair += " AND p.value_num = \(bindNumeric(value))"
            }
            pair += sortIsNumeric ? " AND p.sort_num IS NOT NULL" : " AND p.sort_text IS NOT NULL"
            conditions.append(pair)
            keys.append(sortIsNumeric ? ("p.sort_num", true, false) : ("p.sort_text", false, true))
        }
        for (index, sort) in query.sorts.enumerated() where pairCondition == nil || index > 0 {
            let alias = "s\(index)"
            let field: String
            var filter: String
            switch sort.key {
            case .number(let name):
                field = name
                filter = "\(alias).num IS NOT NULL AND \(alias).lon IS NULL"
                keys.append(("\(alias).num", true, false))
            case .text(let name):
                field = name
                filter = "\(alias).text IS NOT NULL"
                keys.append(("\(alias).text", false, true))
            case .distance(let name, let latitude, let longitude):
                field = name
                filter = "\(alias).lon IS NOT NULL"
                keys.append(("nimbus_distance(\(alias).num::float8, \(alias).lon, \(bind(latitude)), \(bind(longitude)))", false, false))
            }
            joins += " JOIN field_index \(alias) ON \(alias).database_id = r.database_id AND \(alias).record_id = r.id"
            joins += " AND \(alias).entry_key = \(bindKey(field))"
            joins += " AND \(alias).position = -1 AND \(filter)"
        }

        for (index, condition) in query.conditions.enumerated() where index != pairCondition {
            conditions.append(predicate(condition, inZones: inZones))
        }
        if let after = query.after {
            conditions.append(
                keyset(after, keys: keys.map(\.expression), sorts: query.sorts, tie: tie, tieAscending: tieDirection == "ASC"))
        }
        var order: [String] = []
        for (index, sort) in query.sorts.enumerated() {
            let direction = sort.ascending ? "ASC" : "DESC"
            // A text key orders by its indexed bytes first (the same order), so the index can
            // hand rows over already sorted, leaving PostgreSQL only ties to sort.
            if keys[index].isText { order.append("\(Self.indexed(keys[index].expression)) \(direction)") }
            order.append("\(keys[index].expression) \(direction)")
        }
        order.append("\(tie) \(tieDirection)")

        // Numeric keys come back as text: `numeric` has no exact Swift type, and its text is
        // what `IndexValue` reads back exactly (`indexValue(numericText:)`).
        let keyColumns = keys.enumerated().map { index, key in
            key.isNumeric ? "\(key.expression)::text AS k\(index)" : "\(key.expression) AS k\(index)"
        }
        text = "SELECT " + ([Self.pageColumns, "r.id"] + keyColumns).joined(separator: ", ")
        text += " FROM " + from + joins
        text += " WHERE " + conditions.joined(separator: " AND ")
        text += " ORDER BY " + order.joined(separator: ", ")
        text += " LIMIT \(bind(Int64(query.limit)))"
    }

    /// Binds the key of the queried type's `field` (`PostgresEntryKey`) and returns its placeholder.
    private mutating func bindKey(_ field: String) -> String {
        bind(PostgresEntryKey.of(recordType: recordType, field: field))
    }

    /// Binds a value and returns its placeholder.
    private mutating func bind<Value: PostgresDynamicTypeEncodable>(_ value: Value) -> String {
        bindings.append(value)
        return "$\(bindings.count)"
    }

    /// The bytes of a text index entry that btree indexes hold: a btree key is at most about
    /// 2.7 kB, and a string field may hold a megabyte. Comparing the leading bytes first (which
    /// the index answers) and then the whole value is exact, since bytes order as their
    /// leading bytes do before they order among themselves.
    static let indexedTextBytes = 1_000

    static func indexed(_ column: String) -> String { "substring(\(column) from 1 for \(indexedTextBytes))" }

    /// `column comparison placeholder`, for bytea texts, in a form the prefix indexes serve.
    static func compareText(_ column: String, _ comparison: IndexComparison, _ placeholder: String) -> String {
        let leading: String
        switch comparison {
        case .equal: leading = "="
        case .less, .lessOrEqual: leading = "<="
        case .greater, .greaterOrEqual: leading = ">="
        }
        return "\(indexed(column)) \(leading) \(indexed(placeholder)) AND \(column) \(comparison.rawValue) \(placeholder)"
    }

    /// A text as a bytea placeholder: its UTF-8 bytes (see `field_index.text`).
    private mutating func bindText(_ text: String) -> String {
        bind(ByteBuffer(string: text))
    }

    /// A number as a `numeric` placeholder (bound as its exact decimal text).
    private mutating func bindNumeric(_ value: IndexValue) -> String {
        "\(bind(PostgresCoarseStorage.numericText(value) ?? "NaN"))::numeric"
    }

    /// Some entry of the record's `field` in `scope` meets `test` (on `f`).
    private mutating func entries(
        _ field: String, scope: IndexScope, inZones: String, _ test: (inout PostgresQuerySQL) -> String
    ) -> String {
        let position = scope == .scalar ? "f.position = -1" : "f.position >= 0"
        let head = "EXISTS (SELECT 1 FROM field_index f WHERE f.database_id = r.database_id AND f.record_id = r.id AND f.zone_id \(inZones)"
        let middle = " AND f.entry_key = \(bindKey(field)) AND \(position) AND "
        return head + middle + test(&self) + ")"
    }

    private mutating func predicate(_ condition: IndexCondition, inZones: String) -> String {
        switch condition {
        case .not(let inner):
            return "NOT " + predicate(inner, inZones: inZones)
        case .compare(let field, let scope, let comparison, let value):
            return entries(field, scope: scope, inZones: inZones) { sql in
                switch value {
                case .text(let text): return Self.compareText("f.text", comparison, sql.bindText(text))
                case .integer, .number: return "f.num \(comparison.rawValue) \(sql.bindNumeric(value)) AND f.lon IS NULL"
                }
            }
        case .oneOf(let field, let scope, let values):
            guard !values.isEmpty else { return "false" }
            return entries(field, scope: scope, inZones: inZones) { sql in
                // Numbers and texts compare within their kind: one list each.
                let numbers = values.compactMap(PostgresCoarseStorage.numericText)
                let texts = values.compactMap { value -> String? in if case .text(let text) = value { text } else { nil } }
                var parts: [String] = []
                if !numbers.isEmpty { parts.append("(f.num = ANY(\(sql.bind(numbers))::numeric[]) AND f.lon IS NULL)") }
                if !texts.isEmpty {
                    let list = sql.bind(texts.map { ByteBuffer(string: $0) })
                    parts.append("(\(Self.indexed("f.text")) = ANY(ARRAY(SELECT \(Self.indexed("v")) FROM unnest(\(list)) v)) AND f.text = ANY(\(list)))")
                }
                return "(" + parts.joined(separator: " OR ") + ")"
            }
        case .allOf(let field, let values):
            let distinct = Array(Set(values))
            guard !distinct.isEmpty else { return "true" }
            let each = distinct.map { predicate(.compare(field: field, scope: .element, .equal, $0), inZones: inZones) }
            return "(" + each.joined(separator: " AND ") + ")"
        case .beginsWith(let field, let scope, let prefix):
            return entries(field, scope: scope, inZones: inZones) { sql in
                // A range of the byte-ordered text index: [prefix, prefix + U+10FFFF).
                Self.compareText("f.text", .greaterOrEqual, sql.bindText(prefix)) + " AND "
                    + Self.compareText("f.text", .less, sql.bindText(prefix + "\u{10FFFF}"))
            }
        case .tokens(let field, let tokens, let all):
            let distinct = Array(Set(tokens)).sorted()
            guard !distinct.isEmpty else { return "true" }
            let lexemes = distinct.map { token in Self.quotedLexeme(field.map { "\($0):\(token)" } ?? token) }
            let search = lexemes.joined(separator: all ? " & " : " | ")
            return "EXISTS (SELECT 1 FROM record_tokens t WHERE t.database_id = r.database_id AND t.record_id = r.id AND t.lexemes @@ \(bind(search))::tsquery)"
        case .near(let field, let latitude, let longitude, let meters):
            return entries(field, scope: .scalar, inZones: inZones) { sql in
                // The bounding box (a latitude band, and a longitude band where it neither wraps
                // the antimeridian nor nears a pole), then the exact distance.
                let band = meters / 111_000 + 0.001
                var west = -180.0, east = 180.0
                let cosine = cos((abs(latitude) + band) * Double.pi / 180)
                if abs(latitude) + band < 89, cosine > 0.01 {
                    let lonBand = band / cosine
                    if longitude - lonBand > -180, longitude + lonBand < 180 { (west, east) = (longitude - lonBand, longitude + lonBand) }
                }
                let box = "box(point(\(sql.bind(west)), \(sql.bind(latitude - band))), point(\(sql.bind(east)), \(sql.bind(latitude + band))))"
                return "f.lon IS NOT NULL AND point(f.lon, f.num::float8) <@ \(box)"
                    + " AND nimbus_distance(f.num::float8, f.lon, \(sql.bind(latitude)), \(sql.bind(longitude))) <= \(sql.bind(meters))"
            }
        }
    }

    /// A tsquery operand for one lexeme, quoted so nothing in it is read as an operator.
    static func quotedLexeme(_ lexeme: String) -> String {
        "'" + lexeme.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "''") + "'"
    }

    /// Strictly after `position` in the sort order: the first key that differs decides, and
    /// ties fall to the record id in the first key's direction.
    private mutating func keyset(
        _ position: QueryPosition, keys: [String], sorts: [IndexSort], tie: String, tieAscending: Bool
    ) -> String {
        var terms: [(expression: String, placeholder: String, ascending: Bool)] = []
        for (index, key) in keys.enumerated() where index < position.sortValues.count {
            let value = position.sortValues[index]
            let placeholder: String
            switch (sorts[index].key, value) {
            case (.distance, .number(let distance)): placeholder = "\(bind(distance))::float8"
            case (.distance, .integer(let distance)): placeholder = "\(bind(Double(distance)))::float8"
            case (_, .text(let text)): placeholder = bindText(text)
            default: placeholder = bindNumeric(value)
            }
            terms.append((key, placeholder, sorts[index].ascending))
        }
        terms.append((tie, bind(position.recordID), tieAscending))
        if terms.allSatisfy({ $0.ascending == tieAscending }) {
            return "(" + terms.map(\.expression).joined(separator: ", ") + ") \(tieAscending ? ">" : "<") ("
                + terms.map(\.placeholder).joined(separator: ", ") + ")"
        }
        var alternatives: [String] = []
        for (index, term) in terms.enumerated() {
            var parts = terms.prefix(index).map { "\($0.expression) = \($0.placeholder)" }
            parts.append("\(term.expression) \(term.ascending ? ">" : "<") \(term.placeholder)")
            alternatives.append("(" + parts.joined(separator: " AND ") + ")")
        }
        return "(" + alternatives.joined(separator: " OR ") + ")"
    }
}

extension PostgresCoarseStorage {
    /// A number's exact decimal text, as `numeric` reads it (nil for text). Doubles print their
    /// shortest form that reads back as the same double, so distinct doubles stay distinct and
    /// in order; infinities and NaN by PostgreSQL's names.
    static func numericText(_ value: IndexValue) -> String? {
        switch value {
        case .integer(let integer): return String(integer)
        case .number(let double):
            if double.isNaN { return "NaN" }
            if double.isInfinite { return double > 0 ? "Infinity" : "-Infinity" }
            return String(double)
        case .text: return nil
        }
    }

    /// A `numeric` read back as its text: an integer when it is one that fits, else a double.
    static func indexValue(numericText text: String) -> IndexValue {
        if let integer = Int64(text) { return .integer(integer) }
        return .number(Double(text) ?? .nan)
    }
}
