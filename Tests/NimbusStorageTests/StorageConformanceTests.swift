import Foundation
import NimbusSQLite
import NimbusStorage
import Testing

/// The behaviour every storage driver must show. Each test runs against every driver in
/// `StorageConformanceTests.drivers`; a new driver joins the list and must pass them all.
@Suite struct StorageConformanceTests {
    struct Driver: CustomStringConvertible, Sendable {
        let description: String
        let make: @Sendable (String) throws -> any StorageDriver
    }

    static let drivers: [Driver] = [
        Driver(description: "SQLite synchronous=FULL") { try SQLiteStorage(path: $0 + "/db.sqlite", synchronous: .full) },
        Driver(description: "SQLite synchronous=NORMAL") { try SQLiteStorage(path: $0 + "/db.sqlite", synchronous: .normal) },
    ]

    func withDriver(_ driver: Driver, _ body: (any StorageDriver) async throws -> Void) async throws {
        let directory = NSTemporaryDirectory() + "nimbus-storage-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let storage = try driver.make(directory)
        try await body(storage)
        try await storage.close()
    }

    static let key = DatabaseKey(container: "c", environment: .development, scope: .private, ownerID: 7)

    static func row(_ zone: Int64, _ name: String, sequence: Int64, deleted: Bool = false) -> RecordRow {
        let stamp = ChangeStamp(timestamp: 1, userRecordName: "_u", deviceID: "d")
        return RecordRow(
            zoneID: zone, recordName: name, recordType: "T", fields: Array("{}".utf8), parent: nil,
            changeSequence: sequence, created: stamp, modified: stamp, isDeleted: deleted)
    }

    @Test(arguments: drivers)
    func databaseIsMadeOnceWithItsDefaultZone(driver: Driver) async throws {
        try await withDriver(driver) { storage in
            let first = try await storage.write { try $0.ensureDatabase(Self.key) }
            let second = try await storage.write { try $0.ensureDatabase(Self.key) }
            #expect(first.id == second.id)
            let zones = try await storage.read { try $0.zones(databaseID: first.id) }
            #expect(zones.map(\.name) == ["_defaultZone"])
            #expect(try await storage.read { try $0.installationSecret() }.count == 32)
        }
    }

    @Test(arguments: drivers)
    func sequencesStrictlyIncreaseAndAreNeverReused(driver: Driver) async throws {
        try await withDriver(driver) { storage in
            let database = try await storage.write { try $0.ensureDatabase(Self.key) }
            let a = try await storage.write { try $0.nextSequence(databaseID: database.id) }
            struct Undo: Error {}
            _ = try? await storage.write { tx -> Int64 in
                _ = try tx.nextSequence(databaseID: database.id)
                throw Undo()
            }
            let b = try await storage.write { try $0.nextSequence(databaseID: database.id) }
            #expect(b == a + 1)  // the rolled-back writer left no trace
        }
    }

    @Test(arguments: drivers)
    func concurrentWritersSucceedOrFailEachOnTheirOwn(driver: Driver) async throws {
        try await withDriver(driver) { storage in
            let database = try await storage.write { try $0.ensureDatabase(Self.key) }
            let zone = try await storage.read { try $0.zone(databaseID: database.id, name: "_defaultZone")! }
            struct Refused: Error {}
            let results = await withTaskGroup(of: Bool.self) { group in
                for index in 0..<200 {
                    group.addTask {
                        do {
                            try await storage.write { tx in
                                let sequence = try tx.nextSequence(databaseID: database.id)
                                try tx.putRecord(Self.row(zone.id, "r\(index)", sequence: sequence))
                                if index % 3 == 0 { throw Refused() }
                            }
                            return true
                        } catch { return false }
                    }
                }
                var outcomes: [Bool] = []
                for await outcome in group { outcomes.append(outcome) }
                return outcomes
            }
            #expect(results.filter { $0 }.count == 133)
            let rows = try await storage.read { try $0.recordChanges(zoneID: zone.id, after: 0, recordTypes: nil, limit: 1000) }
            #expect(rows.count == 133)
            #expect(!rows.contains { Int($0.recordName.dropFirst())! % 3 == 0 })
            #expect(rows.map(\.changeSequence) == rows.map(\.changeSequence).sorted())
        }
    }

    @Test(arguments: drivers)
    func recreatedZoneGetsNewIdAndDeletedZoneLosesRecords(driver: Driver) async throws {
        try await withDriver(driver) { storage in
            let database = try await storage.write { try $0.ensureDatabase(Self.key) }
            let first = try await storage.write { tx in
                let zone = try tx.createZone(databaseID: database.id, name: "Z", sequence: tx.nextSequence(databaseID: database.id))
                try tx.putRecord(Self.row(zone.id, "r", sequence: tx.nextSequence(databaseID: database.id)))
                return zone
            }
            try await storage.write { tx in try tx.deleteZone(id: first.id, sequence: tx.nextSequence(databaseID: database.id)) }
            let tombstone = try await storage.read { try $0.zone(databaseID: database.id, name: "Z") }
            #expect(tombstone?.isDeleted == true)
            #expect(try await storage.read { try $0.record(zoneID: first.id, name: "r") } == nil)
            let second = try await storage.write { tx in
                try tx.createZone(databaseID: database.id, name: "Z", sequence: tx.nextSequence(databaseID: database.id))
            }
            #expect(second.id != first.id)
            let changes = try await storage.read { try $0.zoneChanges(databaseID: database.id, after: 0, limit: 10) }
            #expect(changes.map(\.name) == ["Z"])
            #expect(changes.first?.isDeleted == false)
        }
    }

    @Test(arguments: drivers)
    func recordStorageIDStaysWithZoneAndName(driver: Driver) async throws {
        try await withDriver(driver) { storage in
            let database = try await storage.write { try $0.ensureDatabase(Self.key) }
            let zone = try await storage.read { try $0.zone(databaseID: database.id, name: "_defaultZone")! }
            let ids = try await storage.write { tx -> [Int64] in
                let first = try tx.putRecord(Self.row(zone.id, "a", sequence: 1))
                let other = try tx.putRecord(Self.row(zone.id, "b", sequence: 2))
                let updated = try tx.putRecord(Self.row(zone.id, "a", sequence: 3))
                let tombstone = try tx.putRecord(Self.row(zone.id, "a", sequence: 4, deleted: true))
                let recreated = try tx.putRecord(Self.row(zone.id, "a", sequence: 5))
                return [first, other, updated, tombstone, recreated]
            }
            #expect(ids[0] != ids[1])
            #expect(Set([ids[0], ids[2], ids[3], ids[4]]).count == 1)
        }
    }

    @Test(arguments: drivers)
    func recordChangesFollowSequenceAndFilterByType(driver: Driver) async throws {
        try await withDriver(driver) { storage in
            let database = try await storage.write { try $0.ensureDatabase(Self.key) }
            let zone = try await storage.read { try $0.zone(databaseID: database.id, name: "_defaultZone")! }
            try await storage.write { tx in
                for name in ["a", "b", "c"] {
                    var row = Self.row(zone.id, name, sequence: try tx.nextSequence(databaseID: database.id))
                    if name == "b" { row.recordType = "Other" }
                    try tx.putRecord(row)
                }
                // Rewriting "a" moves it to the end; a tombstone keeps its place in the feed.
                try tx.putRecord(Self.row(zone.id, "a", sequence: try tx.nextSequence(databaseID: database.id), deleted: true))
            }
            let all = try await storage.read { try $0.recordChanges(zoneID: zone.id, after: 0, recordTypes: nil, limit: 10) }
            #expect(all.map(\.recordName) == ["b", "c", "a"])
            #expect(all.last?.isDeleted == true)
            let page = try await storage.read { try $0.recordChanges(zoneID: zone.id, after: all[0].changeSequence, recordTypes: nil, limit: 1) }
            #expect(page.map(\.recordName) == ["c"])
            let typed = try await storage.read { try $0.recordChanges(zoneID: zone.id, after: 0, recordTypes: ["Other"], limit: 10) }
            #expect(typed.map(\.recordName) == ["b"])
        }
    }

    @Test(arguments: drivers)
    func credentialsAndSchemaRowsRoundTrip(driver: Driver) async throws {
        try await withDriver(driver) { storage in
            try await storage.write { tx in
                try tx.insertContainer(ContainerRow(id: "c", createdAt: 1))
                try tx.insertAPIToken(APITokenRow(tokenHash: "h", container: "c", environment: .production, createdAt: 2, isRevoked: false))
                let user = try tx.insertUser(name: "u", passwordHash: "p", createdAt: 3)
                try tx.insertSession(SessionRow(tokenHash: "s", userID: user.id, container: "c", environment: .production, createdAt: 4, lastUsedAt: 4))
                try tx.addSchemaRecordType(container: "c", environment: .development, "T")
                try tx.addSchemaField(container: "c", environment: .development, SchemaFieldRow(recordType: "T", fieldName: "f", fieldType: "INT64"))
                try tx.addSchemaField(container: "c", environment: .development, SchemaFieldRow(recordType: "T", fieldName: "f", fieldType: "INT64"))
            }
            let (token, session, user, fields, productionTypes) = try await storage.read { tx in
                (
                    try tx.apiToken(hash: "h"), try tx.session(tokenHash: "s"), try tx.user(name: "u"),
                    try tx.schemaFields(container: "c", environment: .development),
                    try tx.schemaRecordTypes(container: "c", environment: .production)
                )
            }
            #expect(token?.environment == .production)
            #expect(session?.environment == .production)
            #expect(user?.passwordHash == "p")
            #expect(fields.count == 1)
            #expect(productionTypes.isEmpty)
            #expect(try await storage.write { try $0.revokeAPITokens(container: "c", environment: nil) } == 1)
            #expect(try await storage.write { try $0.deleteSessions(idleBefore: 5) } == 1)
        }
    }
}
