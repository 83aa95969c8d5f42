import Foundation
import NimbusStorage
import NimbusTestSupport
import PostgresNIO
import Synchronization
import Testing

@testable import NimbusPostgres

/// The subscriptions version on PostgreSQL (`PostgresApply`): every write that decided whether to
/// fill the outbox from it checks it at apply, sharing its row with the other writes that only
/// read it, so writes of different zones and databases do not take turns there; a unit that
/// changes subscriptions takes the row alone and waits for the readers in flight.
@Suite(.enabled(if: PostgresTestCluster.url != nil, "needs the test cluster"))
struct PostgresSubscriptionsVersionTests {
    @Test func readersShareTheVersionAndAChangeWaitsForThem() async throws {
        try await PostgresTestCluster.withDatabase { location in
            let storage = try await PostgresStorage(location, deadline: PostgresTestCluster.deadline, maximumConnections: 4)
            let coarse = PostgresCoarseStorage(storage)
            let holder = try await PostgresTestCluster.connect(to: location, id: 9, logger: storage.logger)
            do {
                let (_, a, b) = try await CoarseApplyTests.setUp(coarse)
                let ids = try await coarse.reserveIDs(.record, count: 4)
                let version = try #require(try await Self.version(location))

                // Another write in flight that read the version: it holds the row shared.
                try await holder.query("BEGIN", logger: storage.logger)
                try await holder.query(
                    "SELECT value FROM counters WHERE key = 'subscriptions_version' FOR SHARE", logger: storage.logger)

                // A write that only read it applies meanwhile.
                let (database, loaded) = try await CoarseApplyTests.load(coarse, [a, b])
                var reader = CoarseApplyTests.save("x", in: loaded[0], database: database, id: ids.lowerBound)
                reader.subscriptionsVersion = (read: version, changes: 0)
                let read = Task { try await coarse.apply(reader) }
                #expect(await Self.finishes(read, within: .seconds(5)), "a reader waited for another reader of the version")

                // A unit that changes subscriptions waits for the reader in flight.
                var change = UnitOfWorkChanges()
                change.writes = [
                    .putSubscription(
                        SubscriptionRow(
                            databaseID: database.id, database: CoarseApplyTests.key, userID: 7, subscriptionID: "s",
                            definition: [1], createdAt: 1))
                ]
                change.subscriptionsVersion = (read: version, changes: 1)
                let changing = Task { try await coarse.apply(change) }
                #expect(!(await Self.finishes(changing, within: .milliseconds(500))), "a change went ahead of a reader holding the version")
                try await holder.query("COMMIT", logger: storage.logger)
                #expect(await Self.finishes(changing, within: .seconds(5)))
                try await read.value
                try await changing.value

                // A write decided from the version before the change is refused as it applies.
                var stale = CoarseApplyTests.save("y", in: loaded[1], database: database, id: ids.lowerBound + 1)
                stale.subscriptionsVersion = (read: version, changes: 0)
                await #expect { try await coarse.apply(stale) } throws: { CoarseApplyTests.isCollision($0) }
                try await expectEqual(Self.version(location), version + 1)
            } catch {
                _ = try? await holder.query("ROLLBACK", logger: storage.logger)
                try? await holder.close()
                await storage.close()
                throw error
            }
            try await holder.close()
            await storage.close()
        }
    }

    static func version(_ location: PostgresLocation) async throws -> Int64? {
        let rows = try await PostgresTestCluster.rows("SELECT value::text FROM counters WHERE key = 'subscriptions_version'", on: location)
        return (rows.first?.first ?? nil).flatMap { Int64($0) }
    }

    /// Whether `task` ends (either way) within `limit`.
    static func finishes(_ task: Task<Void, any Error>, within limit: Duration) async -> Bool {
        let end = ContinuousClock.now + limit
        let done = Atomic(false)
        let watcher = Task {
            _ = await task.result
            done.store(true, ordering: .relaxed)
        }
        while ContinuousClock.now < end {
            if done.load(ordering: .relaxed) { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        watcher.cancel()
        return done.load(ordering: .relaxed)
    }
}
