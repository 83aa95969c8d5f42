import Foundation
import GRDB
import NimbusSQLite
@testable import NimbusStorage
import NimbusTestSupport
import Testing

/// A point read on SQLite begins its snapshot with its first statement (`LateSnapshot`): a
/// lookup's zone and records are one statement, run alone with no transaction around it, and a
/// unit that reads more after it runs again inside a transaction, so everything it answers
/// comes from one snapshot.
@Suite struct LateSnapshotTests {
    private static let key = DatabaseKey(container: "c", environment: .development, scope: .private, ownerID: 7)

    /// A store whose statements' text is kept, with zone "Z" holding the records "a" and "b"
    /// and the tombstone "gone"; the database's row as the service keeps it.
    private func withStore(
        _ body: (UnitOfWorkDriver, DatabaseRow, ZoneRow, StatementLog, String) async throws -> Void
    ) async throws {
        try await StatementLog.withStore { driver, log, path in
            let (database, zone) = try await driver.write { tx in
                let database = try tx.ensureDatabase(Self.key)
                let zone = try tx.createZone(databaseID: database.id, name: "Z")
                for name in ["a", "b"] {
                    try tx.putRecord(StorageConformanceTests.row(zone.id, name, sequence: try tx.nextRecordSequence(in: zone)))
                }
                try tx.putRecord(StorageConformanceTests.row(zone.id, "gone", sequence: try tx.nextRecordSequence(in: zone), deleted: true))
                return (database, zone)
            }
            _ = Self.statements(log)
            try await body(driver, database, zone, log, path)
        }
    }

    /// The statements since the last call, less GRDB's check as it opens a reader connection.
    private static func statements(_ log: StatementLog) -> [String] {
        log.take().filter { $0 != "SELECT * FROM sqlite_master LIMIT 1" }
    }

    /// What a lookup answers: each name's record type, "deleted", or "absent"; "no zone" alone
    /// when the zone does not exist.
    private static func lookUp(_ names: [String], inZone zoneName: String, of database: DatabaseRow, on driver: UnitOfWorkDriver)
        async throws -> [String]
    {
        try await driver.read { tx in
            try tx.expect(records: names, inZone: zoneName, of: database)
            guard let zone = try tx.zone(databaseID: database.id, name: zoneName) else { return ["no zone"] }
            return try names.map { name in
                guard let row = try tx.record(zoneID: zone.id, name: name) else { return "absent" }
                return row.isDeleted ? "deleted" : row.recordType
            }
        }
    }

    @Test func aLookupIsOneStatementWithNoTransaction() async throws {
        try await withStore { driver, database, _, log, _ in
            let found = try await Self.lookUp(["a"], inZone: "Z", of: database, on: driver)
            #expect(found == [StorageConformanceTests.row(0, "a", sequence: 0).recordType])
            let statements = Self.statements(log)
            #expect(statements.count == 1, "\(statements)")
            #expect(statements.first?.contains("FROM zones z LEFT JOIN records r") == true)

            // Several names, absent ones and tombstones too: still one.
            let several = try await Self.lookUp(["b", "nope", "gone", "a", "b"], inZone: "Z", of: database, on: driver)
            #expect(several.count == 5)
            #expect(several[1] == "absent")
            #expect(several[2] == "deleted")
            #expect(several[0] == several[4] && several[0] == several[3])
            #expect(Self.statements(log).count == 1)

            // No such zone: the same statement says so.
            let nowhere = try await Self.lookUp(["a"], inZone: "Nowhere", of: database, on: driver)
            #expect(nowhere == ["no zone"])
            #expect(Self.statements(log).count == 1)
        }
    }

    @Test func otherReadsStillBeginTheirTransactionFirst() async throws {
        try await withStore { driver, database, zone, log, _ in
            let names = try await driver.read { tx in
                try ["a", "b"].map { try tx.record(zoneID: zone.id, name: $0)?.recordName }
            }
            #expect(names == ["a", "b"])
            let statements = Self.statements(log)
            #expect(statements.first == "BEGIN DEFERRED TRANSACTION", "\(statements)")
            #expect(statements.last == "COMMIT TRANSACTION")
            #expect(statements.count == 4)
            _ = database
        }
    }

    @Test func aLookupThatReadsMoreRunsAgainInOneSnapshot() async throws {
        try await withStore { driver, database, zone, log, path in
            // A second connection of its own changes "b" between the lone statement and the
            // read after it, on the first run only.
            let other = try DatabaseQueue(path: path)
            let runs = LockedCounter()
            let seen = try await driver.read { tx in
                runs.increment()
                try tx.expect(records: ["a"], inZone: "Z", of: database)
                let a = try tx.record(zoneID: zone.id, name: "a")?.recordName
                if runs.value == 1 {
                    try other.write { db in
                        try db.execute(sql: "UPDATE records SET record_type = 'Changed' WHERE zone_id = ? AND record_name = 'a'", arguments: [zone.id])
                    }
                }
                // Read after the lookup's statement, then "a" again from the same unit's rows.
                let b = try tx.record(zoneID: zone.id, name: "b")?.recordName
                let aType = try tx.record(zoneID: zone.id, name: "a")?.recordType
                return [a, b, aType]
            }
            #expect(runs.value == 2)
            // The answer is the second run's, all of it from one snapshot: "a" as changed.
            #expect(seen == ["a", "b", "Changed"])
            let statements = Self.statements(log).filter { !$0.hasPrefix("UPDATE") }
            #expect(statements.count == 5, "\(statements)")
            #expect(statements.first?.contains("FROM zones z LEFT JOIN records r") == true)
            #expect(statements[1] == "BEGIN DEFERRED TRANSACTION")
            #expect(statements.last == "COMMIT TRANSACTION")
            try other.close()
        }
    }

    @Test func aRefusalCaughtInsideTheUnitStillRunsItAgain() async throws {
        try await withStore { driver, database, zone, _, _ in
            let runs = LockedCounter()
            let seen = try await driver.read { tx in
                runs.increment()
                try tx.expect(records: ["a"], inZone: "Z", of: database)
                // A unit that takes a failed read for an absent row.
                let b = (try? tx.record(zoneID: zone.id, name: "b")) ?? nil
                return b?.recordName
            }
            #expect(runs.value == 2)
            #expect(seen == "b")
        }
    }

    @Test func errorsOfTheUnitPassThrough() async throws {
        struct Refused: Error {}
        try await withStore { driver, database, _, log, _ in
            let runs = LockedCounter()
            await #expect(throws: Refused.self) {
                try await driver.read { tx -> Int in
                    runs.increment()
                    try tx.expect(records: ["a"], inZone: "Z", of: database)
                    throw Refused()
                }
            }
            #expect(runs.value == 1)
            // The reader connection is usable again: not left inside a transaction.
            let again = try await Self.lookUp(["a"], inZone: "Z", of: database, on: driver)
            #expect(again.count == 1)
            _ = Self.statements(log)
        }
    }
}
