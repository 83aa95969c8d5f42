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

    func anyValue(of field: String, in scope: IndexScope, where test: (ConditionValue) -> Bool) -> Bool {
        switch scope {
        case .scalar: return scalar(field).map(test) ?? false
        case .element:
            guard case .list(_, let elements)? = fields[field] else { return false }
            return elements.contains { RecordIndexer.conditionValue($0).map(test) ?? false }
        }
    }

    /// The scalar value of `field` (a system field's too); nil for a list or no value.
    func scalar(_ field: String) -> ConditionValue? {
        // The app's fields never carry the reserved prefix the system fields have.
        if field.hasPrefix(Names.reservedFieldPrefix) {
            return SystemField(rawValue: field).map { ConditionValue(RecordIndexer.systemValue($0, of: row)) }
        }
        guard let value = fields[field] else { return nil }
        if case .list = value { return nil }
        return RecordIndexer.conditionValue(value)
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
