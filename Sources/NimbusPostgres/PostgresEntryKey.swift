import Crypto

/// What an index entry's row names instead of its record type and field: a 64-bit key, the
/// first eight bytes of SHA-256 over the type's UTF-8 length (four bytes, big-endian), the type
/// and the field (migration v37-entry-keys).
///
/// Every entry index led with the two names as text, so each comparison of a batch's inserts
/// and a query's descent walked variable-width values (`_bt_compare`, `varstr_cmp`, and
/// `nocache_index_getattr` for every column after them: about a quarter of PostgreSQL's time in
/// a batch of creates, docs/benchmarks.md). SQLite numbers its names in a table (`EntryKeys`);
/// here the key is worked out from the names, so nodes, partitions and Citus shards agree on it
/// with no table to read, lock or copy.
///
/// Two names of one record type with one key would mix their entries. Every statement that
/// reads entries also names the record's type, so only names within one type can meet, and for
/// a type's thousand fields the chance is about one in 10^13: the same bet content-addressed
/// asset blobs make with their checksums.
enum PostgresEntryKey {
    static func of(recordType: String, field: String) -> Int64 {
        var input: [UInt8] = []
        input.reserveCapacity(4 + recordType.utf8.count + field.utf8.count)
        withUnsafeBytes(of: UInt32(recordType.utf8.count).bigEndian) { input.append(contentsOf: $0) }
        input.append(contentsOf: recordType.utf8)
        input.append(contentsOf: field.utf8)
        return SHA256.hash(data: input).withUnsafeBytes { digest in
            Int64(bitPattern: digest.loadUnaligned(as: UInt64.self).bigEndian)
        }
    }

    /// The same key in SQL (`nimbus_entry_key`), for the migration that carries entries over and
    /// for an operator reading the tables by hand. `PostgresEntryKeyTests` holds the two equal.
    static let function = """
        CREATE FUNCTION nimbus_entry_key(record_type text, field text) RETURNS bigint
        LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
            SELECT ('x' || encode(substring(sha256(int4send(octet_length(convert_to(record_type, 'UTF8')))
                || convert_to(record_type, 'UTF8') || convert_to(field, 'UTF8')) from 1 for 8), 'hex'))::bit(64)::bigint
        $$
        """

    /// The keys of one unit's entries, each name's worked out once: a batch's records repeat
    /// their type's few fields.
    struct Memo {
        private struct Name: Hashable {
            let recordType: String
            let field: String
        }
        private var keys: [Name: Int64] = [:]

        mutating func key(_ recordType: String, _ field: String) -> Int64 {
            let name = Name(recordType: recordType, field: field)
            if let key = keys[name] { return key }
            let key = PostgresEntryKey.of(recordType: recordType, field: field)
            keys[name] = key
            return key
        }
    }
}
