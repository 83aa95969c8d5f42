import Foundation
import NimbusStorage
import PostgresNIO

/// `SharedBudgetLedger` on PostgreSQL: one row per budget key in `request_budgets`, changed by
/// one statement that locks the row, refills it for the time since its last change, and takes
/// what the lease asks for (docs/limits.md, "Several nodes"). The row keeps the capacity it was
/// last spent at: a budget raised since is there at once, a lowered one caps what is left (as
/// `TokenBuckets` does in memory).
///
/// The table is UNLOGGED: a crash or a failover empties it, which gives every caller a full
/// budget once, and in exchange its writes skip the WAL (they happen once per lease, not per
/// request, but on a busy server that is still many).
struct PostgresSharedBudgets: SharedBudgetLedger {
    let storage: PostgresStorage

    /// How long a bucket is kept after its last change: a bucket refills whole within a minute
    /// (its capacity is its rate a minute), so an older one holds nothing a new one would not.
    static let keptMilliseconds: Int64 = 120_000

    func take(_ budgetKey: String, wanted: Int, capacity: Int, perMinute: Int, now: Int64) async throws -> BudgetGrant {
        // Keys separate their parts with NUL, which PostgreSQL's text cannot hold: the unit
        // separator stands in (no container name, address or id holds one either).
        let key = budgetKey.replacingOccurrences(of: "\u{0}", with: "\u{1F}")
        let full = Double(capacity)
        let perMillisecond = Double(perMinute) / 60_000
        let asked = Double(max(0, wanted))
        for _ in 0..<2 {
            let rows = try await storage.rows(
                """
                WITH old AS (
                    SELECT key, least(
                        \(full), tokens + greatest(0, \(full) - capacity) + greatest(0, \(now) - updated_at) * \(perMillisecond)
                    ) AS refilled
                    FROM request_budgets WHERE key = \(key) FOR UPDATE
                )
                UPDATE request_budgets b SET tokens = old.refilled - least(floor(old.refilled), \(asked)),
                    capacity = \(full), updated_at = greatest(b.updated_at, \(now))
                FROM old WHERE b.key = old.key
                RETURNING least(floor(old.refilled), \(asked))::bigint, b.tokens
                """)
            if let row = rows.first {
                let (granted, left) = try row.decode((Int64, Double).self)
                return BudgetGrant(granted: Int(granted), left: left)
            }
            // A key never seen starts full. Buckets long unchanged go as new ones come (a
            // bucket is made once per caller and minute at most, so this stays cheap).
            let granted = min(max(0, wanted), capacity)
            let inserted = try await storage.rows(
                """
                WITH stale AS (DELETE FROM request_budgets WHERE updated_at < \(now - Self.keptMilliseconds))
                INSERT INTO request_budgets (key, tokens, capacity, updated_at) VALUES (\(key), \(full - Double(granted)), \(full), \(now))
                ON CONFLICT (key) DO NOTHING RETURNING 1
                """)
            if !inserted.isEmpty { return BudgetGrant(granted: granted, left: full - Double(granted)) }
            // Another node made it between the two statements: take from theirs.
        }
        throw StorageError.unavailable("the shared request budget '\(key)' changed under two attempts to take from it")
    }
}

extension PostgresStorage: SharedBudgetsStoring {
    public var sharedBudgets: (any SharedBudgetLedger)? { PostgresSharedBudgets(storage: self) }
}

extension PostgresCoarseStorage: SharedBudgetsStoring {
    public var sharedBudgets: (any SharedBudgetLedger)? { storage.sharedBudgets }
}
