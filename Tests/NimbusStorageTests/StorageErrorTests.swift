import Foundation
import GRDB
import NimbusSQLite
import NimbusStorage
import NimbusTestSupport
import Testing

/// Storage failures arrive as `StorageError`, whichever engine failed, and collisions are run again.
@Suite struct StorageErrorTests {
    func withSQLite(busyTimeout: TimeInterval = 10, _ body: (UnitOfWorkDriver, String) async throws -> Void) async throws {
        let directory = NSTemporaryDirectory() + "nimbus-errors-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let storage = UnitOfWorkDriver(try SQLiteStorage(path: directory + "/db.sqlite", synchronous: .normal, busyTimeout: busyTimeout))
        try await body(storage, directory + "/db.sqlite")
        try await storage.close()
    }

    static let key = DatabaseKey(container: "c", environment: .development, scope: .private, ownerID: 7)

    @Test func anotherProcessHoldingTheWriteLockPastTheTimeoutIsBusy() async throws {
        try await withSQLite(busyTimeout: 0.2) { storage, path in
            // Another connection, as the CLI beside a server would be, takes the write lock and keeps it.
            var configuration = Configuration()
            configuration.allowsUnsafeTransactions = true
            let other = try DatabaseQueue(path: path, configuration: configuration)
            try await other.writeWithoutTransaction { try $0.execute(sql: "BEGIN IMMEDIATE") }
            await #expect {
                _ = try await storage.write { try $0.ensureDatabase(Self.key) }
            } throws: { error in
                guard let error = error as? StorageError, case .busy = error else { return false }
                return error.retryAfterSeconds == 1
            }
            try await other.writeWithoutTransaction { try $0.execute(sql: "COMMIT") }
            try other.close()
            // The lock released, the same write succeeds: the failed one left nothing behind.
            let database = try await storage.write { try $0.ensureDatabase(Self.key) }
            try await expectEqual(storage.read { try $0.zones(databaseID: database.id) }.map(\.name), ["_defaultZone"])
        }
    }

    @Test func serializationFailuresAreRunAgainThenGiveUpAsBusy() async throws {
        try await withSQLite { sqlite, _ in
            let faulty = FaultyStorage(sqlite)
            let storage = RetryingStorage(faulty, attempts: 5)
            let collision = StorageError.serializationFailure("test collision")
            // Four collisions and then a clean run: the fifth attempt commits, once.
            faulty.failWrites(Array(repeating: collision, count: 4))
            _ = try await storage.write { try $0.ensureDatabase(Self.key) }
            expectEqual(faulty.writesRunCount, 1)
            // Five collisions: no attempt left; the caller is told to come back.
            faulty.failWrites(Array(repeating: collision, count: 5))
            await #expect {
                _ = try await storage.write { try $0.ensureDatabase(Self.key) }
            } throws: { error in
                guard let error = error as? StorageError, case .busy = error else { return false }
                return true
            }
            expectEqual(faulty.writesRunCount, 1)
            // Other failures are not retried: one fault, one failed call, and the next call runs.
            faulty.failWrites([.unavailable("gone")])
            await #expect(throws: StorageError.self) { _ = try await storage.write { try $0.ensureDatabase(Self.key) } }
            expectEqual(faulty.writesRunCount, 1)
            _ = try await storage.write { try $0.ensureDatabase(Self.key) }
            expectEqual(faulty.writesRunCount, 2)
        }
    }
}
