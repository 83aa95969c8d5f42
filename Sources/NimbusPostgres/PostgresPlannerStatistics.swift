import Logging
import PostgresNIO
import Synchronization

/// Statistics for PostgreSQL's planner on tables autovacuum has not analyzed yet.
///
/// Without statistics the planner guesses every condition's selectivity (half a percent for an
/// equality), so a query naming zone, type and field is estimated at one row whatever the
/// table holds. On a new deployment a filtered, sorted page over 4,400 records then ran as
/// nested loops, 7 million rows compared for 201 kept: 23 s instead of milliseconds, refused as
/// `queryTooExpensive`. Autovacuum analyzes such a table within `autovacuum_naptime` (a minute
/// by default, spread over every database of the cluster), so an app that imports its data and
/// queries it at once, or a table that grew past twice its size since its last analysis,
/// answered badly in between.
///
/// So the node looks for itself: when it starts, and after its writes at most every
/// `interval`, one statement asks whether a table that queries read has changed by at least
/// `minimumChanges` rows and was never analyzed or has changed by more rows than it held then;
/// those are analyzed in the background. `SKIP_LOCKED` leaves a table that another node or
/// autovacuum is analyzing to them, so nobody waits. A deployment whose statistics are current
/// pays that one statement every `interval` while it writes. These statements are the node's
/// upkeep, not a request's, so `statementObserver` (which counts requests' round trips) does not
/// see them.
final class PostgresPlannerStatistics: Sendable {
    /// The tables record queries read and join (`PostgresQuerySQL`).
    static let tables = ["records", "field_index", "pair_index", "record_tokens"]
    static let interval: Duration = .seconds(2)
    /// Changes below this leave a table alone: nested loops over a few hundred rows cost little,
    /// whatever the estimates.
    static let minimumChanges = 500

    private struct State {
        var checkedAt: ContinuousClock.Instant?
        var checking = false
    }
    private let state = Mutex(State())

    /// Checks (in the background) unless a check is running or ran within `interval`.
    func noteChanges(on storage: PostgresStorage) {
        let now = ContinuousClock.now
        let starts = state.withLock { state -> Bool in
            guard !state.checking, state.checkedAt.map({ now - $0 >= Self.interval }) ?? true else { return false }
            state.checking = true
            state.checkedAt = now
            return true
        }
        guard starts else { return }
        // Detached: a write inside a zone's turn must not lend its transaction's connection
        // (`ZoneTurn.held`, a task-local) to upkeep, nor its trace.
        Task.detached { [self] in
            defer { state.withLock { $0.checking = false } }
            do {
                let stale = try await storage.upkeep(
                    """
                    SELECT s.relname::text FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
                    WHERE s.relid = ANY(ARRAY(SELECT to_regclass(t)::oid FROM unnest(\(Self.tables)::text[]) t))
                      AND s.n_mod_since_analyze >= \(Int64(Self.minimumChanges))
                      AND ((s.last_analyze IS NULL AND s.last_autoanalyze IS NULL) OR s.n_mod_since_analyze > c.reltuples)
                    """
                ).map { try $0.decode(String.self) }.filter(Self.tables.contains)
                guard !stale.isEmpty else { return }
                try await storage.upkeep(PostgresQuery(unsafeSQL: "ANALYZE (SKIP_LOCKED) " + stale.joined(separator: ", ")))
                storage.logger.info("analyzed \(stale.joined(separator: ", ")): the planner had no statistics for what they hold")
            } catch {
                storage.logger.info("planner statistics not checked: \(String(reflecting: error))")
            }
        }
    }
}
