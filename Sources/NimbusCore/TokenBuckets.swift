import Synchronization

/// Token buckets by key, in this node's memory: each key may spend `rate.capacity` at once and
/// gets `rate.perMinute` back a minute, continuously. The table holds at most `maximumKeys`
/// buckets, so a caller inventing keys (names, addresses) cannot grow it without bound: a full
/// table first forgets buckets that have refilled (they hold nothing a fresh one would not),
/// then the quarter least recently used.
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
            return Int(refilled(bucket, now: now).tokens)
        }
    }

    /// Nil when `key` has a token at `now`, else the milliseconds until it has; spends nothing.
    public func wait(_ key: String, now: Int64) -> Int64? {
        buckets.withLock { buckets in
            guard let bucket = buckets[key].map({ refilled($0, now: now) }), bucket.tokens < 1 else { return nil }
            return wait(for: bucket)
        }
    }

    /// Spends a token of `key`; nil when there was one, else the milliseconds until there is.
    public func take(_ key: String, now: Int64) -> Int64? {
        buckets.withLock { buckets in
            var bucket = buckets[key].map { refilled($0, now: now) } ?? Bucket(tokens: Double(rate.capacity), updated: now)
            guard bucket.tokens >= 1 else {
                buckets[key] = bucket
                return wait(for: bucket)
            }
            bucket.tokens -= 1
            if buckets[key] == nil, buckets.count >= maximumKeys { evict(&buckets, now: now) }
            buckets[key] = bucket
            return nil
        }
    }

    /// How many keys the table holds (tests, diagnostics).
    public var count: Int { buckets.withLock { $0.count } }

    private func refilled(_ bucket: Bucket, now: Int64) -> Bucket {
        let elapsed = Double(max(0, now - bucket.updated))
        let tokens = min(Double(rate.capacity), bucket.tokens + elapsed * Double(rate.perMinute) / 60_000)
        return Bucket(tokens: tokens, updated: max(now, bucket.updated))
    }

    private func wait(for bucket: Bucket) -> Int64 {
        let missing = 1 - bucket.tokens
        return max(1, Int64((missing * 60_000 / Double(rate.perMinute)).rounded(.up)))
    }

    private func evict(_ buckets: inout [String: Bucket], now: Int64) {
        let capacity = Double(rate.capacity)
        buckets = buckets.filter { refilled($0.value, now: now).tokens < capacity }
        guard buckets.count >= maximumKeys else { return }
        let stalest = buckets.sorted { $0.value.updated < $1.value.updated }.prefix(maximumKeys / 4).map(\.key)
        for key in stalest { buckets[key] = nil }
    }
}
