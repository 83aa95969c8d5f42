import Foundation
@testable import NimbusSQLite
import NimbusStorage
import Testing

/// The lasting request log inserts a flush's lines many to a statement
/// (`SQLiteRequestLog.linesPerInsert`): every line is stored once, whole, in the order given,
/// at the statement's size, one past it, and for a flush of thousands.
@Suite struct SQLiteRequestLogTests {
    private static func line(_ number: Int) -> StoredRequest {
        StoredRequest(
            at: 1_700_000_000_000 + Int64(number), node: "n", requestUUID: "uuid-\(number)", method: "POST", route: "/records/lookup",
            container: number.isMultiple(of: 2) ? "iCloud.even" : nil, environment: "development", database: "private",
            userRecordName: "_u\(number % 7)", userName: number.isMultiple(of: 3) ? "name\(number)" : nil, status: 200,
            serverErrorCode: number.isMultiple(of: 5) ? "NOT_FOUND" : nil,
            itemErrorCodes: number.isMultiple(of: 4) ? ["CONFLICT", "NOT_FOUND"] : [], milliseconds: Double(number) / 8)
    }

    @Test(arguments: [1, SQLiteRequestLog.linesPerInsert, SQLiteRequestLog.linesPerInsert + 1, 2_500])
    func everyLineIsStoredOnceInOrder(count: Int) async throws {
        try await withLog { log in
            let lines = (0..<count).map(Self.line)
            // Two flushes: the second's lines come after the first's.
            try await log.appendRequests(lines, minuteFigures: [])
            try await log.appendRequests([Self.line(count)], minuteFigures: [])

            var search = RequestSearch(limit: count + 10)
            let stored = try await log.requests(search)  // newest first
            #expect(stored.count == count + 1)
            #expect(stored.map(\.requestUUID) == (0...count).reversed().map { "uuid-\($0)" })
            #expect(zip(stored, stored.dropFirst()).allSatisfy { $0.id > $1.id })
            // Each line whole, its optional values and item errors included.
            for entry in stored {
                var expected = Self.line(Int(entry.requestUUID.dropFirst("uuid-".count))!)
                expected.id = entry.id
                #expect(entry == expected)
            }
            // Found by an item's error code as before.
            search.error = "CONFLICT"
            #expect(try await log.requests(search).count == (0...count).filter { $0.isMultiple(of: 4) }.count)
        }
    }

    /// A flush's statements after the first journal the pages an earlier one wrote: in a
    /// temporary file, that was a `pwrite` a page (about one a request under load).
    @Test func statementJournalsStayInMemory() async throws {
        try await withLog { log in
            let temporaryStorage = try await log.writerTemporaryStorage()
            #expect(temporaryStorage == 2)
        }
    }

    /// `body` with a request log in a directory of its own, removed after.
    private func withLog(_ body: (SQLiteRequestLog) async throws -> Void) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("request-log-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await body(try SQLiteRequestLog(path: directory + "/requests.sqlite"))
    }
}
