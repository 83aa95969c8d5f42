import Foundation
import GRDB
import GRDBSQLite
import NimbusStorage

/// The arguments of one execution of a cached statement, bound straight through SQLite's C API.
///
/// Why not GRDB's `StatementArguments`: it converts each value through an unspecialized generic
/// `map` over `(any DatabaseValueConvertible)?` existentials (GRDB's initializers are not
/// inlinable, so no caller specializes them). In a profile of 200-record batches that was 28%
/// of the time of the index-entry inserts and 43% of the record row's (docs/benchmarks.md,
/// "The writer's statements bound directly"). The statements a write runs for every record go
/// through here; everything else keeps GRDB's arguments, which are the clearer API.
///
/// Text and blobs are bound `SQLITE_TRANSIENT` (SQLite copies them), so nothing bound outlives
/// the Swift value it came from.
struct BoundArguments {
    private let statement: SQLiteStatement
    private var position: CInt = 1

    fileprivate init(_ statement: SQLiteStatement) { self.statement = statement }

    /// SQLite's "copy this now" destructor.
    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    private mutating func next() -> CInt {
        defer { position += 1 }
        return position
    }

    mutating func add(_ value: Int64) { sqlite3_bind_int64(statement, next(), value) }
    mutating func add(_ value: Int) { add(Int64(value)) }
    mutating func add(_ value: Bool) { add(Int64(value ? 1 : 0)) }
    mutating func add(_ value: Double) { sqlite3_bind_double(statement, next(), value) }

    mutating func add(_ value: String) {
        let index = next()
        // The empty string needs a pointer of its own: a null one would bind NULL, not ''.
        guard !value.isEmpty else {
            sqlite3_bind_text(statement, index, "", 0, Self.transient)
            return
        }
        var text = value
        text.withUTF8 { bytes in
            bytes.withMemoryRebound(to: CChar.self) { characters in
                _ = sqlite3_bind_text(statement, index, characters.baseAddress, CInt(characters.count), Self.transient)
            }
        }
    }

    mutating func add(_ value: String?) {
        if let value { add(value) } else { addNull() }
    }

    mutating func add(_ value: Double?) {
        if let value { add(value) } else { addNull() }
    }

    mutating func add(blob bytes: [UInt8]) {
        let index = next()
        // A zero-length blob with a null pointer would bind NULL.
        guard !bytes.isEmpty else {
            sqlite3_bind_zeroblob(statement, index, 0)
            return
        }
        bytes.withUnsafeBytes { buffer in
            _ = sqlite3_bind_blob(statement, index, buffer.baseAddress, CInt(buffer.count), Self.transient)
        }
    }

    mutating func addNull() { sqlite3_bind_null(statement, next()) }

    /// A value as GRDB would bind it (the query builder's arguments, `QuerySQL.arguments`).
    mutating func add(_ value: (any DatabaseValueConvertible)?) {
        switch value?.databaseValue.storage ?? .null {
        case .null: addNull()
        case .int64(let integer): add(integer)
        case .double(let number): add(number)
        case .string(let text): add(text)
        case .blob(let data): add(blob: Array(data))
        }
    }

    /// An index value as the entry tables hold it: integers and doubles as numbers, text as text.
    mutating func add(_ value: IndexValue) {
        switch value {
        case .integer(let integer): add(integer)
        case .number(let number): add(number)
        case .text(let text): add(text)
        }
    }
}

/// One result row of a statement stepped through SQLite's C API, read by position in place:
/// the read counterpart of `BoundArguments`, for the statements every point read runs (a
/// zone by name, a record by name). GRDB's `Row.fetchOne` builds a cursor, a copied row and
/// a column index for each call, and decodes through unspecialized generics: under wrk's
/// fetch by ID those two statements cost more in GRDB than in SQLite (docs/benchmarks.md).
/// Valid only until the statement steps again or is reset: values are copied out, never kept.
struct BoundRow {
    fileprivate let statement: SQLiteStatement
}

/// The columns of a result row by position, as the driver's row decoders read them
/// (`SQLiteTransaction.recordRow`, `zoneRow`), from GRDB's `Row` or a `BoundRow` alike.
/// The columns these read are declared NOT NULL unless read as optional.
protocol ResultColumns {
    func int64(_ column: Int) -> Int64
    func text(_ column: Int) -> String
    func optionalText(_ column: Int) -> String?
    /// A blob's bytes, copied once from SQLite's buffer; empty for NULL.
    func bytes(_ column: Int) -> [UInt8]
    /// The column's text, or `earlier` itself when the column holds the same text: a record's
    /// modifier is most often its creator, and sharing the string spares making (and later
    /// freeing) a second copy of it. A requirement, so that generic readers (`recordRow`) reach
    /// a conformance's own; the default reads the column.
    func text(_ column: Int, sharing earlier: String) -> String
}

extension ResultColumns {
    func bool(_ column: Int) -> Bool { int64(column) != 0 }

    func text(_ column: Int, sharing earlier: String) -> String { text(column) }
}

extension BoundRow {
    /// A column whose type varies from row to row (a query's sort key) as an index value; nil
    /// for NULL or a blob.
    func indexValue(_ column: Int) -> IndexValue? {
        switch sqlite3_column_type(statement, CInt(column)) {
        case SQLITE_INTEGER: return .integer(int64(column))
        case SQLITE_FLOAT: return .number(sqlite3_column_double(statement, CInt(column)))
        case SQLITE_TEXT: return .text(text(column))
        default: return nil
        }
    }
}

extension BoundRow: ResultColumns {
    func int64(_ column: Int) -> Int64 { sqlite3_column_int64(statement, CInt(column)) }

    /// Whether the column is NULL (an outer join's missing side).
    func isNull(_ column: Int) -> Bool { sqlite3_column_type(statement, CInt(column)) == SQLITE_NULL }

    /// The column's text in SQLite's buffer (valid until the row moves on); nil for NULL.
    private func textBytes(_ column: Int) -> UnsafeBufferPointer<UInt8>? {
        guard let characters = sqlite3_column_text(statement, CInt(column)) else { return nil }
        return UnsafeBufferPointer(start: characters, count: Int(sqlite3_column_bytes(statement, CInt(column))))
    }

    func optionalText(_ column: Int) -> String? {
        textBytes(column).map { String(decoding: $0, as: UTF8.self) }
    }

    func text(_ column: Int) -> String { optionalText(column) ?? "" }

    /// Compared in place, byte by byte, before any string is made (`ResultColumns`).
    func text(_ column: Int, sharing earlier: String) -> String {
        guard let bytes = textBytes(column) else { return "" }
        let same = earlier.utf8.withContiguousStorageIfAvailable { known in
            known.count == bytes.count && (bytes.isEmpty || memcmp(known.baseAddress!, bytes.baseAddress!, bytes.count) == 0)
        }
        return same == true ? earlier : String(decoding: bytes, as: UTF8.self)
    }

    func bytes(_ column: Int) -> [UInt8] {
        // The pointer first, then the size (SQLite's documented order).
        guard let start = sqlite3_column_blob(statement, CInt(column)) else { return [] }
        let count = Int(sqlite3_column_bytes(statement, CInt(column)))
        return Array(UnsafeRawBufferPointer(start: start, count: count))
    }
}

extension Row: ResultColumns {
    func int64(_ column: Int) -> Int64 { self[column] }
    func text(_ column: Int) -> String { self[column] }
    func optionalText(_ column: Int) -> String? { self[column] }
    func bytes(_ column: Int) -> [UInt8] {
        ((try? withUnsafeData(atIndex: column) { $0.map { Array($0) } }) ?? nil) ?? []
    }
}

extension Database {
    /// Runs the cached statement `sql` once with the arguments `bind` adds, in order; they must
    /// be exactly as many as the statement's parameters. Errors are GRDB's `DatabaseError`, as
    /// from any other statement, so callers (and `SQLiteStorage`'s mapping of a full disk or a
    /// busy database) cannot tell the difference.
    func executeBound(_ sql: String, _ bind: (inout BoundArguments) -> Void = { _ in }) throws {
        try executeBound(cachedStatement(sql: sql), bind)
    }

    /// `executeBound` of a statement the caller already holds: one it runs for each of many rows,
    /// which finding in the connection's cache by its text hashed the whole text each time.
    func executeBound(_ statement: Statement, _ bind: (inout BoundArguments) -> Void) throws {
        let raw = boundStatement(statement.sqliteStatement, bind)
        // Reset at once: a statement left stepping holds its read of the database open.
        defer { sqlite3_reset(raw) }
        let code = sqlite3_step(raw)
        guard code == SQLITE_DONE else { throw Self.stepError(raw, code, sql: statement.sql) }
    }

    /// The first row of the cached statement `sql` with the arguments `bind` adds, as `read`
    /// makes it from the row in place; nil when there is none. For statements that find at
    /// most one row (a primary or unique key), as `executeBound` is for writes.
    func fetchOneBound<Value>(_ sql: String, _ bind: (inout BoundArguments) -> Void, _ read: (BoundRow) -> Value) throws
        -> Value?
    {
        let raw = try boundStatement(sql, bind)
        defer { sqlite3_reset(raw) }
        switch sqlite3_step(raw) {
        case SQLITE_ROW: return read(BoundRow(statement: raw))
        case SQLITE_DONE: return nil
        case let code: throw Self.stepError(raw, code, sql: sql)
        }
    }

    /// Every row of `statement` (one of this connection's cached statements) with the arguments
    /// `bind` adds, each as `read` makes it from the row in place: GRDB's cursor allocated a
    /// cursor and a row per call and bound through existentials (a list's page, 20 rows: 3% of
    /// its processor time, docs/benchmarks.md).
    func fetchAllBound<Value>(_ statement: Statement, _ bind: (inout BoundArguments) -> Void, _ read: (BoundRow) throws -> Value)
        throws -> [Value]
    {
        var values: [Value] = []
        try forEachBound(statement, bind) { values.append(try read($0)) }
        return values
    }

    /// `fetchAllBound`'s rows, each handed to `visit` in place, for a caller that keeps what it
    /// reads in lists of its own (a query's page).
    func forEachBound(_ statement: Statement, _ bind: (inout BoundArguments) -> Void, _ visit: (BoundRow) throws -> Void) throws {
        let raw = boundStatement(statement.sqliteStatement, bind)
        defer { sqlite3_reset(raw) }
        while true {
            switch sqlite3_step(raw) {
            case SQLITE_ROW: try visit(BoundRow(statement: raw))
            case SQLITE_DONE: return
            case let code: throw Self.stepError(raw, code, sql: statement.sql)
            }
        }
    }

    private func boundStatement(_ sql: String, _ bind: (inout BoundArguments) -> Void) throws -> SQLiteStatement {
        boundStatement(try cachedStatement(sql: sql).sqliteStatement, bind)
    }

    private func boundStatement(_ raw: SQLiteStatement, _ bind: (inout BoundArguments) -> Void) -> SQLiteStatement {
        sqlite3_reset(raw)
        var arguments = BoundArguments(raw)
        bind(&arguments)
        return raw
    }

    /// The error of a step that failed, read before the reset, which may replace it.
    private static func stepError(_ raw: SQLiteStatement, _ code: CInt, sql: String) -> DatabaseError {
        let connection = sqlite3_db_handle(raw)
        let message = connection.map { String(cString: sqlite3_errmsg($0)) }
        let extended = connection.map { sqlite3_extended_errcode($0) } ?? code
        return DatabaseError(resultCode: ResultCode(rawValue: extended), message: message, sql: sql)
    }
}

extension SQLiteTransaction {
    /// `Database.executeBound` on this transaction's connection.
    func executeBound(_ sql: String, _ bind: (inout BoundArguments) -> Void) throws { try db.executeBound(sql, bind) }

    /// `Database.fetchOneBound` on this transaction's connection.
    func fetchOneBound<Value>(_ sql: String, _ bind: (inout BoundArguments) -> Void, _ read: (BoundRow) -> Value) throws
        -> Value?
    { try db.fetchOneBound(sql, bind, read) }
}
