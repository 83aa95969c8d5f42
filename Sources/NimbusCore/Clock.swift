import Foundation

/// Where Nimbus reads the time, so tests can move it (session expiry, timestamps).
public protocol WallClock: Sendable {
    /// Milliseconds since 1970-01-01T00:00:00Z.
    func nowMilliseconds() -> Int64
}

public struct SystemClock: WallClock {
    public init() {}

    public func nowMilliseconds() -> Int64 {
        Int64((Date().timeIntervalSince1970 * 1000).rounded(.down))
    }
}

/// A clock a test sets by hand.
public final class ManualClock: WallClock, @unchecked Sendable {
    private let lock = NSLock()
    private var now: Int64

    public init(milliseconds: Int64 = 1_700_000_000_000) { now = milliseconds }

    public func nowMilliseconds() -> Int64 {
        lock.lock()
        defer { lock.unlock() }
        return now
    }

    public func advance(milliseconds: Int64) {
        lock.lock()
        now += milliseconds
        lock.unlock()
    }
}
