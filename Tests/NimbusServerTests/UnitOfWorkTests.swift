import Foundation
import NimbusServer
import NimbusSQLite
import NimbusStorage
import NimbusTestSupport
import NimbusWire
import Synchronization
import Testing

/// Requests through `UnitOfWorkDriver` (how the PostgreSQL driver serves NimbusCore) cost a few
/// round trips whatever their size: issue 15's budget is a 200-record atomic batch in at most
/// 10, a lookup or a query page in 1–2. Counted here on SQLite behind the same coarse calls.
@Suite struct UnitOfWorkTests {
    final class Holder: Sendable {
        let driver = Mutex<UnitOfWorkDriver?>(nil)
    }

    static func withUnits(_ body: (TestServer, UnitOfWorkDriver) async throws -> Void) async throws {
        let holder = Holder()
        try await TestServer.with(configure: { configuration in
            // No polls: the pipeline's own reads would count as the requests'.
            configuration.service.notificationPollInterval = .seconds(3_600)
            let sqlite = SQLiteStorage.opener(synchronous: .normal)
            configuration.storage = StorageOpener(
                description: sqlite.description,
                open: { directory in
                    guard let storage = try await sqlite.open(directory) as? SQLiteStorage else { throw TestFailure("not SQLite") }
                    let driver = UnitOfWorkDriver(SQLiteCoarseStorage(storage))
                    holder.driver.withLock { $0 = driver }
                    return driver
                })
        }) { server in
            try await body(server, try #require(holder.driver.withLock { $0 }))
        }
    }

    /// The fewest of three runs: the pipeline's start-up reads (once per server, whenever
    /// its task gets to run on a busy machine) can only add to a run's count.
    static func readRoundTrips(_ driver: UnitOfWorkDriver, _ work: () async throws -> Void) async throws -> Int {
        var fewest = Int.max
        for _ in 0..<3 {
            let before = driver.readRoundTrips.load(ordering: .relaxed)
            try await work()
            fewest = min(fewest, driver.readRoundTrips.load(ordering: .relaxed) - before)
        }
        return fewest
    }

    static func writeRoundTrips(_ driver: UnitOfWorkDriver, _ work: () async throws -> Void) async throws -> Int {
        let before = driver.writeRoundTrips.load(ordering: .relaxed)
        try await work()
        return driver.writeRoundTrips.load(ordering: .relaxed) - before
    }

    @Test func requestsCostAFewRoundTripsWhateverTheirSize() async throws {
        try await Self.withUnits { server, driver in
            let alice = try await server.user("alice")
            // The database, its zone, the type's schema and an id block exist from here on.
            let warm = try await alice.post(
                "private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Z"]]]]])
            #expect(warm.status == 200, "\(warm.text)")
            _ = try await alice.modify(zone: "Z", [Op.create("warm", type: "Item", ["n": Op.field(.int(0))])])

            let names = (0..<200).map { "r\($0)" }
            var batch: APIResponse?
            let batchTrips = try await Self.writeRoundTrips(driver) {
                batch = try await alice.modify(zone: "Z", names.map { Op.create($0, type: "Item", ["n": Op.field(.int(1))]) })
            }
            #expect(batch?.records.count == 200 && batch?.records.allSatisfy { $0.errorCode == nil } == true, "\(batch?.text ?? "")")
            #expect(batchTrips <= 10, "a 200-record atomic batch took \(batchTrips) round trips")

            let updateTrips = try await Self.writeRoundTrips(driver) {
                let updated = try await alice.modify(
                    zone: "Z", names.map { Op.make("forceUpdate", Op.record($0, type: "Item", fields: ["n": Op.field(.int(2))])) })
                #expect(updated.records.allSatisfy { $0.errorCode == nil }, "\(updated.text)")
            }
            #expect(updateTrips <= 10, "200 updates took \(updateTrips) round trips")

            let lookupTrips = try await Self.readRoundTrips(driver) {
                let found = try await alice.lookup(zone: "Z", names)
                #expect(found.records.count == 200 && found.records.allSatisfy { $0.errorCode == nil })
            }
            #expect(lookupTrips <= 2, "a 200-record lookup took \(lookupTrips) round trips")

            let queryTrips = try await Self.readRoundTrips(driver) {
                let query = QueryTests.query(
                    filters: [QueryTests.filter("EQUALS", "n", .int(2))], sorts: [QueryTests.sort("n")],
                    extra: ["zoneID": ["zoneName": "Z"], "resultsLimit": 20])
                let page = try await alice.post("private", "records/query", query)
                #expect(page.records.count == 20, "\(page.text)")
            }
            #expect(queryTrips <= 2, "a query page took \(queryTrips) round trips")
            print("unit-of-work round trips: batch of 200 \(batchTrips), 200 updates \(updateTrips), lookup of 200 \(lookupTrips), query page \(queryTrips)")
        }
    }
}
