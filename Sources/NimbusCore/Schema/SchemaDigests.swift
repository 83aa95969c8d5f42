import NimbusStorage
import NimbusWire
import Synchronization

/// A schema's rows as the lookups a write's `SchemaResolver` makes: its record types, each
/// type's fields with their types and index flags, and what the indexes grant each type.
struct SchemaDigest: Sendable {
    let recordTypes: Set<String>
    let fields: [String: [String: FieldType]]
    /// Index flags by record type, then field (system fields included once declared).
    let indexFlags: [String: [String: Int]]
    let grants: [String: IndexGrants]

    init(_ environment: Environment, recordTypes types: [String], fields rows: [SchemaFieldRow]) {
        var fields: [String: [String: FieldType]] = [:]
        var indexFlags: [String: [String: Int]] = [:]
        for row in rows {
            indexFlags[row.recordType, default: [:]][row.fieldName] = row.indexes
            guard let type = FieldType(wireName: row.fieldType) else { continue }
            fields[row.recordType, default: [:]][row.fieldName] = type
        }
        recordTypes = Set(types)
        self.fields = fields
        self.indexFlags = indexFlags
        grants = indexFlags.mapValues { IndexGrants.of(environment, grants: $0) }
    }
}

/// Each container environment's `SchemaDigest`, made again only when its schema's rows change.
///
/// Every write made its resolver's lookups anew from the rows: 2.5% of the processor time of
/// creates at 64 connections (docs/benchmarks.md). The rows a write reads are compared with those the
/// digest was made from: while the schema is unchanged they are the same arrays (the store's
/// schema cache hands out one copy), which Swift's `==` answers at once without reading them.
final class SchemaDigests: Sendable {
    private struct Made {
        let recordTypes: [String]
        let fields: [SchemaFieldRow]
        let digest: SchemaDigest
    }

    private let made = Mutex<[SchemaKey: Made]>([:])
    /// Container environments kept at most: past it, all are forgotten and made again as used.
    static let bound = 256

    func digest(_ key: SchemaKey, recordTypes: [String], fields: [SchemaFieldRow]) -> SchemaDigest {
        if let known = made.withLock({ $0[key] }), known.recordTypes == recordTypes, known.fields == fields {
            return known.digest
        }
        let digest = SchemaDigest(key.environment, recordTypes: recordTypes, fields: fields)
        made.withLock { made in
            if made.count >= Self.bound { made.removeAll() }
            made[key] = Made(recordTypes: recordTypes, fields: fields, digest: digest)
        }
        return digest
    }
}
