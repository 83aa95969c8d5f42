import Foundation
import NimbusWire

/// What NimbusCore hands a driver to index a saved record by: the record, its typed fields and
/// the index grants of its type. The driver chooses the layout; both drivers use the entry
/// tables of `RecordIndexer` today (docs/queries.md).
public struct IndexedRecord: Sendable {
    public var row: RecordRow
    public var fields: [(name: String, value: FieldValue)]
    public var grants: IndexGrants

    public init(row: RecordRow, fields: [(name: String, value: FieldValue)], grants: IndexGrants) {
        self.row = row
        self.fields = fields
        self.grants = grants
    }
}

/// Which indexes a record type's schema grants: what a driver indexes its records by. In
/// development, every field and system field, with tokens for every string: the schema grows
/// just in time and every field is queryable there. In production, only what the schema
/// grants: entries for QUERYABLE or SORTABLE fields (system fields only once declared), tokens
/// for SEARCHABLE ones. An index no query may use is not written (the seeds' "drop the index
/// you never query" pays off on every save).
public struct IndexGrants: Sendable {
    /// Index flags by field name; `nil` grants everything.
    public let grants: [String: Int]?
    /// The (QUERYABLE field, SORTABLE field) pairs whose records get `SortedPairEntry`s:
    /// production only (development indexes every field, and every pair of fields would
    /// be quadratic), by sort field then equality field name, up to `maximumSortedPairs`.
    /// The query planner asks the same value, so it uses only pairs that were written.
    /// Worked out once per grants (it sorts the field names): per saved record, it was a
    /// fifth of indexing a record.
    public let sortedPairs: [SortedPair]
    /// The system fields whose entries are written, worked out once per grants too: asked
    /// per saved record, each was a string hashed for a dictionary lookup.
    let indexedSystemFields: [SystemField]

    public init(grants: [String: Int]?) {
        self.grants = grants
        sortedPairs = grants.map(Self.sortedPairs) ?? []
        indexedSystemFields = SystemField.allCases.filter { Self.wantsEntry(Self.flags($0.rawValue, in: grants)) }
    }

    public static let everything = IndexGrants(grants: nil)

    /// The grants in `environment` of a record type whose schema fields carry `grants`:
    /// drivers and the query planner both ask here, so a plan only reads what was written.
    public static func of(_ environment: Environment, grants: [String: Int]) -> IndexGrants {
        environment == .production ? IndexGrants(grants: grants) : .everything
    }

    func flags(_ field: String) -> Int { Self.flags(field, in: grants) }
    func wantsEntry(_ field: String) -> Bool { Self.wantsEntry(flags(field)) }
    func wantsTokens(_ field: String) -> Bool { Self.wantsTokens(flags(field)) }

    private static func flags(_ field: String, in grants: [String: Int]?) -> Int {
        grants.map { $0[field] ?? 0 } ?? SchemaFieldRow.Indexes.all
    }
    /// Whether a field with these index flags gets entries (QUERYABLE or SORTABLE).
    static func wantsEntry(_ flags: Int) -> Bool { flags & (SchemaFieldRow.Indexes.queryable | SchemaFieldRow.Indexes.sortable) != 0 }
    /// Whether a field with these index flags gets tokens (SEARCHABLE).
    static func wantsTokens(_ flags: Int) -> Bool { flags & SchemaFieldRow.Indexes.searchable != 0 }

    /// At most this many sorted pairs per record type: each is one more entry per save.
    static let maximumSortedPairs = 16

    private static func sortedPairs(_ grants: [String: Int]) -> [SortedPair] {
        let names = grants.keys.sorted()
        var pairs: [SortedPair] = []
        for sortField in names where grants[sortField]! & SchemaFieldRow.Indexes.sortable != 0 {
            for field in names where field != sortField && grants[field]! & SchemaFieldRow.Indexes.queryable != 0 {
                guard pairs.count < maximumSortedPairs else { return pairs }
                pairs.append(SortedPair(field: field, sortField: sortField))
            }
        }
        return pairs
    }
}

/// The entry-table layout of a record's indexes (`IndexEntry`, `TokenEntry`,
/// `SortedPairEntry`; see Query.swift): the layout SQLite was measured with, which the unit of
/// work writes for the PostgreSQL driver too. A driver that indexes otherwise does not call it.
public enum RecordIndexer {
    /// The entries of a saved record under its grants.
    public static func entries(for record: IndexedRecord) -> RecordIndexEntries {
        let (row, fields, grants) = (record.row, record.fields, record.grants)
        // Room for a scalar entry a field (up to 32) from the start: growing the list as entries
        // came reallocated it two or three times a record (2% of a batch's writer,
        // docs/benchmarks.md). Lists and longer records grow it as before.
        var entries: [IndexEntry] = []
        entries.reserveCapacity(grants.indexedSystemFields.count + min(fields.count, 32))
        for field in grants.indexedSystemFields { entries.append(IndexEntry(field: field.rawValue, value: systemValue(field, of: row))) }
        var tokens: [TokenEntry] = []
        var tokensSeen = Set<TokenEntry>()
        // Tokens in the order first met, not a set's: a unit of work decided twice over the same
        // rows indexes a record the same way (a set's order differs from one instance to the
        // next), which the tests' purity check compares.
        for (name, value) in fields where !name.hasPrefix(Names.reservedFieldPrefix) {
            let flags = grants.flags(name)
            let wantsEntry = IndexGrants.wantsEntry(flags)
            let wantsTokens = IndexGrants.wantsTokens(flags)
            if !wantsEntry, !wantsTokens { continue }
            func index(_ item: FieldValue, position: Int) {
                if wantsEntry, let entry = entry(name, item, position: position) { entries.append(entry) }
                if wantsTokens, case .string(let text) = item {
                    for token in Tokenizer.tokens(of: text) where tokensSeen.insert(TokenEntry(field: name, token: token)).inserted {
                        tokens.append(TokenEntry(field: name, token: token))
                    }
                }
            }
            // A scalar is one entry at position -1; a list, one entry per element.
            if case .list(_, let elements) = value {
                for (position, element) in elements.enumerated() { index(element, position: position) }
            } else {
                index(value, position: -1)
            }
        }
        return RecordIndexEntries(entries: entries, tokens: tokens, pairs: pairs(of: entries, grants.sortedPairs))
    }

    /// The pair entries of a record: for each pair, when both fields hold a scalar (not a
    /// location: it has no single order).
    private static func pairs(of entries: [IndexEntry], _ pairs: [SortedPair]) -> [SortedPairEntry] {
        guard !pairs.isEmpty else { return [] }
        // A record has a few entries: searched in place, without a dictionary built per record.
        func scalar(_ field: String) -> IndexValue? {
            entries.last { $0.position == -1 && $0.longitude == nil && $0.field == field }?.value
        }
        return pairs.compactMap { pair in
            guard let value = scalar(pair.field), let sortValue = scalar(pair.sortField) else { return nil }
            return SortedPairEntry(pair: pair, value: value, sortValue: sortValue)
        }
    }

    /// The indexed value of a system field of `row`.
    public static func systemValue(_ field: SystemField, of row: RecordRow) -> IndexValue {
        switch field {
        case .recordID: .text(row.recordName)
        case .createTime: .integer(row.created.timestamp)
        case .modTime: .integer(row.modified.timestamp)
        case .createdBy: .text(row.created.userRecordName)
        case .modifiedBy: .text(row.modified.userRecordName)
        }
    }

    /// What a condition compares for a scalar: its indexed value, and a location's longitude.
    public static func conditionValue(_ value: FieldValue) -> ConditionValue? {
        guard let indexed = indexValue(value) else { return nil }
        if case .location(let location) = value { return ConditionValue(indexed, longitude: location.longitude) }
        return ConditionValue(indexed)
    }

    /// The indexed value of a scalar: INT64 and TIMESTAMP as integers (exact at any size),
    /// DOUBLE as a double, strings and reference targets as text; assets are not indexed.
    public static func indexValue(_ value: FieldValue) -> IndexValue? {
        switch value {
        case .string(let text): return .text(text)
        case .int64(let number): return .integer(number)
        case .double(let number): return .number(number)
        case .timestamp(let millis): return .integer(millis)
        case .bytes(let base64): return .text(base64)
        case .reference(let reference): return .text(reference.recordName)
        case .location(let location): return .number(location.latitude)
        case .asset, .list: return nil
        case .encrypted: return nil  // ciphertext: nothing a query could compare
        }
    }

    private static func entry(_ field: String, _ value: FieldValue, position: Int) -> IndexEntry? {
        guard let item = conditionValue(value) else { return nil }
        return IndexEntry(field: field, value: item.value, longitude: item.longitude, position: position)
    }
}

/// Text search tokens: case- and diacritic-insensitive words ("Crème Brûlée" → "creme", "brulee").
public enum Tokenizer {
    /// Tokens longer than this are cut, so a pathological string cannot bloat the index.
    static let maximumTokenLength = 64
    /// At most this many distinct tokens are indexed per string.
    static let maximumTokensPerString = 1_000

    /// Made once: creating a Locale per string was 2% of a batch save's time.
    private static let foldingLocale = Locale(identifier: "en_US_POSIX")

    public static func tokens(of text: String) -> [String] {
        asciiTokens(of: text) ?? foldedTokens(of: text)
    }

    /// Any text: Foundation folds case and diacritics, then words are runs of letters and digits.
    static func foldedTokens(of text: String) -> [String] {
        let folded = text.folding(options: [.caseInsensitive, .diacriticInsensitive], locale: foldingLocale)
            .lowercased()
        var seen = Set<String>()
        var result: [String] = []
        var current = ""
        func flush() {
            if !current.isEmpty {
                let token = String(current.prefix(maximumTokenLength))
                if result.count < maximumTokensPerString, seen.insert(token).inserted { result.append(token) }
                current = ""
            }
        }
        for character in folded {
            if character.isLetter || character.isNumber {
                current.append(character)
            } else {
                flush()
            }
        }
        flush()
        return result
    }

    /// The same tokens for plain ASCII text without Foundation's folding, which needs no
    /// diacritics removed and was most of the indexing time; `nil` for any other text.
    static func asciiTokens(of text: String) -> [String]? {
        let utf8 = text.utf8
        return utf8.withContiguousStorageIfAvailable { bytes -> [String]? in
            var seen = Set<String>()
            var result: [String] = []
            var start = -1
            func flush(_ end: Int) {
                guard start >= 0 else { return }
                let length = min(end - start, maximumTokenLength)
                let token = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<(start + length)]), as: UTF8.self).lowercased()
                if result.count < maximumTokensPerString, seen.insert(token).inserted { result.append(token) }
                start = -1
            }
            for (offset, byte) in bytes.enumerated() {
                if byte >= 0x80 { return nil }
                let isWordByte = (byte >= 0x30 && byte <= 0x39) || (byte | 0x20 >= 0x61 && byte | 0x20 <= 0x7A)
                if isWordByte {
                    if start < 0 { start = offset }
                } else {
                    flush(offset)
                }
            }
            flush(bytes.count)
            return result
        } ?? nil
    }
}
