import Foundation
import NimbusPostgres
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

    /// The keys of every load a unit sent, in order.
    final class LoadLog: Sendable {
        let keys = Mutex<[Set<LoadKey>]>([])
    }

    static func withUnits(log: LoadLog? = nil, _ body: (TestServer, UnitOfWorkDriver) async throws -> Void) async throws {
        let holder = Holder()
        try await TestServer.with(configure: { configuration in
            // No polls: the pipeline's own reads would count as the requests'.
            configuration.service.notificationPollInterval = .seconds(3_600)
            let sqlite = SQLiteStorage.opener(synchronous: .normal)
            configuration.storage = StorageOpener(
                description: sqlite.description,
                open: { directory in
                    guard let embedded = try await sqlite.open(directory) as? UnitOfWorkDriver else { throw TestFailure("not SQLite") }
                    var onLoad: (@Sendable (LoadRequest) -> Void)?
                    if let log { onLoad = { request in log.keys.withLock { $0.append(request.keys) } } }
                    let driver = UnitOfWorkDriver(RoundTrips(embedded.base, onLoad: onLoad))
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
            let before = driver.readRoundTrips
            try await work()
            fewest = min(fewest, driver.readRoundTrips - before)
        }
        return fewest
    }

    static func writeRoundTrips(_ driver: UnitOfWorkDriver, _ work: () async throws -> Void) async throws -> Int {
        let before = driver.writeRoundTrips
        try await work()
        return driver.writeRoundTrips - before
    }

    @Test func requestsCostAFewRoundTripsWhateverTheirSize() async throws {
        try await Self.withUnits { server, driver in
            let trips = try await Self.countTrips(
                server, reads: { work in try await Self.readRoundTrips(driver, work) },
                writes: { work in try await Self.writeRoundTrips(driver, work) })
            print("unit-of-work round trips (coarse calls on SQLite): \(trips)")
        }
    }

    /// A write's first load brings the subscriptions version, which it reads to decide whether
    /// anyone listens; a read's loads never ask for it (on PostgreSQL the counters' branch cost
    /// each lookup's statement two more tables).
    @Test func onlyWritesLoadTheSubscriptionsVersion() async throws {
        let log = LoadLog()
        try await Self.withUnits(log: log) { server, _ in
            let alice = try await server.user("alice")
            try await expectEqual(alice.createZone("Z").status, 200)
            log.keys.withLock { $0 = [] }
            let saved = try await alice.modify(zone: "Z", [Op.create("r", ["n": Op.field(.int(1))])])
            expectEqual(saved.records.first?["serverErrorCode"], nil, "\(saved.text)")
            let writeLoads = log.keys.withLock { $0 }
            #expect(writeLoads.contains { $0.contains(.subscriptionsVersion) }, "\(writeLoads)")

            log.keys.withLock { $0 = [] }
            let found = try await alice.lookup(zone: "Z", ["r"])
            expectEqual(found.records.first?["recordName"]?.stringValue, "r", "\(found.text)")
            let readLoads = log.keys.withLock { $0 }
            #expect(!readLoads.isEmpty && !readLoads.contains { $0.contains(.subscriptionsVersion) }, "\(readLoads)")
        }
    }

    /// The same requests on PostgreSQL, counting every statement the driver sends (each one
    /// round trip), the request's authentication included when the credential cache misses.
    @Test(.enabled(if: PostgresTestCluster.url != nil, "needs the test cluster"))
    func requestsCostAFewStatementsOnPostgreSQL() async throws {
        let statements = Atomic<Int>(0)
        try await PostgresTestCluster.withDatabase { location in
            try await TestServer.with(configure: { configuration in
                configuration.service.notificationPollInterval = .seconds(3_600)
                // It counts statements, not time: on PostgreSQL the query budget is the
                // statement's elapsed time, and beside the suite's parallel tests a page took
                // over the default 250 ms (TestServer.embedded's PostgreSQL budget, the same).
                configuration.service.queryBudget = .seconds(10)
                configuration.storage = StorageOpener(
                    description: { _ in "PostgreSQL, counted" },
                    open: { _ in
                        let storage = try await PostgresStorage(location, deadline: PostgresTestCluster.deadline, maximumConnections: 8) { _ in
                            statements.add(1, ordering: .relaxed)
                        }
                        return RetryingStorage(UnitOfWorkDriver(PostgresCoarseStorage(storage)))
                    })
            }) { server in
                // The fewest of three runs: a credential cache miss or the pipeline's start-up
                // reads can only add to a run's count.
                @Sendable func fewest(_ work: () async throws -> Void) async throws -> Int {
                    var fewest = Int.max
                    for _ in 0..<3 {
                        let before = statements.load(ordering: .relaxed)
                        try await work()
                        fewest = min(fewest, statements.load(ordering: .relaxed) - before)
                    }
                    return fewest
                }
                let trips = try await Self.countTrips(server, reads: fewest, writes: fewest)
                print("PostgreSQL statements per request: \(trips)")
            }
        }
    }

    struct Trips: CustomStringConvertible {
        var batch = 0, updates = 0, lookup = 0, query = 0
        var description: String { "batch of 200 \(batch), 200 updates \(updates), lookup of 200 \(lookup), query page \(query)" }
    }

    /// Makes the requests and checks each stays within issue 35's budget; `reads` and `writes`
    /// count what a piece of work cost (they may run it more than once).
    static func countTrips(
        _ server: TestServer, reads: (() async throws -> Void) async throws -> Int,
        writes: (() async throws -> Void) async throws -> Int
    ) async throws -> Trips {
        let alice = try await server.user("alice")
        // The database, its zone, the type's schema and an id block exist from here on.
        let warm = try await alice.post(
            "private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Z"]]]]])
        expectEqual(warm.status, 200, "\(warm.text)")
        _ = try await alice.modify(zone: "Z", [Op.create("warm", type: "Item", ["n": Op.field(.int(0))])])

        var trips = Trips()
        var run = 0
        let names = (0..<200).map { "r\($0)" }
        trips.batch = try await writes {
            run += 1
            let batch = try await alice.modify(zone: "Z", names.map { Op.create($0 + (run == 1 ? "" : "-\(run)"), type: "Item", ["n": Op.field(.int(1))]) })
            #expect(batch.records.count == 200 && batch.records.allSatisfy { $0.errorCode == nil }, "\(batch.text)")
        }
        // One load (database, zone, records and schema by name: `ReadUnit.expect`), one
        // apply, and a block of ids when the one at hand runs out.
        #expect(trips.batch <= 3, "a 200-record atomic batch took \(trips.batch) round trips")

        trips.updates = try await writes {
            let updated = try await alice.modify(
                zone: "Z", names.map { Op.make("forceUpdate", Op.record($0, type: "Item", fields: ["n": Op.field(.int(2))])) })
            #expect(updated.records.allSatisfy { $0.errorCode == nil }, "\(updated.text)")
        }
        #expect(trips.updates <= 2, "200 updates took \(trips.updates) round trips")

        trips.lookup = try await reads {
            let found = try await alice.lookup(zone: "Z", names)
            #expect(found.records.count == 200 && found.records.allSatisfy { $0.errorCode == nil })
        }
        #expect(trips.lookup <= 2, "a 200-record lookup took \(trips.lookup) round trips")

        trips.query = try await reads {
            let query = QueryTests.query(
                filters: [QueryTests.filter("EQUALS", "n", .int(2))], sorts: [QueryTests.sort("n")],
                extra: ["zoneID": ["zoneName": "Z"], "resultsLimit": 20])
            let page = try await alice.post("private", "records/query", query)
            expectEqual(page.records.count, 20, "\(page.text)")
        }
        #expect(trips.query <= 2, "a query page took \(trips.query) round trips")
        return trips
    }
}
