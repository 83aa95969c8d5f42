import Foundation
import NimbusPostgres
import NimbusStorage
import NimbusTestSupport
import Testing

/// A zone's turn on PostgreSQL (`ZoneTurns`, issue 35: "a zone that is busy queues its writers
/// rather than failing and replaying them"): a node that collided on a zone decides its next
/// groups holding the zone's row, so another node's apply on that zone waits for it and then
/// fails its check, instead of outrunning the decision. Two nodes here are two
/// `PostgresStorage`s on one database, as two `nimbus serve` would be.
@Suite(.enabled(if: PostgresTestCluster.url != nil)) struct ZoneTurnTests {
    typealias Gate = ZonePipelineTests.Gate

    /// Two nodes on one fresh database, with zones "A" and "B" made.
    static func twoNodes(
        _ body: (_ a: PostgresCoarseStorage, _ b: PostgresCoarseStorage, _ zone: ZoneRow, _ location: PostgresLocation) async throws
            -> Void
    ) async throws {
        try await PostgresTestCluster.withDatabase { location in
            let a = PostgresCoarseStorage(try await PostgresStorage(location, deadline: PostgresTestCluster.deadline, maximumConnections: 8))
            let b = PostgresCoarseStorage(try await PostgresStorage(location, deadline: PostgresTestCluster.deadline, maximumConnections: 8))
            do {
                let (_, zone, _) = try await CoarseApplyTests.setUp(a)
                try await body(a, b, zone, location)
            } catch {
                try? await a.close()
                try? await b.close()
                throw error
            }
            try await a.close()
            try await b.close()
        }
    }

    static let order = ZoneOrder(database: CoarseApplyTests.key, zoneName: "A")

    /// Node B decided from the zone before A's turn began; its apply comes while A holds the
    /// turn. It must wait (PostgreSQL shows its backend waiting for a lock) and then fail its
    /// check, since A's write moved the zone on. Without the turn's lock B's apply would commit
    /// at once and A's would be the one to fail. No clock decides the outcome.
    @Test func anotherNodesApplyWaitsForTheTurnThenFailsItsCheck() async throws {
        try await Self.twoNodes { a, b, zone, location in
            let (databaseB, zonesB) = try await CoarseApplyTests.load(b, [zone])
            let ids = try await a.reserveIDs(.record, count: 2)
            let inTurn = Gate(), bFinished = Gate()
            let turn = Task {
                try await a.withZoneTurn(Self.order) {
                    let (database, zones) = try await CoarseApplyTests.load(a, [zone])
                    inTurn.open()
                    // B's apply is sent now: A applies once B's backend waits for the zone's lock.
                    let deadline = ContinuousClock.now + .seconds(30)
                    var bWaits = false
                    while !bWaits, !bFinished.isOpen, ContinuousClock.now < deadline {
                        try await Task.sleep(for: .milliseconds(20))
                        let waiting = try await PostgresTestCluster.rows(
                            "SELECT count(*)::text FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
                            on: location)
                        bWaits = waiting.first?.first.flatMap { $0 }.flatMap { Int($0) }.map { $0 > 0 } ?? false
                    }
                    try await a.apply(CoarseApplyTests.save("a", in: zones[0], database: database, id: ids.lowerBound))
                    return bWaits
                }
            }
            #expect(await inTurn.wait(upTo: .seconds(20)))
            let outcome: Result<Void, any Error>
            do {
                try await b.apply(CoarseApplyTests.save("b", in: zonesB[0], database: databaseB, id: ids.upperBound))
                outcome = .success(())
            } catch {
                outcome = .failure(error)
            }
            bFinished.open()
            #expect(try await turn.value, "B's apply never waited for A's turn")
            guard case .failure(let error) = outcome, case StorageError.serializationFailure = error else {
                Issue.record("B's apply after A's turn: \(outcome), not a serialization failure")
                return
            }
            let rows = try await a.load(LoadRequest(keys: [.record(zoneID: zone.id, name: "a"), .record(zoneID: zone.id, name: "b")]))
            #expect(rows.records[RecordKey(zoneID: zone.id, name: "a")] != nil && rows.records[RecordKey(zoneID: zone.id, name: "a")]! != nil)
            expectEqual(rows.records[RecordKey(zoneID: zone.id, name: "b")], .some(nil))
        }
    }

    struct Refused: Error {}

    /// A turn whose body fails leaves nothing it applied, and gives the connection back usable:
    /// the next turn on the same node (a pool of one would hand out the same connection) works.
    @Test func aTurnThatFailsLeavesNothingAndItsConnectionUsable() async throws {
        try await Self.twoNodes { a, _, zone, _ in
            let id = try await a.reserveIDs(.record, count: 1).lowerBound
            await #expect(throws: Refused.self) {
                try await a.withZoneTurn(Self.order) {
                    let (database, zones) = try await CoarseApplyTests.load(a, [zone])
                    try await a.apply(CoarseApplyTests.save("gone", in: zones[0], database: database, id: id))
                    throw Refused()
                }
            }
            let (_, zones) = try await CoarseApplyTests.load(a, [zone])
            expectEqual(zones[0].recordSequence, zone.recordSequence)
            let rows = try await a.load(LoadRequest(keys: [.record(zoneID: zone.id, name: "gone")]))
            expectEqual(rows.records[RecordKey(zoneID: zone.id, name: "gone")], .some(nil))
            // A zone that does not exist holds nothing: the body runs as it would without a turn.
            let value = try await a.withZoneTurn(ZoneOrder(database: CoarseApplyTests.key, zoneName: "missing")) { 42 }
            expectEqual(value, 42)
        }
    }

    /// Writers on two nodes flooding one zone, with no retries above the driver (no
    /// `RetryingStorage`): every write is acknowledged, none is lost or repeated, and the zone's
    /// record sequences are one each. Without turns, a group that collided three more times
    /// failed: about one write in a hundred did (docs/benchmarks.md, the two-node zone flood).
    /// A write into another zone of the same database does not wait for A's, applied but not
    /// yet committed in A's turn (issue 35: writes in different zones do not wait for one
    /// another beyond what their rows require). The database's row was every write's until
    /// PostgresDatabaseFeed: B's apply then waited for A's commit, here the end of the turn.
    /// Both zones are in the feed after, and the database's usage counts both writes' bytes.
    @Test func anotherZonesWriteDoesNotWaitForAnOpenApplyInTheSameDatabase() async throws {
        try await Self.twoNodes { a, b, zone, _ in
            let (_, zones) = try await CoarseApplyTests.load(b, [zone])
            let (databaseB, zonesB) = try await CoarseApplyTests.load(b, [try #require(try await Self.zoneB(b))])
            let ids = try await a.reserveIDs(.record, count: 2)
            let aApplied = Gate(), bApplied = Gate()
            let turn = Task {
                try await a.withZoneTurn(Self.order) {
                    let (database, zonesA) = try await CoarseApplyTests.load(a, [zones[0]])
                    try await a.apply(CoarseApplyTests.save("a", in: zonesA[0], database: database, bytes: 100, id: ids.lowerBound))
                    aApplied.open()
                    // Held open (uncommitted) until B's apply has returned, or for 10 s.
                    return await bApplied.wait(upTo: .seconds(10))
                }
            }
            #expect(await aApplied.wait(upTo: .seconds(20)))
            try await b.apply(CoarseApplyTests.save("b", in: zonesB[0], database: databaseB, bytes: 50, id: ids.upperBound))
            bApplied.open()
            #expect(try await turn.value, "B's apply waited for A's turn to commit")

            let (database, _) = try await CoarseApplyTests.load(a, [])
            expectEqual(database.usedBytes, 150)
            expectEqual(try await CoarseApplyTests.feed(a, after: 0).map(\.name).sorted(), ["A", "B"])
        }
    }

    static func zoneB(_ engine: any CoarseStorage) async throws -> ZoneRow? {
        let (database, _) = try await CoarseApplyTests.load(engine, [])
        let rows = try await engine.load(LoadRequest(keys: [.zone(databaseID: database.id, name: "B")]))
        return rows.zones[ZoneKey(databaseID: database.id, name: "B")] ?? nil
    }

    @Test func writersOfOneZoneOnTwoNodesAllCommit() async throws {
        try await Self.twoNodes { a, b, zone, _ in
            let nodes = [UnitOfWorkDriver(a), UnitOfWorkDriver(b)]
            let writesPerNode = 600, writersPerNode = 32
            let failures = try await withThrowingTaskGroup(of: [String].self) { group in
                for (node, driver) in nodes.enumerated() {
                    for writer in 0..<writersPerNode {
                        group.addTask {
                            var failures: [String] = []
                            for index in stride(from: writer, to: writesPerNode, by: writersPerNode) {
                                do {
                                    _ = try await driver.write(inZone: Self.order) { tx in
                                        try tx.putRecord(
                                            StorageConformanceTests.row(zone.id, "n\(node)-\(index)", sequence: try tx.nextRecordSequence(in: zone)),
                                            isNew: true)
                                    }
                                } catch {
                                    failures.append("\(error)")
                                }
                            }
                            return failures
                        }
                    }
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            let collisions = nodes.map(\.writeCollisions), turns = nodes.map(\.zoneTurns)
            expectEqual(failures.count, 0, "\(failures.count) writes failed (collisions \(collisions), turns \(turns)): \(failures.prefix(3))")
            let names = (0..<2).flatMap { node in (0..<writesPerNode).map { "n\(node)-\($0)" } }
            let rows = try await a.load(LoadRequest(keys: Set(names.map { .record(zoneID: zone.id, name: $0) }), schemaWithZones: false))
            let saved = rows.records.values.compactMap { $0 }
            expectEqual(saved.count, names.count)
            expectEqual(Set(saved.map(\.row.changeSequence)).count, saved.count, "two writes took one record sequence")
            // Collisions happen (the nodes write at once); each node that collided went on in turns.
            for node in 0..<2 where collisions[node] > 0 { #expect(turns[node] > 0) }
        }
    }
}

/// A turn that outlasts the driver's deadline: its caller hears `unavailable` at the deadline,
/// and the turn, still running, rolls back instead of committing writes reported as failed.
@Suite(.enabled(if: PostgresTestCluster.url != nil)) struct ZoneTurnDeadlineTests {
    @Test func aTurnPastItsDeadlineRollsBack() async throws {
        try await PostgresTestCluster.withDatabase { location in
            // The store is made and set up under the tests' long deadline (beside the whole suite
            // a migration can take seconds); only the node that takes the turn has a short one.
            let setUp = PostgresCoarseStorage(
                try await PostgresStorage(location, deadline: PostgresTestCluster.deadline, maximumConnections: 2))
            let (_, zone, _) = try await CoarseApplyTests.setUp(setUp)
            let id = try await setUp.reserveIDs(.record, count: 1).lowerBound
            try await setUp.close()
            let node = PostgresCoarseStorage(try await PostgresStorage(location, deadline: .seconds(2), maximumConnections: 4))
            do {
                let finished = ZonePipelineTests.Gate()
                await #expect(throws: StorageError.self) {
                    try await node.withZoneTurn(ZoneTurnTests.order) {
                        defer { finished.open() }
                        let (database, zones) = try await CoarseApplyTests.load(node, [zone])
                        try await node.apply(CoarseApplyTests.save("late", in: zones[0], database: database, id: id))
                        try await Task.sleep(for: .milliseconds(3_000))
                    }
                }
                #expect(await finished.wait(upTo: .seconds(30)))
                // The turn's transaction has ended (committed or rolled back) once no backend of
                // this database is inside one.
                let deadline = ContinuousClock.now + .seconds(30)
                while ContinuousClock.now < deadline {
                    let open = try await PostgresTestCluster.rows(
                        "SELECT count(*)::text FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
                        on: location)
                    if open.first?.first == .some("0") { break }
                    try await Task.sleep(for: .milliseconds(20))
                }
                try await Task.sleep(for: .milliseconds(200))
                let rows = try await node.load(LoadRequest(keys: [.record(zoneID: zone.id, name: "late")]))
                expectEqual(rows.records[RecordKey(zoneID: zone.id, name: "late")], .some(nil), "a turn past its deadline committed")
            } catch {
                try? await node.close()
                throw error
            }
            try await node.close()
        }
    }
}
