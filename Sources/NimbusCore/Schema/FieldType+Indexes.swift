import NimbusStorage
import NimbusWire

extension FieldType {
    /// The indexes (`SchemaFieldRow.Indexes` flags) a field of this type can use: what a query
    /// can ask of it. QUERYABLE and SORTABLE for every scalar with a comparable value (strings,
    /// numbers, dates, places, references, bytes), QUERYABLE alone for lists (their elements
    /// are matched, a list is not an order), SEARCHABLE for strings and lists of strings (token
    /// search), none for assets (no value to compare) and encrypted values (ciphertext).
    /// The admin API, the deploy diff and the schema file report a field's indexes through this
    /// mask, and the dashboard offers only these, so the three never disagree (review defect 7).
    public var applicableIndexes: Int {
        if isEncrypted || scalar == .asset { return 0 }
        let searchable = scalar == .string ? SchemaFieldRow.Indexes.searchable : 0
        if isList { return SchemaFieldRow.Indexes.queryable | searchable }
        return SchemaFieldRow.Indexes.queryable | SchemaFieldRow.Indexes.sortable | searchable
    }

    /// The mask for a schema field's stored type name; every index for a name not understood.
    public static func applicableIndexes(wireName: String) -> Int {
        FieldType(wireName: wireName)?.applicableIndexes ?? SchemaFieldRow.Indexes.all
    }
}

extension SchemaFieldRow {
    /// The field's indexes that apply to its type (development grants every flag to every
    /// field it learns just in time; only these are reported).
    public var applicableIndexes: Int { indexes & FieldType.applicableIndexes(wireName: fieldType) }
}
