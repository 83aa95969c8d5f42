/// Request budgets every node on one store spends from together (docs/limits.md): with several
/// `nimbus serve` nodes on one PostgreSQL, a caller's budget is one budget, not one per node.
///
/// The store keeps one token bucket per budget key (a capacity, refilled continuously at a rate
/// a minute, as `TokenBuckets` does in memory). Nodes do not ask it per request: each takes a
/// lease of several tokens at a time (`NimbusService` spends them locally), so the store is
/// written once per lease. Tokens leased are spent from the shared bucket at once, so all the
/// nodes together never admit more than the budget; a lease a node does not use up before it
/// expires is lost, which can only make the budget a little tighter, never looser.
public protocol SharedBudgetLedger: Sendable {
    /// Takes up to `wanted` whole tokens from the bucket `key` as it stands at `now`
    /// (milliseconds; a bucket never seen is full).
    func take(_ key: String, wanted: Int, capacity: Int, perMinute: Int, now: Int64) async throws -> BudgetGrant
}

/// What a lease request got.
public struct BudgetGrant: Sendable, Hashable {
    /// Tokens granted (0 when the bucket had no whole token).
    public var granted: Int
    /// The bucket's tokens after the grant (fractions included).
    public var left: Double

    public init(granted: Int, left: Double) {
        self.granted = granted
        self.left = left
    }
}

/// A driver whose store can hold shared budgets (PostgreSQL); a single-process store (SQLite)
/// has one node, whose memory is the whole truth.
public protocol SharedBudgetsStoring: Sendable {
    var sharedBudgets: (any SharedBudgetLedger)? { get }
}

/// A unit-of-work driver shares budgets where its engine does.
extension UnitOfWorkDriver: SharedBudgetsStoring {
    public var sharedBudgets: (any SharedBudgetLedger)? { (base as? any SharedBudgetsStoring)?.sharedBudgets }
}
