import Foundation
import GRDB

/// Prepared query statements, kept per connection up to a bound.
///
/// A query's SQL text depends on its shape (which filters, sorts and driver), not on its
/// values, which are bound; apps send the same few shapes again and again, and preparing the
/// statement each time was a measurable part of a list request. But shapes are chosen by
/// clients, without bound, and GRDB's statement cache never forgets: so each connection may
/// cache `maximumShapes` distinct texts, and the one past that clears its caches and starts
/// counting again.
final class QueryStatementCache: @unchecked Sendable {
    static let shared = QueryStatementCache()
    static let maximumShapes = 256

    private let lock = NSLock()
    /// The texts each connection has cached since it last cleared.
    private var shapes: [ObjectIdentifier: Set<String>] = [:]

    func statement(_ sql: String, in db: Database) throws -> Statement {
        let connection = ObjectIdentifier(db)
        lock.lock()
        var known = shapes[connection, default: []]
        var mustClear = false
        if !known.contains(sql) {
            mustClear = known.count >= Self.maximumShapes
            if mustClear { known.removeAll() }
            known.insert(sql)
            shapes[connection] = known
        }
        lock.unlock()
        if mustClear { db.releaseMemory() }
        return try db.cachedStatement(sql: sql)
    }
}
