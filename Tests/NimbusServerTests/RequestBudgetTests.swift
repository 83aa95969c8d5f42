import Foundation
import NimbusCore
import NimbusSQLite
import NimbusServer
import NimbusStorage
import NimbusTestSupport
import NimbusWire
import Testing

/// Request budgets, busy zones and a saturated store (issue 17), each at its limit and one
/// past it, on the server's clock (the test clock moves only when told). Quotas are
/// `QuotaTests`.
@Suite struct RequestBudgetTests {
    /// A server whose budgets are `limits` (the rest as the suite's servers have them).
    static func budgets(_ limits: [ContainerLimit: Int64]) -> (inout ServerConfiguration) -> Void {
        { configuration in
            for (limit, value) in limits { configuration.service.containerLimits[limit] = value }
        }
    }

    static func expectThrottled(
        _ response: APIResponse, retryAfter: Int64, naming limit: ContainerLimit, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(response.status == 429 && response.errorCode == "THROTTLED", "\(response.text)", sourceLocation: sourceLocation)
        #expect(response.json["retryAfter"]?.int64Value == retryAfter, sourceLocation: sourceLocation)
        #expect(response.header("Retry-After") == String(retryAfter), sourceLocation: sourceLocation)
        #expect(response.header("RateLimit-Remaining") == "0", sourceLocation: sourceLocation)
        #expect(response.reason.contains(limit.rawValue), "\(response.reason)", sourceLocation: sourceLocation)
    }

    @Test func aUsersRequestsAndPagesHaveBudgetsOfTheirOwnPublishedOnEveryAnswer() async throws {
        try await TestServer.with(configure: Self.budgets([.userRequestsPerMinute: 5, .userPagesPerMinute: 3])) { server in
            let alice = try await server.user("alice")
            let bob = try await server.user("bob")
            let query: JSON = ["query": ["recordType": "Note"]]
            // Pages: three, then refused; each answer says what is left.
            for left in (0..<3).reversed() {
                let page = try await alice.post("private", "records/query", query)
                expectEqual(page.status, 200, "\(page.text)")
                expectEqual(page.header("RateLimit-Limit"), "3")
                expectEqual(page.header("RateLimit-Remaining"), String(left))
                expectEqual(page.header("RateLimit-Reset").flatMap(Int.init).map { $0 > 0 && $0 <= 60 }, true)
            }
            Self.expectThrottled(try await alice.post("private", "records/query", query), retryAfter: 20, naming: .userPagesPerMinute)
            Self.expectThrottled(try await alice.zoneChanges("_defaultZone"), retryAfter: 20, naming: .userPagesPerMinute)
            // Requests have a budget of their own: five lookups and saves, the sixth refused.
            try await expectEqual(alice.modify([Op.create("a")]).status, 200)
            for left in (0..<4).reversed() {
                let lookup = try await alice.lookup(["a"])
                #expect(lookup.status == 200 && lookup.header("RateLimit-Remaining") == String(left), "\(lookup.text)")
            }
            Self.expectThrottled(try await alice.lookup(["a"]), retryAfter: 12, naming: .userRequestsPerMinute)
            // Another user is not affected.
            try await expectEqual(bob.lookup(["a"]).status, 200)
            // The budget comes back with time: one request every 12 s.
            server.clock.advance(milliseconds: 12_000)
            try await expectEqual(alice.lookup(["a"]).status, 200)
            Self.expectThrottled(try await alice.lookup(["a"]), retryAfter: 12, naming: .userRequestsPerMinute)
        }
    }

    @Test func aContainerSetsItsOwnBudgetsAndTheyTakeEffectAtOnce() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            try await server.service.setLimits(container: TestServer.container, [.userRequestsPerMinute: 2])
            let limits = try await server.service.limits(container: TestServer.container)
            expectEqual(limits[.userRequestsPerMinute], 2)
            #expect(limits[.userPagesPerMinute] == 1_000_000)  // the server's number, not overridden
            try await expectEqual(alice.lookup(["a"]).header("RateLimit-Limit"), "2")
            try await expectEqual(alice.lookup(["a"]).status, 200)
            Self.expectThrottled(try await alice.lookup(["a"]), retryAfter: 30, naming: .userRequestsPerMinute)
            // Back to the server's number.
            try await server.service.setLimits(container: TestServer.container, [.userRequestsPerMinute: Optional<Int64>.none])
            try await expectEqual(alice.lookup(["a"]).status, 200)
            // A budget of 0 would refuse everything: refused itself; a quota of 0 is allowed.
            await #expect(throws: CloudKitError.self) {
                try await server.service.setLimits(container: TestServer.container, [.userRequestsPerMinute: 0])
            }
            try await server.service.setLimits(container: TestServer.container, [.privateDatabaseBytes: 0])
            await #expect(throws: CloudKitError.self) {
                try await server.service.setLimits(container: "iCloud.no.such.container", [.userRequestsPerMinute: 5])
            }
        }
    }

    @Test func callsWithoutAUserShareTheirAddresssBudgetSignedInUsersThereDoNot() async throws {
        try await TestServer.with(configure: Self.budgets([.anonymousRequestsPerMinute: 3])) { server in
            let alice = try await server.user("alice")  // signing in spends the address's budget: one
            let anonymous = server.client()
            let other = server.client()  // another client behind the same address (a shared NAT)
            try await expectEqual(anonymous.lookup("public", ["a"]).status, 200)
            try await expectEqual(other.lookup("public", ["a"]).status, 200)
            Self.expectThrottled(try await anonymous.lookup("public", ["a"]), retryAfter: 20, naming: .anonymousRequestsPerMinute)
            Self.expectThrottled(try await other.lookup("public", ["a"]), retryAfter: 20, naming: .anonymousRequestsPerMinute)
            // A signed-in user behind that address spends their own budget.
            try await expectEqual(alice.lookup("public", ["a"]).status, 200)
        }
    }

    @Test func anAPITokensBudgetHoldsAcrossManyAddressesAndLeavesSignedInUsersAlone() async throws {
        let limits = Self.budgets([.apiTokenRequestsPerMinute: 5, .anonymousRequestsPerMinute: 2, .apiTokenPagesPerMinute: 1])
        try await TestServer.with(configure: { limits(&$0); $0.trustedProxies = ["127.0.0.1"] }) { server in
            let alice = try await server.user("alice")  // one sign-in: one of the token's five
            let client = server.client()
            let body = Array(JSON.object(["records": [["recordName": "a"]]]).serialized())
            let path = "/database/1/\(client.container)/development/public/records/lookup"
            func lookup(from address: String) async throws -> APIResponse {
                try await client.send(path: path, body: body, headers: [("X-Forwarded-For", address)])
            }
            // Four more from four addresses, each well inside its own budget of two: the fifth
            // address finds the token's total spent.
            for index in 1...4 {
                let answer = try await lookup(from: "203.0.113.\(index)")
                expectEqual(answer.status, 200, "\(answer.text)")
            }
            let refused = try await lookup(from: "203.0.113.5")
            Self.expectThrottled(refused, retryAfter: 12, naming: .apiTokenRequestsPerMinute)
            // An address over its own budget is refused by it, without spending the token's.
            server.clock.advance(milliseconds: 60_000)
            try await expectEqual(lookup(from: "198.51.100.1").status, 200)
            try await expectEqual(lookup(from: "198.51.100.1").status, 200)
            Self.expectThrottled(try await lookup(from: "198.51.100.1"), retryAfter: 30, naming: .anonymousRequestsPerMinute)
            try await expectEqual(lookup(from: "198.51.100.2").status, 200, "the token had three left")
            // Pages have a total of their own.
            let pages = "/database/1/\(client.container)/development/public/records/query"
            let query = Array(JSON.object(["query": ["recordType": "Note"]]).serialized())
            #expect(try await client.send(path: pages, body: query, headers: [("X-Forwarded-For", "192.0.2.1")]).status != 429)
            Self.expectThrottled(
                try await client.send(path: pages, body: query, headers: [("X-Forwarded-For", "192.0.2.2")]), retryAfter: 60,
                naming: .apiTokenPagesPerMinute)
            // A signed-in user spends their own budget, not the token's.
            try await expectEqual(alice.lookup("public", ["a"]).status, 200)
        }
    }

    @Test func anAddressThatKeepsFailingAuthenticationIsRefusedBeforeItsCredentialsAreRead() async throws {
        try await TestServer.with(configure: { $0.service.failedAuthenticationsPerMinute = 3 }) { server in
            var forger = server.client()
            forger.apiToken = String(repeating: "f", count: 64)
            for _ in 1...3 {
                let refused = try await forger.lookup("public", ["a"])
                #expect(refused.status == 401 && refused.errorCode == "AUTHENTICATION_FAILED", "\(refused.text)")
            }
            let throttled = try await forger.lookup("public", ["a"])
            #expect(throttled.status == 429 && throttled.errorCode == "THROTTLED", "\(throttled.text)")
            expectEqual(throttled.json["retryAfter"]?.int64Value, 20)
            // The address waits; the wait ends with time.
            try await expectEqual(server.client().lookup("public", ["a"]).status, 429)
            server.clock.advance(milliseconds: 20_000)
            try await expectEqual(server.client().lookup("public", ["a"]).status, 200)
        }
    }

    @Test func aServerToServerKeyHasABudgetOfItsOwn() async throws {
        try await TestServer.with(configure: Self.budgets([.serverKeyRequestsPerMinute: 2, .serverKeyPagesPerMinute: 1])) { server in
            let key = Caller(
                container: TestServer.container, environment: .development, user: nil, deviceID: "iCloud",
                serverKey: .init(keyID: "k1", recordName: "_server"))
            let service = server.service
            let first = try await service.admit(key, address: "10.0.0.1", cost: .request)
            let second = try await service.admit(key, address: "10.0.0.2", cost: .request)  // any address
            #expect(first?.remaining == 1 && second?.remaining == 0)
            await #expect(throws: ThrottledRequest.self) { try await service.admit(key, address: "10.0.0.1", cost: .request) }
            let page = try await service.admit(key, address: nil, cost: .page)
            expectEqual(page?.limit, 1)
            await #expect(throws: ThrottledRequest.self) { try await service.admit(key, address: nil, cost: .page) }
        }
    }

    @Test func budgetsOffPublishNothing() async throws {
        try await TestServer.with(configure: { $0.service.throttlesRequests = false }) { server in
            let alice = try await server.user("alice")
            let answer = try await alice.lookup(["a"])
            #expect(answer.status == 200 && answer.header("RateLimit-Limit") == nil)
        }
    }

    // MARK: Busy zones, a saturated store

    /// A server on a store whose writes can be held, with `writersPerZone` and
    /// `maximumPendingStorageCalls` as given.
    static func holdable(_ holder: StorageFaultTests.Holder, writersPerZone: Int, pending: Int)
        -> (inout ServerConfiguration) -> Void
    {
        { configuration in
            let sqlite = SQLiteStorage.opener(synchronous: .normal)
            configuration.storage = StorageOpener(description: sqlite.description) { directory in
                let faulty = FaultyStorage(try await sqlite.open(directory))
                holder.set(faulty)
                return faulty
            }
            configuration.service.writersPerZone = writersPerZone
            configuration.service.maximumPendingStorageCalls = pending
        }
    }

    /// Waits until `condition` holds (a held write has reached the store), for at most 10 s;
    /// past that the test stops there (its held writes are released on the way out).
    static func eventually(_ condition: () -> Bool) async throws {
        for _ in 0..<1_000 where !condition() { try await Task.sleep(for: .milliseconds(10)) }
        try #require(condition())
    }

    /// Saves `name` in `user`'s default zone, again for as long as the store is too busy to
    /// take it. The server's background work (draining the change outbox, reading stored
    /// notifications) takes a place among the waiting calls for a moment now and then, so a
    /// save meant to wait on a held store can be refused instead; refused, it wrote nothing.
    static func saveOnceAdmitted(_ user: APIClient, _ name: String) async throws -> APIResponse {
        while true {
            let answer = try await user.modify([Op.create(name)])
            guard answer.status == 503 && answer.errorCode == "TRY_AGAIN_LATER" else { return answer }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    @Test func aZoneWithAsManySavesInFlightAsItsBoundAnswersZoneBusy() async throws {
        let holder = StorageFaultTests.Holder()
        try await TestServer.with(configure: Self.holdable(holder, writersPerZone: 2, pending: 0)) { server in
            let alice = try await server.user("alice")
            let bob = try await server.user("bob")
            let faulty = holder.storage
            try await faulty.holdingWrites {
                // Two saves in alice's default zone: at the bound, both wait on the store.
                async let first = alice.modify([Op.create("one")])
                async let second = alice.modify([Op.create("two")])
                try await Self.eventually { faulty.heldWrites == 2 }
                // The third: ZONE_BUSY at once, nothing written.
                let busy = try await alice.modify([Op.create("three")])
                #expect(busy.status == 503 && busy.errorCode == "ZONE_BUSY", "\(busy.text)")
                #expect(busy.json["retryAfter"]?.int64Value == 1 && busy.header("Retry-After") == "1")
                #expect(busy.reason.contains("writersPerZone"))
                // Another user's zone of the same name is another zone.
                async let bobs = bob.modify([Op.create("b")])
                try await Self.eventually { faulty.heldWrites == 3 }
                faulty.releaseWrites()
                try await expectEqual(first.status, 200)
                try await expectEqual(second.status, 200)
                try await expectEqual(bobs.status, 200)
                let found = try await alice.lookup(["one", "two", "three"]).records.map { $0["serverErrorCode"]?.stringValue }
                expectEqual(found, [nil, nil, "NOT_FOUND"])
                // With the saves done, the zone takes saves again.
                try await expectEqual(alice.modify([Op.create("three")]).status, 200)
            }
        }
    }

    @Test func aStoreWithAsManyCallsWaitingAsItsBoundAnswersTryAgainLater() async throws {
        let holder = StorageFaultTests.Holder()
        try await TestServer.with(configure: Self.holdable(holder, writersPerZone: 0, pending: 2)) { server in
            let alice = try await server.user("alice")
            let faulty = holder.storage
            try await faulty.holdingWrites {
                async let first = Self.saveOnceAdmitted(alice, "one")
                async let second = Self.saveOnceAdmitted(alice, "two")
                try await Self.eventually { faulty.heldWrites == 2 }
                // Two calls wait on the store: the next call of any kind is refused, not queued.
                for response in [try await alice.modify([Op.create("three")]), try await alice.lookup(["one"])] {
                    #expect(response.status == 503 && response.errorCode == "TRY_AGAIN_LATER", "\(response.text)")
                    expectEqual(response.json["retryAfter"]?.int64Value, 1)
                }
                faulty.releaseWrites()
                try await expectEqual(first.status, 200)
                try await expectEqual(second.status, 200)
                try await expectEqual(
                    alice.lookup(["one", "three"]).records.map { $0["serverErrorCode"]?.stringValue }, [nil, "NOT_FOUND"])
            }
        }
    }
}
