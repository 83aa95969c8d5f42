import Foundation
import GRDB
import NimbusSQLite
@testable import NimbusStorage
import NimbusTestSupport
import Testing

/// The SQLite writer hands out new rows' ids from memory across its transactions
/// (`WriterIDs`): the tables are asked once, and again only after another connection commits.
@Suite struct WriterIDsTests {
    private static let key = DatabaseKey(container: "c", environment: .development, scope: .private, ownerID: 7)

    private static func create(_ name: String, in zone: ZoneRow, on driver: UnitOfWorkDriver) async throws {
        try await driver.write { tx in
            try tx.putRecord(StorageConformanceTests.row(zone.id, name, sequence: try tx.nextRecordSequence(in: zone)), isNew: true)
        }
    }

    @Test func idsComeFromMemoryUntilAnotherConnectionCommits() async throws {
        try await StatementLog.withStore { driver, log, path in
            let zone = try await driver.write { tx in
                try tx.createZone(databaseID: try tx.ensureDatabase(Self.key).id, name: "Z")
            }
            func askedTheTables() -> Bool { log.take().contains { $0.contains("max(rowid)") } }
            _ = log.take()
            try await Self.create("a", in: zone, on: driver)
            #expect(askedTheTables(), "the first record's id comes from the tables")
            try await Self.create("b", in: zone, on: driver)
            try await Self.create("c", in: zone, on: driver)
            #expect(!askedTheTables(), "later ids come from memory")

            // Another connection (another process, say) adds a record far past them.
            let other = try DatabaseQueue(path: path)
            let ids: ([String]) throws -> [Int64?] = { names in
                try other.read { db in try names.map { try Int64.fetchOne(db, sql: "SELECT rowid FROM records WHERE record_name = ?", arguments: [$0]) } }
            }
            let before = try ids(["a", "b", "c"])
            #expect(before == [before[0], before[0]! + 1, before[0]! + 2])
            try await other.write { db in
                try db.execute(
                    sql: """
                        INSERT INTO records (rowid, zone_id, record_name, record_type, fields, change_sequence, created_at, created_by,
                            created_device, modified_at, modified_by, modified_device, deleted)
                        SELECT 1000, zone_id, 'elsewhere', record_type, fields, change_sequence, created_at, created_by, created_device,
                            modified_at, modified_by, modified_device, deleted FROM records WHERE record_name = 'a'
                        """)
            }
            try await Self.create("d", in: zone, on: driver)
            #expect(askedTheTables(), "after another connection's commit the tables are asked again")
            #expect(try ids(["d"]) == [1001])
            try await Self.create("e", in: zone, on: driver)
            #expect(!askedTheTables())
            #expect(try ids(["e"]) == [1002])
            try other.close()
        }
    }

    @Test func idsAreUsedOnceAndWhatAWriteDidNotUseIsFree() async throws {
        struct Refused: Error {}
        try await StatementLog.withStore { driver, _, _ in
            let zone = try await driver.write { tx in
                try tx.createZone(databaseID: try tx.ensureDatabase(Self.key).id, name: "Z")
            }
            try await Self.create("a", in: zone, on: driver)
            await #expect(throws: Refused.self) {
                try await driver.write { tx in
                    try tx.putRecord(StorageConformanceTests.row(zone.id, "undone", sequence: try tx.nextRecordSequence(in: zone)), isNew: true)
                    throw Refused()
                }
            }
            try await Self.create("b", in: zone, on: driver)
            let stored = try await driver.read { tx in
                try ["a", "undone", "b"].map { try tx.storedRecord(RecordKey(zoneID: zone.id, name: $0))?.id }
            }
            #expect(stored[1] == nil)
            // The write that failed inserted nothing; its id is free again.
            #expect(stored[2]! == stored[0]! + 1)
            // Ids a unit took in its block and did not use are free for the next write.
            try await Self.create("c", in: zone, on: driver)
            let c = try await driver.read { tx in try tx.storedRecord(RecordKey(zoneID: zone.id, name: "c"))?.id }
            #expect(c == stored[2]! + 1)
        }
    }
}
