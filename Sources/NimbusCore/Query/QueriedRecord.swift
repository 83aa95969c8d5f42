import NimbusStorage
import NimbusWire

/// A stored record as a query's conditions read it: its typed fields by name, and its system
/// fields, each turned into what a condition compares only when a condition names it. Matching
/// a subscription or filtering an operator's scan reads records this way, so NimbusCore needs
/// no index layout to evaluate a filter (the drivers index as they choose).
struct QueriedRecord: ConditionSubject {
    let row: RecordRow
    private let fields: [String: FieldValue]

    init(_ row: RecordRow) throws {
        self.init(row, fields: try RecordCodec.decode(row.fields))
    }

    /// `fields` decoded from `row` already.
    init(_ row: RecordRow, fields decoded: RecordCodec.Fields) {
        self.row = row
        var fields: [String: FieldValue] = [:]
        // Reserved fields (a share's state, encrypted keys) are the server's: no query reads them.
        for (name, value) in decoded where !name.hasPrefix(Names.reservedFieldPrefix) { fields[name] = value }
        self.fields = fields
    }

    func values(of field: String, in scope: IndexScope) -> [ConditionValue] {
        if let system = SystemField(rawValue: field) {
            return scope == .scalar ? [ConditionValue(RecordIndexer.systemValue(system, of: row))] : []
        }
        switch (fields[field], scope) {
        case (.list(_, let elements)?, .element): return elements.compactMap(RecordIndexer.conditionValue)
        case (.list?, .scalar), (nil, _): return []
        case (let scalar?, .scalar): return RecordIndexer.conditionValue(scalar).map { [$0] } ?? []
        case (_?, .element): return []
        }
    }

    func tokens(of field: String?) -> Set<String> {
        var tokens = Set<String>()
        func add(_ value: FieldValue) {
            switch value {
            case .string(let text): tokens.formUnion(Tokenizer.tokens(of: text))
            case .list(_, let elements): elements.forEach(add)
            default: break
            }
        }
        if let field {
            fields[field].map(add)
        } else {
            fields.values.forEach(add)
        }
        return tokens
    }
}
