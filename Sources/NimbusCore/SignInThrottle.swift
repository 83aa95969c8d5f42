import NimbusWire

/// How fast sign-ins may come (docs/limits.md). Per node: each `nimbus serve` counts its own.
public struct SignInLimits: Sendable, Hashable {
    /// Sign-in attempts one client address may make, whatever their outcome: a burst of this
    /// many, then this many a minute.
    public var attemptsPerAddressPerMinute = 30
    /// Wrong passwords one account may be sent, from anywhere: a burst of this many, then this
    /// many a minute. Past them the account's sign-ins are refused, right password or not,
    /// until the next one is allowed (at most 60 / this many seconds later), so guessing from
    /// many addresses is as slow as from one.
    public var failuresPerAccountPerMinute = 10
    /// Wrong passwords past this many within the account's allowance are answered only after
    /// `slowdown`.
    public var failuresBeforeSlowdown = 5
    public var slowdown: Duration = .seconds(1)

    public init() {}
}

/// The sign-in limits' bookkeeping: a token bucket per client address (attempts) and per
/// account (wrong passwords).
final class SignInThrottle: Sendable {
    let limits: SignInLimits
    private let addresses: TokenBuckets
    private let accounts: TokenBuckets

    init(_ limits: SignInLimits) {
        self.limits = limits
        addresses = TokenBuckets(.init(capacity: limits.attemptsPerAddressPerMinute, perMinute: limits.attemptsPerAddressPerMinute))
        accounts = TokenBuckets(.init(capacity: limits.failuresPerAccountPerMinute, perMinute: limits.failuresPerAccountPerMinute))
    }

    /// Counts an attempt from `address` for `account`; `THROTTLED` when either is over its limit.
    func admit(address: String?, account: String, now: Int64) throws(CloudKitError) {
        if let address, let wait = addresses.take(address, now: now) {
            throw Self.throttled("too many sign-in attempts from \(address)", wait: wait)
        }
        if let wait = accounts.wait(Self.key(account), now: now) {
            throw Self.throttled("too many wrong passwords for this account", wait: wait)
        }
    }

    /// Counts a wrong password for `account`; returns how long to hold the answer back.
    func failed(account: String, now: Int64) -> Duration {
        _ = accounts.take(Self.key(account), now: now)
        let spent = limits.failuresPerAccountPerMinute - accounts.available(Self.key(account), now: now)
        return spent > limits.failuresBeforeSlowdown ? limits.slowdown : .zero
    }

    /// Accounts are names; "Alice" and "alice" are counted together, so case cannot buy tries.
    private static func key(_ account: String) -> String { account.lowercased() }

    private static func throttled(_ what: String, wait milliseconds: Int64) -> CloudKitError {
        var error = CloudKitError(.throttled, "\(what); try again after retryAfter seconds")
        error.retryAfter = Int((milliseconds + 999) / 1000)
        return error
    }
}
