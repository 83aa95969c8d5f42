import NimbusWire
import Synchronization

/// How fast sign-ins may come (docs/limits.md). Per node: each `nimbus serve` counts its own.
public struct SignInLimits: Sendable, Hashable {
    /// Sign-in attempts one client address may make, whatever their outcome: a burst of this
    /// many, then this many a minute.
    public var attemptsPerAddressPerMinute = 30
    /// Wrong passwords one account may be sent from addresses it is not known at (see
    /// `knownDeviceDays`), all of them together: a burst of this many, then this many a minute.
    /// Past them, sign-ins to the account from unknown addresses are refused, right password
    /// or not, until the next one is allowed (at most 60 / this many seconds later), so guessing
    /// from many addresses is as slow as from one.
    public var failuresPerAccountPerMinute = 10
    /// Wrong passwords one account may be sent from one address: a burst of this many, then this
    /// many a minute. This is all a known device is held to, so strangers guessing elsewhere
    /// cannot lock its owner out.
    public var failuresPerAccountAndAddressPerMinute = 10
    /// How long a successful sign-in makes its address known for that account.
    public var knownDeviceDays = 30
    /// Wrong passwords past this many within an allowance are answered only after `slowdown`.
    public var failuresBeforeSlowdown = 5
    public var slowdown: Duration = .seconds(1)

    public init() {}
}

/// The sign-in limits' bookkeeping, in token buckets: attempts per client address; wrong
/// passwords per account-and-address pair; wrong passwords per account from addresses it is not
/// known at. An address becomes known for an account when a sign-in to it succeeds there, and
/// a request that carries a live session of the account is known wherever it comes from.
///
/// Why three: counting wrong passwords per account alone let strangers keep its owner out (a
/// guess every half second from changing addresses refused the owner's right password 5 times
/// in 8). Counting per address alone let a botnet guess without bound. Here the owner's known
/// device is held only to its own allowance, strangers share the account's, and every address
/// to its attempts: brute force gains nothing, the owner loses nothing.
final class SignInThrottle: Sendable {
    let limits: SignInLimits
    private let addresses: TokenBuckets
    private let accounts: TokenBuckets
    private let pairs: TokenBuckets
    /// Account-and-address pairs that signed in successfully, with when they last did.
    private let known = Mutex(KnownDevices())

    init(_ limits: SignInLimits) {
        self.limits = limits
        addresses = TokenBuckets(.init(capacity: limits.attemptsPerAddressPerMinute, perMinute: limits.attemptsPerAddressPerMinute))
        accounts = TokenBuckets(.init(capacity: limits.failuresPerAccountPerMinute, perMinute: limits.failuresPerAccountPerMinute))
        let perPair = limits.failuresPerAccountAndAddressPerMinute
        pairs = TokenBuckets(.init(capacity: perPair, perMinute: perPair))
    }

    /// What a sign-in is held to, decided before its password is checked.
    struct Admission: Sendable {
        /// The account's name as counted: "Alice" and "alice" are one account, so case cannot
        /// buy tries.
        let account: String
        let address: String?
        /// The address is known for the account, or the request carries its live session.
        let knownDevice: Bool

        init(account: String, address: String?, knownDevice: Bool) {
            self.account = account.lowercased()
            self.address = address
            self.knownDevice = knownDevice
        }
    }

    /// Counts an attempt from `address` for `account`; `THROTTLED` when the address, or the
    /// allowance the attempt is held to, is spent. `hasSession`: the request carries a live
    /// session of this account.
    func admit(address: String?, account: String, hasSession: Bool = false, now: Int64) throws(CloudKitError) -> Admission {
        if let address, let wait = addresses.take(address, now: now) {
            throw Self.throttled("too many sign-in attempts from \(address)", wait: wait)
        }
        var admission = Admission(account: account, address: address, knownDevice: hasSession)
        let account = admission.account
        if !hasSession, isKnown(account: account, address: address, now: now) {
            admission = Admission(account: account, address: address, knownDevice: true)
        }
        if let address, let wait = pairs.wait(Self.pairKey(account, address), now: now) {
            throw Self.throttled("too many wrong passwords for this account from \(address)", wait: wait)
        }
        if !admission.knownDevice, let wait = accounts.wait(account, now: now) {
            throw Self.throttled(
                "too many wrong passwords for this account from addresses it has not signed in from (a device that signed in here before is let through)",
                wait: wait)
        }
        return admission
    }

    /// Counts a wrong password; returns how long to hold the answer back.
    func failed(_ admission: Admission, now: Int64) -> Duration {
        var spent = 0
        if let address = admission.address {
            let key = Self.pairKey(admission.account, address)
            _ = pairs.take(key, now: now)
            spent = limits.failuresPerAccountAndAddressPerMinute - pairs.available(key, now: now)
        }
        if !admission.knownDevice {
            _ = accounts.take(admission.account, now: now)
            spent = max(spent, limits.failuresPerAccountPerMinute - accounts.available(admission.account, now: now))
        }
        return spent > limits.failuresBeforeSlowdown ? limits.slowdown : .zero
    }

    /// Remembers that the account signed in from the admission's address.
    func succeeded(_ admission: Admission, now: Int64) {
        guard let address = admission.address else { return }
        known.withLock { $0.remember(Self.pairKey(admission.account, address), at: now) }
    }

    private func isKnown(account: String, address: String?, now: Int64) -> Bool {
        guard let address else { return false }
        let oldest = now - Int64(limits.knownDeviceDays) * 86_400_000
        return known.withLock { $0.lastSignIn(Self.pairKey(account, address)).map { $0 >= oldest } ?? false }
    }

    private static func pairKey(_ account: String, _ address: String) -> String { "\(account)\u{0}\(address)" }

    private static func throttled(_ what: String, wait milliseconds: Int64) -> CloudKitError {
        var error = CloudKitError(.throttled, "\(what); try again after retryAfter seconds")
        error.retryAfter = Int((milliseconds + 999) / 1000)
        return error
    }
}

/// Successful sign-ins by account and address, in memory, at most `maximum` of them: a full
/// table forgets the quarter signed in longest ago (they are then strangers again, held to the
/// account's shared allowance, never locked out for good).
struct KnownDevices {
    static let maximum = 100_000
    private var lastSignIns: [String: Int64] = [:]

    func lastSignIn(_ key: String) -> Int64? { lastSignIns[key] }

    mutating func remember(_ key: String, at time: Int64) {
        if lastSignIns[key] == nil, lastSignIns.count >= Self.maximum {
            for stale in lastSignIns.sorted(by: { $0.value < $1.value }).prefix(Self.maximum / 4) { lastSignIns[stale.key] = nil }
        }
        lastSignIns[key] = time
    }
}
