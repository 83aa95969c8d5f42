import Foundation
import NimbusStorage
import NimbusWire

/// The index and token entries of a saved record (see `NimbusStorage/Query.swift`).
enum RecordIndexer {
    /// System fields, as the Schema Language names them and queries may use them.
    enum SystemField {
        static let recordID = "___recordID"
        static let createTime = "___createTime"
        static let modTime = "___modTime"
        static let createdBy = "___createdBy"
        static let modifiedBy = "___modifiedBy"
    }

    static func entries(for row: RecordRow, fields: RecordCodec.Fields) -> ([IndexEntry], [TokenEntry]) {
        var entries: [IndexEntry] = [
            IndexEntry(field: SystemField.recordID, value: .text(row.recordName)),
            IndexEntry(field: SystemField.createTime, value: .number(Double(row.created.timestamp))),
            IndexEntry(field: SystemField.modTime, value: .number(Double(row.modified.timestamp))),
            IndexEntry(field: SystemField.createdBy, value: .text(row.created.userRecordName)),
            IndexEntry(field: SystemField.modifiedBy, value: .text(row.modified.userRecordName)),
        ]
        var tokens: [TokenEntry] = []
        for (name, value) in fields {
            // A scalar is one entry at position -1; a list, one entry per element.
            let items: [(position: Int, value: FieldValue)]
            if case .list(_, let elements) = value {
                items = elements.enumerated().map { ($0.offset, $0.element) }
            } else {
                items = [(-1, value)]
            }
            for (position, item) in items {
                if let entry = entry(name, item, position: position) { entries.append(entry) }
                if case .string(let text) = item { tokens += Tokenizer.tokens(of: text).map { TokenEntry(field: name, token: $0) } }
            }
        }
        return (entries, Array(Set(tokens)))
    }

    /// The indexed value of a scalar: numbers as numbers, strings and reference targets as
    /// text; assets are not indexed.
    static func indexValue(_ value: FieldValue) -> IndexValue? {
        switch value {
        case .string(let text): return .text(text)
        case .int64(let number): return .number(Double(number))
        case .double(let number): return .number(number)
        case .timestamp(let millis): return .number(Double(millis))
        case .bytes(let base64): return .text(base64)
        case .reference(let reference): return .text(reference.recordName)
        case .location(let location): return .number(location.latitude)
        case .asset, .list: return nil
        }
    }

    private static func entry(_ field: String, _ value: FieldValue, position: Int) -> IndexEntry? {
        guard let indexed = indexValue(value) else { return nil }
        var entry = IndexEntry(field: field, value: indexed, position: position)
        if case .location(let location) = value { entry.longitude = location.longitude }
        return entry
    }
}

/// Text search tokens: case- and diacritic-insensitive words ("Crème Brûlée" → "creme", "brulee").
public enum Tokenizer {
    /// Tokens longer than this are cut, so a pathological string cannot bloat the index.
    static let maximumTokenLength = 64
    /// At most this many distinct tokens are indexed per string.
    static let maximumTokensPerString = 1_000

    public static func tokens(of text: String) -> [String] {
        let folded = text.folding(options: [.caseInsensitive, .diacriticInsensitive], locale: Locale(identifier: "en_US_POSIX"))
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
}
