import Foundation
import NimbusServer
import NimbusTestSupport
import NimbusWire
import Testing

/// Bounded fan-out (issue 42): what one user's public subscriptions can make every writer pay,
/// and what one write may create, each at its limit and one past it.
@Suite struct FanOutTests {
    static func create(_ client: APIClient, _ subscriptions: [JSON], in database: String = "public") async throws -> [JSON] {
        let operations: [JSON] = subscriptions.map { ["operationType": "create", "subscription": $0] }
        let response = try await client.post(database, "subscriptions/modify", ["operations": .array(operations)])
        expectEqual(response.status, 200, "\(response.text)")
        return response.json["subscriptions"]?.arrayValue ?? []
    }

    static func failures(_ results: [JSON]) -> [JSON] { results.filter { $0["serverErrorCode"] != nil } }

    @Test func publicSubscriptionsAreBoundedPerUserAndPerRecordType() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let types = ["TypeA", "TypeB", "TypeC", "TypeD", "TypeE", "TypeF"]
            _ = try await alice.modify("public", types.map { Op.create("seed-\($0)", type: $0) })
            let perType = Limits.publicSubscriptionsPerRecordType.value
            // At the per-type limit: taken; one past it: refused with the limit's name.
            let first = try await Self.create(
                alice, (0..<perType).map { SubscriptionTests.querySubscription("a\($0)", type: "TypeA") })
            #expect(Self.failures(first).isEmpty)
            let past = try await Self.create(alice, [SubscriptionTests.querySubscription("a-past", type: "TypeA")])
            expectEqual(past.first?["serverErrorCode"], "BAD_REQUEST")
            expectEqual(past.first?["limit"], .string(Limits.publicSubscriptionsPerRecordType.name))
            expectEqual(past.first?["subscriptionID"], "a-past")
            expectEqual(past.first?["reason"]?.stringValue?.contains("'TypeA'"), true)
            // Moving another type's subscription onto the full type is refused too.
            _ = try await Self.create(alice, [SubscriptionTests.querySubscription("b-move", type: "TypeB")])
            let moved = try await alice.post(
                "public", "subscriptions/modify",
                ["operations": [["operationType": "update", "subscription": SubscriptionTests.querySubscription("b-move", type: "TypeA")]]])
            expectEqual(moved.json["subscriptions"]?[0]?["limit"], .string(Limits.publicSubscriptionsPerRecordType.name), "\(moved.text)")
            // Up to the per-user limit across types (20 TypeA, 1 TypeB, 79 more across TypeC to
            // TypeF = 100): taken; one more, to a type with room: refused.
            let total = Limits.publicSubscriptionsPerUser.value
            var more: [JSON] = []
            for index in 0..<(total - perType - 1) {
                more.append(SubscriptionTests.querySubscription("m\(index)", type: types[2 + index / perType]))
            }
            for chunk in stride(from: 0, to: more.count, by: 50) {
                #expect(Self.failures(try await Self.create(alice, Array(more[chunk..<min(chunk + 50, more.count)]))).isEmpty)
            }
            let listed = try await alice.post("public", "subscriptions/list", [:])
            expectEqual(listed.json["subscriptions"]?.arrayValue?.count, total)
            let overUser = try await Self.create(alice, [SubscriptionTests.querySubscription("over", type: "TypeF")])
            expectEqual(overUser.first?["limit"], .string(Limits.publicSubscriptionsPerUser.name), "\(overUser)")
            // Another user has allowances of their own; the private database keeps its own bound.
            let bob = try await server.user("bob")
            #expect(Self.failures(try await Self.create(bob, [SubscriptionTests.querySubscription("b0", type: "TypeA")])).isEmpty)
            _ = try await alice.modify([Op.create("n", type: "Note")])
            let privateOnes = (0...perType).map { SubscriptionTests.querySubscription("p\($0)", type: "Note") }
            #expect(Self.failures(try await Self.create(alice, privateOnes, in: "private")).isEmpty)
        }
    }

    /// `notificationsPerWrite` (10 here): at it, every match is stored; past it, each
    /// subscription is notified once per write, and past that the rest are not stored.
    @Test func oneWriteCreatesAtMostItsNotifications() async throws {
        try await TestServer.with(configure: { $0.service.notificationsPerWrite = 10 }) { server in
            let alice = try await server.user("alice")
            let bob = try await server.user("bob")
            let carol = try await server.user("carol")
            _ = try await alice.modify("public", [Op.create("seed", type: "Post")])
            // Five identical subscriptions each for alice and bob: one filter, evaluated once.
            for (client, name) in [(alice, "alice"), (bob, "bob")] {
                let created = try await Self.create(client, (0..<5).map { SubscriptionTests.querySubscription("\(name)\($0)", type: "Post") })
                #expect(Self.failures(created).isEmpty)
            }
            func collected(_ client: APIClient) async throws -> Int {
                try await client.device("notifications/changes", ["resultsLimit": 200]).json["notifications"]?.arrayValue?.count ?? -1
            }
            func collected(_ alice: APIClient, _ bob: APIClient) async throws -> (Int, Int) {
                (try await collected(alice), try await collected(bob))
            }
            // One record fires ten subscriptions: at the limit, all ten stored.
            _ = try await carol.modify("public", [Op.create("p1", type: "Post")])
            try await waitFor { try await collected(alice, bob) == (5, 5) }
            // Two records fire each subscription twice (twenty matches): coalesced, each
            // subscription hears once (ten).
            _ = try await carol.modify("public", [Op.create("p2", type: "Post"), Op.create("p3", type: "Post")])
            try await waitFor { try await collected(alice, bob) == (10, 10) }
            // One past the limit even coalesced: a third user's subscription makes eleven; ten are
            // stored (twenty before, thirty after).
            let created = try await Self.create(carol, [SubscriptionTests.querySubscription("carol0", type: "Post")])
            #expect(Self.failures(created).isEmpty)
            _ = try await alice.modify("public", [Op.create("p4", type: "Post")])
            func all() async throws -> Int {
                let (a, b) = try await collected(alice, bob)
                return a + b + (try await collected(carol))
            }
            try await waitFor { try await all() >= 30 }
            try await Task.sleep(for: .milliseconds(500))
            try await expectEqual(all(), 30)
        }
    }
}
