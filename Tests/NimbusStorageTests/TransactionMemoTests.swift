import Foundation
import NimbusSQLite
import NimbusStorage
import Testing

/// What an SQLite transaction remembers (records read ahead, the sequences it handed out) stays
/// true when a savepoint inside it is rolled back, and never outlives it.
@Suite struct TransactionMemoTests {
    struct Undo: Error {}

    static let key = DatabaseKey(container: "c", environment: .development, scope: .private, ownerID: 3)

    func withSQLite(_ body: (SQLiteStorage) async throws -> Void) async throws {
        let directory = NSTemporaryDirectory() + "nimbus-memo-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let storage = try SQLiteStorage(path: directory + "/db.sqlite", synchronous: .normal)
        try await body(storage)
        try await storage.close()
    }

    @Test func sequencesTakenInARolledBackSavepointAreNeverHandedOutTwice() async throws {
        try await withSQLite { storage in
            let zone = try await storage.write { tx in
                try tx.createZone(databaseID: try tx.ensureDatabase(Self.key).id, name: "Z")
            }
            let (first, rolledBack, last) = try await storage.write { tx -> (Int64, [Int64], Int64) in
                let first = try tx.nextRecordSequence(in: zone)
                var rolledBack: [Int64] = []
                _ = try? tx.savepoint {
                    rolledBack.append(try tx.nextRecordSequence(in: zone))
                    rolledBack.append(try tx.nextRecordSequence(in: zone))
                    // Read inside the savepoint, the zone carries its newest sequence.
                    #expect(try tx.zone(databaseID: zone.databaseID, name: "Z")?.recordSequence == rolledBack.last)
                    throw Undo()
                }
                // Rolled back with the writes it stamped: the zone is as the first sequence left it.
                #expect(try tx.zone(databaseID: zone.databaseID, name: "Z")?.recordSequence == first)
                // The stored sequence went back below what the memo handed out; the next one
                // still goes above both.
                let afterRollback = try tx.nextRecordSequence(in: zone)
                #expect(afterRollback > rolledBack.max()!)
                // Taken in a savepoint that is released: the zone carries it from then on.
                let inSavepoint = try tx.savepoint { try tx.nextRecordSequence(in: zone) }
                #expect(inSavepoint == afterRollback + 1)
                #expect(try tx.zone(databaseID: zone.databaseID, name: "Z")?.changeSequence == inSavepoint)
                return (first, rolledBack, inSavepoint)
            }
            #expect(rolledBack.count == 2 && rolledBack.allSatisfy { $0 > first })
            #expect(last > rolledBack.max()!)
            // The zone and the database carry the last one; the next transaction goes on from it.
            let stored = try await storage.read { try $0.zone(databaseID: zone.databaseID, name: "Z") }
            #expect(stored?.recordSequence == last)
            let next = try await storage.write { tx in try tx.nextRecordSequence(in: stored!) }
            #expect(next == last + 1)
            // A zone made in between takes a sequence of the same counter: still no repeat.
            let (made, after) = try await storage.write { tx in
                _ = try tx.nextRecordSequence(in: stored!)
                let made = try tx.createZone(databaseID: zone.databaseID, name: "Y")
                return (made.changeSequence, try tx.nextRecordSequence(in: stored!))
            }
            #expect(made > next && after > made)
        }
    }

    @Test func recordsReadAheadAreForgottenWhenWrittenAndRolledBackWithTheirWrite() async throws {
        try await withSQLite { storage in
            let zone = try await storage.write { tx in
                let zone = try tx.createZone(databaseID: try tx.ensureDatabase(Self.key).id, name: "Z")
                _ = try tx.putRecord(StorageConformanceTests.row(zone.id, "kept", sequence: try tx.nextRecordSequence(in: zone)))
                return zone
            }
            try await storage.write { tx in
                try tx.expect(records: ["kept", "new", "also"], inZone: "Z", of: Self.key)
                #expect(try tx.record(zoneID: zone.id, name: "kept")?.recordType == "T")
                #expect(try tx.record(zoneID: zone.id, name: "new") == nil)
                // Written, then undone: the store answers, and it has nothing.
                _ = try? tx.savepoint {
                    _ = try tx.putRecord(StorageConformanceTests.row(zone.id, "new", sequence: try tx.nextRecordSequence(in: zone)))
                    #expect(try tx.record(zoneID: zone.id, name: "new") != nil)
                    throw Undo()
                }
                #expect(try tx.record(zoneID: zone.id, name: "new") == nil)
                // Written for good: the new row, not the one read ahead.
                var changed = StorageConformanceTests.row(zone.id, "kept", sequence: try tx.nextRecordSequence(in: zone))
                changed.recordType = "U"
                _ = try tx.putRecord(changed)
                #expect(try tx.record(zoneID: zone.id, name: "kept")?.recordType == "U")
                // A zone deleted takes its records with it.
                try tx.deleteZone(id: zone.id)
                #expect(try tx.record(zoneID: zone.id, name: "also") == nil)
                #expect(try tx.record(zoneID: zone.id, name: "kept") == nil)
            }
        }
    }
}
