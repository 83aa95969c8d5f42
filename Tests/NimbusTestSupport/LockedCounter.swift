import Foundation

/// A count several tasks or threads add to.
public final class LockedCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0

    public init() {}

    public var value: Int { lock.withLock { count } }

    /// Adds one; the count this call made.
    @discardableResult public func increment() -> Int { lock.withLock { count += 1; return count } }
}
