import Foundation
import NimbusStorage
import NimbusTestSupport
import Synchronization
import Testing

@testable import NimbusPostgres

/// Loads by key that wait for a place go to PostgreSQL together (`PostgresKeyLoads`), and each
/// gets its own rows back; a unit keeps the rows it read first (`LoadedRows.merge`).
struct PostgresKeyLoadsTests {
    /// With one place, a load in flight holds it; the loads that arrive meanwhile wait, and go
    /// as one, with every key any of them asked for.
    @Test func loadsThatWaitGoTogether() async throws {
        let loads = PostgresKeyLoads(inFlight: 1)
        let sent = Mutex<[Set<LoadKey>]>([])
        let firstMayAnswer = AsyncStream<Void>.makeStream()
        let run: @Sendable (LoadRequest) async throws -> LoadedRows = { request in
            let first = sent.withLock { sent in
                sent.append(request.keys)
                return sent.count == 1
            }
            if first { for await _ in firstMayAnswer.stream { break } }
            var rows = LoadedRows()
            for case .record(let zoneID, let name) in request.keys {
                rows.records[RecordKey(zoneID: zoneID, name: name)] = .some(nil)
            }
            return rows
        }
        let first = Task { try await loads.load(LoadRequest(keys: [.record(zoneID: 1, name: "first")]), run) }
        while sent.withLock({ $0.count }) == 0 { await Task.yield() }
        let waiting = (0..<10).map { index in
            Task { try await loads.load(LoadRequest(keys: [.record(zoneID: 1, name: "r\(index)")]), run) }
        }
        while loads.waitingCount < 10 { try await Task.sleep(for: .milliseconds(1)) }
        expectEqual(sent.withLock { $0.count }, 1, "a load went while the only place was taken")
        firstMayAnswer.continuation.yield()

        #expect(try await first.value.records.keys.contains(RecordKey(zoneID: 1, name: "first")))
        for (index, task) in waiting.enumerated() {
            #expect(try await task.value.records.keys.contains(RecordKey(zoneID: 1, name: "r\(index)")))
        }
        let statements = sent.withLock { $0 }
        expectEqual(statements.count, 2, "the ten loads that waited were not sent as one")
        expectEqual(statements.last, Set((0..<10).map { LoadKey.record(zoneID: 1, name: "r\($0)") }))
        expectEqual(loads.inFlightCount, 0)
    }

    /// A load that fails fails every load it carried, and its place is given back.
    @Test func aFailedLoadFailsThoseItCarriedAndFreesItsPlace() async throws {
        struct Down: Error {}
        let loads = PostgresKeyLoads(inFlight: 1)
        let release = AsyncStream<Void>.makeStream()
        let calls = Atomic<Int>(0)
        let run: @Sendable (LoadRequest) async throws -> LoadedRows = { _ in
            if calls.add(1, ordering: .relaxed).newValue == 1 { for await _ in release.stream { break } }
            throw Down()
        }
        let first = Task { try await loads.load(LoadRequest(keys: [.zoneByID(1)]), run) }
        while calls.load(ordering: .relaxed) == 0 { await Task.yield() }
        let second = Task { try await loads.load(LoadRequest(keys: [.zoneByID(2)]), run) }
        while loads.waitingCount < 1 { try await Task.sleep(for: .milliseconds(1)) }
        release.continuation.yield()
        await #expect(throws: Down.self) { try await first.value }
        await #expect(throws: Down.self) { try await second.value }
        while loads.inFlightCount > 0 { try await Task.sleep(for: .milliseconds(1)) }
        let answered = try await loads.load(LoadRequest(keys: [.zoneByID(3)])) { _ in LoadedRows() }
        #expect(answered.zonesByID.isEmpty)
    }

    /// A load that finds the server unavailable fails the loads waiting behind it at once:
    /// sent, they would wait out a deadline of their own, and a request answers within one.
    @Test func loadsWaitingBehindAnUnavailableServerFailWithoutASecondTry() async throws {
        let loads = PostgresKeyLoads(inFlight: 1)
        let release = AsyncStream<Void>.makeStream()
        let calls = Atomic<Int>(0)
        let run: @Sendable (LoadRequest) async throws -> LoadedRows = { _ in
            if calls.add(1, ordering: .relaxed).newValue == 1 {
                for await _ in release.stream { break }
                throw StorageError.unavailable("PostgreSQL did not answer")
            }
            return LoadedRows()
        }
        let first = Task { try await loads.load(LoadRequest(keys: [.zoneByID(1)]), run) }
        while calls.load(ordering: .relaxed) == 0 { await Task.yield() }
        let waiting = (2..<6).map { id in Task { try await loads.load(LoadRequest(keys: [.zoneByID(Int64(id))]), run) } }
        while loads.waitingCount < 4 { try await Task.sleep(for: .milliseconds(1)) }
        release.continuation.yield()
        for task in [first] + waiting {
            await #expect(throws: StorageError.self) { try await task.value }
        }
        expectEqual(calls.load(ordering: .relaxed), 1, "loads behind an unavailable server were sent anyway")
        expectEqual(loads.inFlightCount, 0)
        // The server back, the next load goes.
        _ = try await loads.load(LoadRequest(keys: [.zoneByID(9)]), run)
        expectEqual(calls.load(ordering: .relaxed), 2)
    }

    /// A unit's later load may carry a row it read before, committed since: the unit keeps
    /// the row as it first read it, and takes the rows it had not.
    @Test func aUnitKeepsTheRowsItReadFirst() {
        let zone = ZoneRow(id: 1, databaseID: 2, name: "A", changeSequence: 1, recordSequence: 1, isDeleted: false)
        var newer = zone
        newer.recordSequence = 9
        var read = LoadedRows()
        read.zonesByID[1] = .some(zone)
        read.subscriptionsVersion = 3
        var later = LoadedRows()
        later.zonesByID[1] = .some(newer)
        later.zonesByID[5] = .some(nil)
        later.subscriptionsVersion = 4
        // Kinds this unit had read none of are taken whole; kinds the later load lacks stay.
        let record = StoredRecord(id: 7, row: StorageConformanceTests.row(1, "r", sequence: 2))
        later.records[RecordKey(zoneID: 1, name: "r")] = .some(record)
        later.records[RecordKey(zoneID: 1, name: "gone")] = .some(nil)
        read.zones[ZoneKey(databaseID: 2, name: "A")] = .some(zone)
        read.merge(later)
        expectEqual(read.zonesByID[1] ?? nil, zone)
        #expect(read.zonesByID.keys.contains(5))
        expectEqual(read.subscriptionsVersion, 3)
        expectEqual(read.records.count, 2)
        expectEqual((read.records[RecordKey(zoneID: 1, name: "r")] ?? nil)?.id, 7)
        #expect(read.records.keys.contains(RecordKey(zoneID: 1, name: "gone")))
        expectEqual(read.zones[ZoneKey(databaseID: 2, name: "A")] ?? nil, zone)
    }

    /// Against PostgreSQL: many lookups at once, through one place, each answered with its own
    /// record (or its absence), in fewer statements than lookups.
    @Test(.enabled(if: PostgresTestCluster.url != nil, "needs the test cluster"))
    func concurrentLookupsEachGetTheirOwnRecords() async throws {
        try await PostgresTestCluster.withDatabase { location in
            let statements = Atomic<Int>(0)
            let storage = try await PostgresStorage(
                location, deadline: PostgresTestCluster.deadline, maximumConnections: 4, keyLoadsInFlight: 1,
                statementObserver: { sql in if sql.hasPrefix("SELECT 'record'") { statements.add(1, ordering: .relaxed) } })
            let coarse = PostgresCoarseStorage(storage)
            do {
                let (_, zone, _) = try await CoarseApplyTests.setUp(coarse)
                let count = 40
                let ids = try await coarse.reserveIDs(.record, count: count)
                var changes = UnitOfWorkChanges()
                changes.writes = (0..<count).map { index in
                    .putRecord(
                        id: ids.lowerBound + Int64(index),
                        StorageConformanceTests.row(zone.id, "r\(index)", sequence: zone.recordSequence + 1 + Int64(index)), isNew: true)
                }
                changes.zoneSequences[zone.id] = (zone.recordSequence, zone.recordSequence + Int64(count))
                changes.zonesChanged = [zone.id: zone.databaseID]
                try await coarse.apply(changes)

                statements.store(0, ordering: .relaxed)
                // Each lookup asks for its record and one that does not exist.
                let answers = try await withThrowingTaskGroup(of: (Int, LoadedRows).self) { group in
                    for index in 0..<count {
                        group.addTask {
                            let keys: Set<LoadKey> = [.record(zoneID: zone.id, name: "r\(index)"), .record(zoneID: zone.id, name: "none\(index)")]
                            return (index, try await coarse.load(LoadRequest(keys: keys)))
                        }
                    }
                    return try await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
                }
                for (index, rows) in answers {
                    let found = try #require(rows.records[RecordKey(zoneID: zone.id, name: "r\(index)")] ?? nil)
                    expectEqual(found.row.recordName, "r\(index)")
                    let absent = try #require(rows.records[RecordKey(zoneID: zone.id, name: "none\(index)")])
                    #expect(absent == nil)
                }
                #expect(statements.load(ordering: .relaxed) < count, "every lookup went alone")
            } catch {
                await storage.close()
                throw error
            }
            await storage.close()
        }
    }
}
