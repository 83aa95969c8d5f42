import Foundation
import NimbusStorage

/// Recently read API tokens, sessions and server-to-server keys, so most requests authenticate without a storage
/// round trip (on a 2-core machine that hop costs a fifth of a single-record save).
///
/// Entries live `lifetimeMilliseconds` (2 s). Revocations through this process clear the
/// cache at once; a revocation made by another process (the CLI beside a running server)
/// takes effect within that lifetime.
final class CredentialCache: Sendable {
    struct Session {
        let row: SessionRow
        let user: UserRow
        /// The user's record name in the session's container: an HMAC, worked out when the
        /// session is cached rather than on every request it signs in (`DerivedKeys`).
        let userRecordName: String
    }

    static let lifetimeMilliseconds: Int64 = 2_000
    /// Beyond this many entries a cache starts over rather than grow without bound.
    static let capacity = 10_000

    /// API tokens by token hash.
    let tokens = ExpiringCache<APITokenRow>(lifetime: lifetimeMilliseconds, capacity: capacity)
    /// Sessions (with their users) by token hash.
    let sessions = ExpiringCache<Session>(lifetime: lifetimeMilliseconds, capacity: capacity)

    /// Server-to-server keys by key ID.
    let serverKeys = ExpiringCache<ServerKeyRow>(lifetime: lifetimeMilliseconds, capacity: capacity)

    func clear() {
        tokens.clear()
        sessions.clear()
        serverKeys.clear()
    }
}

/// A lock-protected dictionary whose entries expire `lifetime` milliseconds after they were read.
final class ExpiringCache<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var entries: [String: (value: Value, readAt: Int64)] = [:]
    private let lifetime: Int64
    private let capacity: Int

    init(lifetime: Int64, capacity: Int) {
        self.lifetime = lifetime
        self.capacity = capacity
    }

    func value(for key: String, now: Int64) -> Value? {
        lock.lock()
        defer { lock.unlock() }
        guard let entry = entries[key], now - entry.readAt < lifetime else { return nil }
        return entry.value
    }

    func remember(_ value: Value, for key: String, now: Int64) {
        lock.lock()
        defer { lock.unlock() }
        if entries.count >= capacity { entries.removeAll() }
        entries[key] = (value, now)
    }

    func clear() {
        lock.lock()
        entries.removeAll()
        lock.unlock()
    }
}

/// Logical databases already read, by key (see `NimbusService.databaseForReading`).
final class KnownDatabases: @unchecked Sendable {
    private let lock = NSLock()
    private var rows: [DatabaseKey: DatabaseRow] = [:]

    func row(for key: DatabaseKey) -> DatabaseRow? {
        lock.lock()
        defer { lock.unlock() }
        return rows[key]
    }

    func remember(_ row: DatabaseRow) {
        lock.lock()
        defer { lock.unlock() }
        // Bounded like the credential caches: start over rather than grow without limit.
        if rows.count >= CredentialCache.capacity { rows = [:] }
        rows[row.key] = row
    }
}
