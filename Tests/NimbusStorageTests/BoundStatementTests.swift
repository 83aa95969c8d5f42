import Foundation
import GRDB
@testable import NimbusSQLite
import NimbusStorage
import NimbusTestSupport
import Testing

/// The writer's statements bound through SQLite's C API (`BoundArguments`) store what GRDB's
/// arguments would: each value as its SQLite type, the empty string and the empty blob as
/// themselves (not NULL), text byte for byte; a failing statement throws GRDB's error with
/// SQLite's code and stays usable.
@Suite struct BoundStatementTests {
    func withSQLite(_ body: (SQLiteStorage) async throws -> Void) async throws {
        let directory = NSTemporaryDirectory() + "nimbus-bound-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let storage = try SQLiteStorage(path: directory + "/db.sqlite", synchronous: .normal)
        try await body(storage)
        try await storage.close()
    }

    @Test func valuesKeepTheirTypes() async throws {
        try await withSQLite { storage in
            let stored = try await storage.writeSQLite { tx -> [String] in
                try tx.execute("CREATE TEMP TABLE t (a, b, c, d, e, f, g, h, i)")
                let text = "héllo, wörld 🌤"
                for _ in 0..<2 {  // twice: the second run reuses the cached statement's bindings
                    try tx.executeBound("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)") { arguments in
                        arguments.add("")
                        arguments.add(blob: [])
                        arguments.add(String?.none)
                        arguments.add(text)
                        arguments.add(Int64.max)
                        arguments.add(0.5)
                        arguments.add(true)
                        arguments.add(blob: [0, 255, 7])
                        arguments.add(IndexValue.integer(-3))
                    }
                }
                let row = try #require(
                    try tx.fetchRow(
                        """
                        SELECT typeof(a) || ':' || a, typeof(b) || ':' || length(b), typeof(c), d, e, f, g, hex(h), typeof(i) || ':' || i,
                            count(*) OVER ()
                        FROM t
                        """))
                return [
                    row[0], row[1], row[2], row[3], String(row[4] as Int64), String(row[5] as Double), String(row[6] as Int64), row[7],
                    row[8], String(row[9] as Int64),
                ]
            }
            #expect(stored == ["text:", "blob:0", "null", "héllo, wörld 🌤", String(Int64.max), "0.5", "1", "00FF07", "integer:-3", "2"])
        }
    }

    @Test func aFailureIsGRDBsErrorAndTheStatementStaysUsable() async throws {
        try await withSQLite { storage in
            let (code, message, count) = try await storage.writeSQLite { tx -> (ResultCode?, String?, Int64) in
                try tx.execute("CREATE TEMP TABLE u (k PRIMARY KEY)")
                let insert = "INSERT INTO u VALUES (?)"
                try tx.executeBound(insert) { $0.add(Int64(1)) }
                var failure: DatabaseError?
                do {
                    try tx.executeBound(insert) { $0.add(Int64(1)) }
                } catch let error as DatabaseError {
                    failure = error
                }
                try tx.executeBound(insert) { $0.add(Int64(2)) }
                let count = try #require(try tx.fetchRow("SELECT count(*) FROM u"))[0] as Int64
                return (failure?.extendedResultCode, failure?.message, count)
            }
            #expect(code == .SQLITE_CONSTRAINT_PRIMARYKEY)
            #expect(message?.contains("UNIQUE") == true)
            #expect(count == 2)
        }
    }

    /// Every row of a statement stepped in place (`fetchAllBound`): GRDB's values bound as GRDB
    /// binds them (the query builder's arguments), a sort key of any type read back as an index
    /// value (NULL as none), no rows as none, and the statement usable again with other values.
    @Test func allRowsAreReadInPlaceWithGRDBsValuesBound() async throws {
        try await withSQLite { storage in
            let (rows, none, again) = try await storage.writeSQLite { tx -> ([[String]], Int, [String]) in
                try tx.execute("CREATE TEMP TABLE s (k INTEGER PRIMARY KEY, v)")
                try tx.execute("INSERT INTO s VALUES (1, 7), (2, 2.5), (3, 'é'), (4, NULL), (5, x'01')")
                let statement = try tx.db.cachedStatement(sql: "SELECT k, v FROM s WHERE k >= ? AND k <= ? AND (? IS NULL) AND ? = x'0102' ORDER BY k")
                func page(_ low: Int64, _ high: Double) throws -> [[String]] {
                    let values: [(any DatabaseValueConvertible)?] = [low, high, nil, Data([1, 2])]
                    return try tx.db.fetchAllBound(statement, { for value in values { $0.add(value) } }) { row in
                        [String(row.int64(0)), row.indexValue(1).map { "\($0)" } ?? "none"]
                    }
                }
                return (try page(1, 5), try page(9, 10).count, try page(3, 3).map { $0.joined(separator: " ") })
            }
            expectEqual(rows, [["1", "\(IndexValue.integer(7))"], ["2", "\(IndexValue.number(2.5))"], ["3", "\(IndexValue.text("é"))"], ["4", "none"], ["5", "none"]])
            expectEqual(none, 0)
            expectEqual(again, ["3 \(IndexValue.text("é"))"])
        }
    }
}
