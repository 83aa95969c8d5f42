import NimbusStorage
import Synchronization

/// Each container environment's schema rows as last read, kept by the schema generation they
/// were read at (`meta.schema_generation`, which every change to `schema_types` or
/// `schema_fields` replaces in its own transaction, by trigger: migration
/// v32-schema-generation). A transaction reads the generation, one row by key, and uses the
/// kept rows when it matches: every write and every query reads its schema, and reading and
/// decoding the rows each time was about 4% of a list's processor time (docs/benchmarks.md).
///
/// Correct across processes (a CLI writing the file beside the server bumps the generation
/// too) and inside a group commit (a writer's uncommitted change is a generation no other
/// transaction sees). One entry per container environment, replaced on a new generation.
final class SchemaCache: Sendable {
    private struct Entry {
        let generation: Int64
        let schema: StoredSchema
    }
    private let entries = Mutex<[SchemaKey: Entry]>([:])

    /// The schema of `key` as read at `generation`, if kept.
    func schema(_ key: SchemaKey, at generation: Int64) -> StoredSchema? {
        entries.withLock { entries in
            guard let entry = entries[key], entry.generation == generation else { return nil }
            return entry.schema
        }
    }

    func keep(_ schema: StoredSchema, for key: SchemaKey, at generation: Int64) {
        entries.withLock { $0[key] = Entry(generation: generation, schema: schema) }
    }
}
