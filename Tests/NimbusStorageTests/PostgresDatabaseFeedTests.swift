import Foundation
import NimbusStorage
import NimbusTestSupport
import Testing

@testable import NimbusPostgres

/// The database change feed on PostgreSQL (`PostgresDatabaseFeed`): a write marks its zone
/// pending, the feed lists a pending zone at once, and the stamper gives it a sequence after
/// the commit, also when the stamp was lost (a crash between the two) and the store opens again.
@Suite(.enabled(if: PostgresTestCluster.url != nil, "needs the test cluster"))
struct PostgresDatabaseFeedTests {
    @Test func aPendingZoneIsListedAtOnceAndStampedAfterEvenAcrossACrash() async throws {
        try await PostgresTestCluster.withDatabase { location in
            func open() async throws -> PostgresCoarseStorage {
                PostgresCoarseStorage(try await PostgresStorage(location, deadline: PostgresTestCluster.deadline, maximumConnections: 4))
            }
            func stamped() async throws -> Bool { try await PostgresTestCluster.feedStamped(on: location) }

            let first = try await open()
            let (_, a, _) = try await CoarseApplyTests.setUp(first)
            #expect(try await stamped(), "the zones made were never stamped")
            let (database, zones) = try await CoarseApplyTests.load(first, [a])
            let token = database.sequence
            let id = try await first.reserveIDs(.record, count: 1).lowerBound
            try await first.apply(CoarseApplyTests.save("x", in: zones[0], database: database, id: id))
            // Listed at once, stamped or not.
            expectEqual(try await CoarseApplyTests.feed(first, after: token).map(\.name), ["A"])
            #expect(try await stamped(), "the write's zone was never stamped")
            let stampedFeed = try await CoarseApplyTests.feed(first, after: token)
            expectEqual(stampedFeed.map(\.name), ["A"])
            let next = try #require(stampedFeed.first).changeSequence
            #expect(next > token)
            expectEqual(try await CoarseApplyTests.feed(first, after: next).map(\.name), [], "listed again after its own stamp")
            try await first.close()

            // A write whose stamp a crash lost: its zone is still pending as the store opens.
            _ = try await PostgresTestCluster.rows("UPDATE zones SET feed_pending = true WHERE name = 'A'", on: location)
            let reopened = try await open()
            let listed = try await CoarseApplyTests.feed(reopened, after: next)
            expectEqual(listed.map(\.name), ["A"], "a pending zone went unlisted")
            #expect(try await stamped(), "the sweep as the store opened left the zone pending")
            let after = try #require(try await CoarseApplyTests.feed(reopened, after: next).first)
            expectEqual(after.name, "A")
            #expect(after.changeSequence > next)
            try await reopened.close()
        }
    }
}
