import Foundation
import NimbusCore
import NimbusServer
import NimbusStorage
import NimbusTestSupport
import NimbusWire
import Synchronization
import Testing

/// Brute force against sign-in (issue 16): wrong passwords per account and attempts per client
/// address are limited (`SignInLimits`), each at its limit and one past it, on the server's
/// clock (the test clock moves only when told).
@Suite struct SignInLimitTests {
    static func limited(_ change: @escaping (inout SignInLimits) -> Void) -> (inout ServerConfiguration) -> Void {
        { configuration in
            var limits = SignInLimits()
            limits.slowdown = .milliseconds(200)
            change(&limits)
            configuration.service.signInLimits = limits
        }
    }

    @Test func wrongPasswordsForOneAccountAreSlowedThenRefused() async throws {
        try await TestServer.with(configure: Self.limited { $0.attemptsPerAddressPerMinute = 1_000 }) { server in
            _ = try await server.service.createUser(name: "dave", password: "correct-horse")
            _ = try await server.service.createUser(name: "erin", password: "correct-horse")
            let client = server.client()
            // The account's allowance: ten wrong passwords, the sixth on answered after the slowdown.
            for attempt in 1...10 {
                let started = ContinuousClock.now
                let wrong = try await client.signIn("dave", password: "guess-\(attempt)")
                #expect(wrong.status == 401 && wrong.errorCode == "AUTHENTICATION_FAILED", "attempt \(attempt): \(wrong.text)")
                if attempt > 5 {
                    #expect(ContinuousClock.now - started >= .milliseconds(200), "attempt \(attempt) was not slowed")
                }
            }
            // One past it: refused before any password is checked, the right one included, and
            // under another spelling of the name.
            for (name, password) in [("dave", "guess-11"), ("dave", "correct-horse"), ("DAVE", "correct-horse")] {
                let refused = try await client.signIn(name, password: password)
                #expect(refused.status == 429 && refused.errorCode == "THROTTLED", "\(refused.text)")
                #expect(refused.json["retryAfter"]?.int64Value == 6)  // a minute over ten failures
                #expect(refused.headers.contains { $0.0.lowercased() == "retry-after" && $0.1 == "6" })
                #expect(refused.reason.contains("wrong passwords for this account"))
            }
            // Another account is not affected.
            try await expectEqual(client.signIn("erin", password: "correct-horse").status, 200)
            // Once the next failure is allowed again, the right password works.
            server.clock.advance(milliseconds: 6_000)
            try await expectEqual(client.signIn("dave", password: "correct-horse").status, 200)
        }
    }

    @Test func attemptsFromOneAddressAreLimited() async throws {
        try await TestServer.with(configure: Self.limited { $0.attemptsPerAddressPerMinute = 5 }) { server in
            _ = try await server.service.createUser(name: "fay", password: "correct-horse")
            let client = server.client()
            // Five attempts of any outcome, on any accounts: at the limit.
            for (index, name) in ["fay", "fay", "nobody", "fay", "gus"].enumerated() {
                let answer = try await client.signIn(name, password: index == 0 ? "correct-horse" : "guess")
                #expect(answer.status != 429, "attempt \(index + 1): \(answer.text)")
            }
            // The sixth: refused, naming the address, right password or not.
            let refused = try await client.signIn("fay", password: "correct-horse")
            #expect(refused.status == 429 && refused.errorCode == "THROTTLED", "\(refused.text)")
            #expect(refused.json["retryAfter"]?.int64Value == 12)  // a minute over five attempts
            #expect(refused.reason.contains("from 127.0.0.1"))
            server.clock.advance(milliseconds: 12_000)
            try await expectEqual(client.signIn("fay", password: "correct-horse").status, 200)
        }
    }

    @Test func aTrustedProxysClientIsTheAddressCounted() async throws {
        let configure: (inout ServerConfiguration) -> Void = { configuration in
            Self.limited { $0.attemptsPerAddressPerMinute = 2 }(&configuration)
            configuration.trustedProxies = ["127.0.0.1"]
        }
        try await TestServer.with(configure: configure) { server in
            let client = server.client()
            let path = "/auth/1/\(TestServer.container)/development/signin"
            let body = Array(#"{"username":"nobody","password":"guess-guess"}"#.utf8)
            func attempt(_ header: (String, String)) async throws -> APIResponse {
                try await client.send(path: path, body: body, headers: [header])
            }
            for _ in 0..<2 { #expect(try await attempt(("X-Forwarded-For", "203.0.113.7, 10.0.0.1")).status == 401) }
            let refused = try await attempt(("Forwarded", "for=203.0.113.7;proto=https"))
            #expect(refused.status == 429 && refused.reason.contains("from 203.0.113.7"), "\(refused.text)")
            // Another client behind the same proxy has its own allowance.
            try await expectEqual(attempt(("Forwarded", #"for="[2001:db8::1]:4711""#)).status, 401)
            try await expectEqual(attempt(("X-Forwarded-For", "198.51.100.2")).status, 401)
        }
        // From a peer that is not a trusted proxy the header is not believed: the peer is counted.
        try await TestServer.with(configure: Self.limited { $0.attemptsPerAddressPerMinute = 2 }) { server in
            let client = server.client()
            let path = "/auth/1/\(TestServer.container)/development/signin"
            let body = Array(#"{"username":"nobody","password":"guess-guess"}"#.utf8)
            for address in ["203.0.113.1", "203.0.113.2"] {
                try await expectEqual(client.send(path: path, body: body, headers: [("X-Forwarded-For", address)]).status, 401)
            }
            let refused = try await client.send(path: path, body: body, headers: [("X-Forwarded-For", "203.0.113.3")])
            #expect(refused.status == 429 && refused.reason.contains("from 127.0.0.1"), "\(refused.text)")
        }
    }

    /// Strangers cannot lock an owner out (issue 42): an attacker guessing every half second
    /// from a new address each time spends the account's allowance for unknown addresses, while
    /// the owner, on an address it signed in from before, signs in at the first try every time.
    /// Brute force stays as slow as before: about ten guesses a minute are checked at all.
    @Test func theOwnerSignsInAtTheFirstTryWhileStrangersGuessFromRotatingAddresses() async throws {
        let configure: (inout ServerConfiguration) -> Void = { configuration in
            Self.limited { _ in }(&configuration)
            configuration.trustedProxies = ["127.0.0.1"]
        }
        try await TestServer.with(configure: configure) { server in
            _ = try await server.service.createUser(name: "olive", password: "correct-horse")
            let client = server.client()
            let path = "/auth/1/\(TestServer.container)/development/signin"
            func signIn(_ password: String, from address: String, query: String? = nil) async throws -> APIResponse {
                let body = JSON.object(["username": "olive", "password": .string(password)])
                return try await client.send(
                    path: path, body: Array(body.serialized()), rawQuery: query, headers: [("X-Forwarded-For", address)])
            }
            let home = "198.51.100.10"
            try await expectEqual(signIn("correct-horse", from: home).status, 200)
            var checked = 0, refused = 0
            for guess in 0..<120 {
                // A guess every half second of the server's clock, each from a new address.
                server.clock.advance(milliseconds: 500)
                let answer = try await signIn("guess-\(guess)", from: "203.0.113.\(guess + 1)")
                if answer.status == 401 { checked += 1 } else if answer.status == 429 { refused += 1 }
                if guess % 8 == 7 {
                    let owner = try await signIn("correct-horse", from: home)
                    expectEqual(owner.status, 200, "the owner was refused after guess \(guess): \(owner.text)")
                }
            }
            // A minute of guessing: the burst of ten and one every six seconds were checked.
            #expect(checked <= 21 && refused >= 99, "checked \(checked), refused \(refused)")
            // Meanwhile an address the account never signed in from is held to the strangers'
            // allowance, right password or not ...
            let newPhone = try await signIn("correct-horse", from: "192.0.2.50")
            #expect(newPhone.status == 429 && newPhone.reason.contains("has not signed in from"), "\(newPhone.text)")
            // ... unless it carries a live session of the account (a device already signed in).
            let session = try await signIn("correct-horse", from: home)
            let token = try #require(session.json["ckWebAuthToken"]?.stringValue)
            let withSession = try await signIn(
                "correct-horse", from: "192.0.2.51", query: "?ckAPIToken=\(server.developmentToken)&ckWebAuthToken=\(token)")
            expectEqual(withSession.status, 200, "\(withSession.text)")
            // Another account's session does not count.
            _ = try await server.service.createUser(name: "pete", password: "correct-horse")
            let pete = try await client.signIn("pete", password: "correct-horse")
            let petes = try #require(pete.json["ckWebAuthToken"]?.stringValue)
            let borrowed = try await signIn(
                "correct-horse", from: "192.0.2.52", query: "?ckAPIToken=\(server.developmentToken)&ckWebAuthToken=\(petes)")
            expectEqual(borrowed.status, 429, "\(borrowed.text)")
        }
    }

    /// A known device is held to its own allowance of wrong passwords (ten a minute, the sixth on
    /// slowed), at the limit and one past it; and an address is known for `knownDeviceDays`.
    @Test func aKnownDeviceHasItsOwnAllowanceForADayCount() async throws {
        let configure: (inout ServerConfiguration) -> Void = { configuration in
            Self.limited { $0.knownDeviceDays = 30 }(&configuration)
            configuration.trustedProxies = ["127.0.0.1"]
        }
        try await TestServer.with(configure: configure) { server in
            _ = try await server.service.createUser(name: "quinn", password: "correct-horse")
            let client = server.client()
            func signIn(_ password: String, from address: String) async throws -> APIResponse {
                let body = JSON.object(["username": "quinn", "password": .string(password)])
                return try await client.send(
                    path: "/auth/1/\(TestServer.container)/development/signin", body: Array(body.serialized()),
                    headers: [("X-Forwarded-For", address)])
            }
            let home = "198.51.100.20"
            try await expectEqual(signIn("correct-horse", from: home).status, 200)
            for attempt in 1...10 {
                let started = ContinuousClock.now
                try await expectEqual(signIn("typo-\(attempt)", from: home).status, 401, "attempt \(attempt)")
                if attempt > 5 { #expect(ContinuousClock.now - started >= .milliseconds(200), "attempt \(attempt) was not slowed") }
            }
            let eleventh = try await signIn("correct-horse", from: home)
            #expect(eleventh.status == 429 && eleventh.reason.contains("from \(home)"), "\(eleventh.text)")
            // The owner's typos at home did not spend the strangers' allowance: another address
            // may still try (and, right, sign in).
            try await expectEqual(signIn("correct-horse", from: "192.0.2.60").status, 200)
            // Thirty days later home is still known; thirty-one days after its last sign-in, it
            // is a stranger again (held to the account's shared allowance, which strangers spend).
            server.clock.advance(milliseconds: 30 * 86_400_000)
            try await expectEqual(signIn("correct-horse", from: home).status, 200)
            server.clock.advance(milliseconds: 31 * 86_400_000)
            for guess in 0..<10 { #expect(try await signIn("guess-\(guess)", from: "203.0.113.\(guess + 1)").status == 401) }
            try await expectEqual(signIn("correct-horse", from: home).status, 429)
        }
    }

    @Test func tokenBucketsRefillSpendAndStayBounded() {
        let buckets = TokenBuckets(.init(capacity: 3, perMinute: 6), maximumKeys: 8)
        expectEqual(buckets.available("a", now: 0), 3)
        for _ in 0..<3 { #expect(buckets.take("a", now: 0) == nil) }
        #expect(buckets.take("a", now: 0) == 10_000)  // six a minute: one every ten seconds
        expectEqual(buckets.wait("a", now: 4_000), 6_000)
        #expect(buckets.take("a", now: 10_000) == nil)
        #expect(buckets.available("a", now: 1_000_000) == 3)  // never past the capacity
        // Keys beyond the table's size: refilled buckets go first, then the stalest quarter.
        for index in 0..<20 { _ = buckets.take("k\(index)", now: 2_000_000 + Int64(index)) }
        #expect(buckets.count <= 8)
        #expect(buckets.available("k19", now: 2_000_019) == 2)  // the newest is remembered
    }

    /// A shared budget's lease (`BudgetLeases`, PostgreSQL's budgets across nodes): callers that
    /// find it spent at once wait for one lease request and share it, and a lease still valid is
    /// added to, not replaced. Before, 32 requests of one user at once leased 32 twentieths of
    /// the budget and kept one, and the user was refused far below the published rate.
    @Test func aBurstOfRequestsLeasesTheSharedBudgetOnce() async throws {
        actor Ledger: SharedBudgetLedger {
            var takes = 0
            var tokens = 1_200.0
            func take(_ key: String, wanted: Int, capacity: Int, perMinute: Int, now: Int64) async throws -> BudgetGrant {
                takes += 1
                try await Task.sleep(for: .milliseconds(20))  // a round trip, while the others arrive
                let granted = min(wanted, Int(tokens))
                tokens -= Double(granted)
                return BudgetGrant(granted: granted, left: tokens)
            }
            func drain() { tokens = 0 }
        }
        let ledger = Ledger()
        let leases = BudgetLeases()
        let admitted = try await withThrowingTaskGroup(of: Bool.self) { group in
            for _ in 0..<32 { group.addTask { try await leases.spend("u", capacity: 1_200, ledger: ledger, now: 0).admitted } }
            return try await group.reduce(into: 0) { $0 += $1 ? 1 : 0 }
        }
        expectEqual(admitted, 32)
        try await expectEqual(ledger.takes, 1)
        try await expectEqual(ledger.tokens, 1_140)  // one twentieth leased; 28 of it still held
        expectEqual(leases.spend("u", now: 1)?.tokens, 27)
        // A lease added while one is still valid adds to it; past its lifetime it is replaced.
        leases.add("u", tokens: 10, left: 0, now: 2)
        expectEqual(leases.spend("u", now: 3)?.tokens, 36)
        leases.add("u", tokens: 10, left: 0, now: 3 + BudgetLeases.lifetime)
        expectEqual(leases.spend("u", now: 4 + BudgetLeases.lifetime)?.tokens, 9)
        // A bucket with nothing left refuses, with the wait for its next token.
        let empty = Ledger()
        await empty.drain()
        let refused = try await BudgetLeases().spend("v", capacity: 1_200, ledger: empty, now: 0)
        #expect(!refused.admitted && refused.wait >= 1)
    }

    @Test func passwordChecksRunOnTheirOwnThreadsWithABoundedQueue() async throws {
        let pool = PasswordHashing(threads: 1, queueLimit: 2)
        #expect(!PasswordHashing.isHashingThread)
        #expect(try await pool.run { PasswordHashing.isHashingThread })
        // One check holds the thread; two wait; a third waiting one is refused at once.
        let release = Atomic<Bool>(false)
        let started = Atomic<Bool>(false)
        let holder = Task {
            try await pool.run {
                started.store(true, ordering: .relaxed)
                while !release.load(ordering: .relaxed) { usleep(1_000) }
                return 0
            }
        }
        while !started.load(ordering: .relaxed) { try await Task.sleep(for: .milliseconds(5)) }
        let waiting = (1...2).map { value in Task { try await pool.run { value } } }
        while pool.waiting < 2 { try await Task.sleep(for: .milliseconds(5)) }
        await #expect {
            _ = try await pool.run { 3 }
        } throws: { error in
            (error as? CloudKitError)?.code == .throttled && (error as? CloudKitError)?.retryAfter == 1
        }
        release.store(true, ordering: .relaxed)
        try await expectEqual(holder.value, 0)
        let first = try await waiting[0].value, second = try await waiting[1].value
        #expect(first == 1 && second == 2)
    }
}
