import NimbusStorage
import Synchronization

/// Token buckets by key, in this node's memory: each key may spend `rate.capacity` at once and
/// gets `rate.perMinute` back a minute, continuously. The table holds at most `maximumKeys`
/// buckets, so a caller inventing keys (names, addresses) cannot grow it without bound: a full
/// table first forgets buckets that have refilled (they hold nothing a fresh one would not),
/// then the quarter least recently used. A call may name a rate of its own (`spend`), for
/// tables whose keys have different budgets (per-container request budgets).
public final class TokenBuckets: Sendable {
    public struct Rate: Sendable, Hashable {
        public var capacity: Int
        public var perMinute: Int

        public init(capacity: Int, perMinute: Int) {
            precondition(capacity >= 1 && perMinute >= 1)
            self.capacity = capacity
            self.perMinute = perMinute
        }
    }

    private struct Bucket {
        var tokens: Double
        var updated: Int64
        var rate: Rate
    }

    /// What `spend` did: whether a token was there, and the bucket after it.
    public struct Spend: Sendable, Hashable {
        public var admitted: Bool
        /// Whole tokens left.
        public var remaining: Int
        /// Milliseconds until the bucket is full again.
        public var untilFull: Int64
        /// Milliseconds until the next token, when none was there (else 0).
        public var wait: Int64
    }

    public let rate: Rate
    let maximumKeys: Int
    private let buckets = Mutex<[String: Bucket]>([:])

    public init(_ rate: Rate, maximumKeys: Int = 100_000) {
        self.rate = rate
        self.maximumKeys = max(4, maximumKeys)
    }

    /// The tokens `key` has at `now` (milliseconds), whole, without spending any.
    public func available(_ key: String, now: Int64) -> Int {
        buckets.withLock { buckets in
            guard let bucket = buckets[key] else { return rate.capacity }
            return Int(Self.refilled(bucket, now: now).tokens)
        }
    }

    /// Nil when `key` has a token at `now`, else the milliseconds until it has; spends nothing.
    public func wait(_ key: String, now: Int64) -> Int64? {
        buckets.withLock { buckets in
            guard let bucket = buckets[key].map({ Self.refilled($0, now: now) }), bucket.tokens < 1 else { return nil }
            return Self.wait(for: bucket)
        }
    }

    /// Spends a token of `key`; nil when there was one, else the milliseconds until there is.
    public func take(_ key: String, now: Int64) -> Int64? {
        let spent = spend(key, rate: rate, now: now)
        return spent.admitted ? nil : spent.wait
    }

    /// Spends a token of `key`, whose bucket holds `rate` (a bucket whose rate changed is held
    /// to the new one from now on: a larger capacity adds the difference, a smaller one caps).
    public func spend(_ key: String, rate: Rate, now: Int64) -> Spend {
        buckets.withLock { buckets in
            var bucket = buckets[key].map { Self.refilled($0, now: now) } ?? Bucket(tokens: Double(rate.capacity), updated: now, rate: rate)
            if bucket.rate != rate {
                // A raised budget is there at once; a lowered one caps what is left.
                bucket.tokens = min(bucket.tokens + Double(max(0, rate.capacity - bucket.rate.capacity)), Double(rate.capacity))
                bucket.rate = rate
            }
            let admitted = bucket.tokens >= 1
            if admitted { bucket.tokens -= 1 }
            if buckets[key] == nil, buckets.count >= maximumKeys { evict(&buckets, now: now) }
            buckets[key] = bucket
            let missing = Double(rate.capacity) - bucket.tokens
            return Spend(
                admitted: admitted, remaining: Int(bucket.tokens),
                untilFull: Int64((missing * 60_000 / Double(rate.perMinute)).rounded(.up)),
                wait: admitted ? 0 : Self.wait(for: bucket))
        }
    }

    /// How many keys the table holds (tests, diagnostics).
    public var count: Int { buckets.withLock { $0.count } }

    private static func refilled(_ bucket: Bucket, now: Int64) -> Bucket {
        let elapsed = Double(max(0, now - bucket.updated))
        let tokens = min(Double(bucket.rate.capacity), bucket.tokens + elapsed * Double(bucket.rate.perMinute) / 60_000)
        return Bucket(tokens: tokens, updated: max(now, bucket.updated), rate: bucket.rate)
    }

    private static func wait(for bucket: Bucket) -> Int64 {
        let missing = 1 - bucket.tokens
        return max(1, Int64((missing * 60_000 / Double(bucket.rate.perMinute)).rounded(.up)))
    }

    private func evict(_ buckets: inout [String: Bucket], now: Int64) {
        buckets = buckets.filter { Self.refilled($0.value, now: now).tokens < Double($0.value.rate.capacity) }
        guard buckets.count >= maximumKeys else { return }
        let stalest = buckets.sorted { $0.value.updated < $1.value.updated }.prefix(maximumKeys / 4).map(\.key)
        for key in stalest { buckets[key] = nil }
    }
}

/// Tokens this node leased from the store's shared budgets (`SharedBudgetLedger`), by key,
/// spent one a request. A lease lasts `lifetime` at most: what is left then is dropped (it was
/// taken from the budget already, so dropping it only leaves the budget tighter), so a node
/// never spends, long after, tokens the bucket has since refilled past.
public final class BudgetLeases: Sendable {
    public struct Lease: Sendable, Hashable {
        /// Tokens still leased to this node.
        public var tokens: Int
        /// What the shared bucket held after the lease was taken.
        public var left: Double
        public var takenAt: Int64
    }

    public static let lifetime: Int64 = 10_000
    let maximumKeys: Int
    private let leases = Mutex<[String: Lease]>([:])
    /// Lease requests on their way to the store, by key: at most one a key at a time.
    private let requests = Mutex<[String: Task<BudgetGrant, any Error>]>([:])

    public init(maximumKeys: Int = 100_000) { self.maximumKeys = max(4, maximumKeys) }

    /// A token of `key` from this node's lease, leasing a twentieth of the budget (`capacity`
    /// a minute) from `ledger` when the lease is spent or too old.
    ///
    /// Requests that find the lease spent at the same moment wait for one lease request and
    /// share what it brings. When each took a lease of its own, each new lease replaced the
    /// last: 32 clients of one user at once spent 32 twentieths of the shared budget for a
    /// twentieth's worth of requests, and were refused `THROTTLED` far below the published rate.
    public func spend(_ key: String, capacity: Int, ledger: any SharedBudgetLedger, now: Int64) async throws
        -> TokenBuckets.Spend
    {
        let perMillisecond = Double(capacity) / 60_000
        func outcome(leased: Int, left: Double, admitted: Bool) -> TokenBuckets.Spend {
            let held = Double(leased) + left
            return TokenBuckets.Spend(
                admitted: admitted, remaining: Int(held), untilFull: Int64((max(0, Double(capacity) - held) / perMillisecond).rounded(.up)),
                wait: admitted ? 0 : max(1, Int64(((1 - left) / perMillisecond).rounded(.up))))
        }
        var left = 0.0
        // A lease others spent before this caller got a token of it: one more is asked for.
        for _ in 0..<2 {
            if let lease = spend(key, now: now) { return outcome(leased: lease.tokens, left: lease.left, admitted: true) }
            let request = requests.withLock { requests in
                if let running = requests[key] { return running }
                // Inserted under the lock the task takes to remove itself: never left behind.
                let request = Task { () throws -> BudgetGrant in
                    defer { _ = self.requests.withLock { $0.removeValue(forKey: key) } }
                    let grant = try await ledger.take(key, wanted: max(1, capacity / 20), capacity: capacity, perMinute: capacity, now: now)
                    if grant.granted > 0 { self.add(key, tokens: grant.granted, left: grant.left, now: now) }
                    return grant
                }
                requests[key] = request
                return request
            }
            let grant = try await request.value
            left = grant.left
            guard grant.granted > 0 else { break }
        }
        return outcome(leased: 0, left: left, admitted: false)
    }

    /// Spends a leased token of `key`; nil when there is none (or the lease is too old).
    public func spend(_ key: String, now: Int64) -> Lease? {
        leases.withLock { leases in
            guard var lease = leases[key], lease.tokens > 0, now - lease.takenAt < Self.lifetime else { return nil }
            lease.tokens -= 1
            leases[key] = lease
            return lease
        }
    }

    /// Adds a new lease of `tokens` on `key` to what is left of a lease still valid (an older
    /// one is replaced).
    public func add(_ key: String, tokens: Int, left: Double, now: Int64) {
        leases.withLock { leases in
            if leases[key] == nil, leases.count >= maximumKeys {
                leases = leases.filter { now - $0.value.takenAt < Self.lifetime && $0.value.tokens > 0 }
                if leases.count >= maximumKeys { leases.removeAll() }
            }
            var lease = Lease(tokens: tokens, left: left, takenAt: now)
            if let kept = leases[key], now - kept.takenAt < Self.lifetime { lease.tokens += kept.tokens }
            leases[key] = lease
        }
    }
}
