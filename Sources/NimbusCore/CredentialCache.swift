import Foundation
import NimbusStorage

/// Recently read API tokens and sessions, so most requests authenticate without a storage
/// round trip (on a 2-core machine that hop costs a fifth of a single-record save).
///
/// Entries live `lifetimeMilliseconds` (2 s). Revocations through this process clear the
/// cache at once; a revocation made by another process (the CLI beside a running server)
/// takes effect within that lifetime.
final class CredentialCache: @unchecked Sendable {
    struct Session {
        let row: SessionRow
        let user: UserRow
    }

    static let lifetimeMilliseconds: Int64 = 2_000
    /// Beyond this many entries the cache starts over rather than grow without bound.
    static let capacity = 10_000

    private let lock = NSLock()
    private var tokens: [String: (row: APITokenRow, readAt: Int64)] = [:]
    private var sessions: [String: (session: Session, readAt: Int64)] = [:]

    func apiToken(hash: String, now: Int64) -> APITokenRow? {
        lock.lock()
        defer { lock.unlock() }
        guard let entry = tokens[hash], now - entry.readAt < Self.lifetimeMilliseconds else { return nil }
        return entry.row
    }

    func session(hash: String, now: Int64) -> Session? {
        lock.lock()
        defer { lock.unlock() }
        guard let entry = sessions[hash], now - entry.readAt < Self.lifetimeMilliseconds else { return nil }
        return entry.session
    }

    func remember(_ row: APITokenRow, now: Int64) {
        lock.lock()
        defer { lock.unlock() }
        if tokens.count >= Self.capacity { tokens.removeAll() }
        tokens[row.tokenHash] = (row, now)
    }

    func remember(_ session: Session, now: Int64) {
        lock.lock()
        defer { lock.unlock() }
        if sessions.count >= Self.capacity { sessions.removeAll() }
        sessions[session.row.tokenHash] = (session, now)
    }

    func clear() {
        lock.lock()
        tokens.removeAll()
        sessions.removeAll()
        lock.unlock()
    }
}
