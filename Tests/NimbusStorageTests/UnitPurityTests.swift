import Foundation
import NimbusSQLite
import NimbusStorage
import NimbusTestSupport
import Testing

/// A unit of work's decision takes what varies as input (the time, new names, random values):
/// over a network it runs again after each load, so run again over the same rows it must decide
/// the same writes. `UnitOfWorkDriver(checksPurity:)`, on in the PostgreSQL pass over the whole
/// server suite (and with `NIMBUS_TEST_STORAGE=units`), runs every write's unit once more and fails one that decides differently. Here
/// the check is tried on its own: it catches a random name and a time read inside the closure,
/// and lets the same writes pass when they take those as input.
@Suite struct UnitPurityTests {
    static let key = DatabaseKey(container: "c", environment: .development, scope: .private, ownerID: 7)

    static func withDriver(_ body: (UnitOfWorkDriver) async throws -> Void) async throws {
        try await StorageConformanceTests.directory { directory in
            let driver = UnitOfWorkDriver(
                RoundTrips(try SQLiteStorage(path: directory + "/db.sqlite", synchronous: .normal)), checksPurity: true)
            try await withClosing(driver, closedBy: { try await $0.close() }, body)
        }
    }

    /// Makes a zone named by `name`, called inside the unit's closure; the zone's name, or the
    /// error the write failed with.
    static func makeZone(_ driver: UnitOfWorkDriver, named name: @escaping @Sendable () -> String) async -> Result<String, any Error> {
        do {
            let zone = try await driver.write { unit in
                try unit.createZone(databaseID: try unit.ensureDatabase(key).id, name: name())
            }
            return .success(zone.name)
        } catch {
            return .failure(error)
        }
    }

    /// The zones the database holds now.
    static func zoneNames(_ driver: UnitOfWorkDriver) async throws -> [String] {
        try await driver.read(.point) { unit in
            guard let database = try unit.database(key) else { return [] }
            return try unit.zones(databaseID: database.id).map(\.name)
        }
    }

    @Test func namesAndTimesTakenAsInputPass() async throws {
        try await Self.withDriver { driver async throws in
            let name = "zone-\(UUID().uuidString)-\(Int64(Date().timeIntervalSince1970 * 1000))"
            let made = await Self.makeZone(driver) { name }
            try expectEqual(made.get(), name)
            #expect(try await Self.zoneNames(driver).contains(name))
        }
    }

    @Test(arguments: ["random", "clock"])
    func aValueDrawnInsideTheClosureFailsTheWriteAndWritesNothing(source: String) async throws {
        try await Self.withDriver { driver async throws in
            let made = await Self.makeZone(driver) {
                source == "random" ? "zone-\(UUID().uuidString)" : "zone-\(Int64(Date().timeIntervalSince1970 * 1000))"
            }
            guard case .failure(let error) = made else {
                Issue.record("a closure that reads the \(source) was not caught")
                return
            }
            #expect("\(error)".contains("reads the clock or a random source"), "\(error)")
            #expect(try await Self.zoneNames(driver).allSatisfy { !$0.hasPrefix("zone-") })
        }
    }
}
