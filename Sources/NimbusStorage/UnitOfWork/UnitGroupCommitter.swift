import Synchronization

/// One write waiting for its group: its closure (run once per attempt of the group, over the
/// group's unit) and how its caller learns the outcome.
struct PendingWrite: Sendable {
    let run: @Sendable (UnitOfWork) throws -> Void
    let complete: @Sendable (Result<Void, any Error>) -> Void
}

/// Group commit for units of work, as `GroupCommitter` does for SQLite's transactions.
///
/// The writes that arrive while a group is being decided and applied form the next group. A
/// group is decided as one unit of work: its writes run one after the other over the same
/// loaded rows (one load for all of them), each undone alone when it fails, each seeing the
/// writes before it; then the group's changes go to the engine in one `apply` with the checks
/// they were decided from. Every writer is resumed after that apply, so an acknowledged write
/// is committed.
///
/// Groups form per pipeline: a write that names its zone (`StorageDriver.write(inZone:_:)`,
/// records/modify) joins that zone's, every other write the shared one. Pipelines run at once,
/// so a busy zone's groups (or its collisions with another node) never hold up another zone's
/// write; units are checked per zone (`UnitOfWorkChanges.zoneSequences`), so writers of
/// different zones never collide either.
///
/// Writes of one pipeline never collide with one another (a group is decided from the rows
/// the group before it committed), so with many writers on one zone none fails and runs
/// again, and a busy zone costs a load and an apply per group, not per write. Writes from
/// other nodes (or this node's other pipelines) are caught by `apply`'s checks: the group is
/// decided again from fresh rows (up to `decisionsAfterCollision` times), and past that each
/// writer gets `serializationFailure`, which `RetryingStorage` retries. On an engine with
/// zone turns (`ZoneTurns`, PostgreSQL), a zone pipeline decides again in the zone's turn, and
/// keeps taking turns while it collides, so writers of one zone on several nodes queue in the
/// engine instead of outrunning one another's decisions.
///
/// One failing write never fails the others: when an apply fails for another reason than a
/// collision or an engine that is busy or gone, the group's writes are decided and applied
/// again one by one, so the failure reaches only the write that caused it.
final class UnitGroupCommitter: Sendable {
    /// Writes per group at most, so one apply cannot grow without limit (a 200-record batch
    /// is one write).
    static let maximumWritesPerGroup = 256

    private let units: UnitRunner
    private let state = Mutex(State())

    /// Writes waiting, by pipeline (nil: the shared one). A pipeline is here while it drains,
    /// and gone once it has nothing left, so idle zones cost nothing.
    private struct State {
        var pending: [ZoneOrder?: [PendingWrite]] = [:]
        /// Zone pipelines whose group in flight is applied, and nothing was waiting for its
        /// writes to be decided ahead (`nextGroupWhileApplying`): resumed with false by the
        /// next write to arrive, with true when the apply ends first.
        var waitingForWrites: [ZoneOrder?: CheckedContinuation<Bool, Never>] = [:]
        /// Zone pipelines whose group in flight has been applied.
        var applied: Set<ZoneOrder?> = []
        /// What each zone's last group left, for the zone's next write (even after its
        /// pipeline drained) to be decided over without a load (`lastRows(of:)`).
        var lastRows: [ZoneOrder: LastRows] = [:]
    }

    /// A zone's rows as its last group left them, or a zone where deciding over them failed
    /// lately (another writer is there) and they are not kept for a while.
    private enum LastRows {
        case rows(DecidedRows, kept: ContinuousClock.Instant)
        case contended(until: ContinuousClock.Instant)
    }

    /// How long a zone's rows are kept for its next write, and for how many zones at most: a
    /// client's next write to its zone comes within moments, and what is kept is a few rows a
    /// zone (the records a group wrote only up to `recordsKept`).
    static let rowsKeptFor: Duration = .seconds(5)
    static let zonesKept = 1_024
    static let recordsKept = 256

    init(units: UnitRunner) { self.units = units }

    func submit(_ write: PendingWrite, pipeline: ZoneOrder?) {
        let (startsDrain, waiting) = state.withLock { state in
            guard state.pending[pipeline] != nil else {
                state.pending[pipeline] = [write]
                return (true, nil as CheckedContinuation<Bool, Never>?)
            }
            state.pending[pipeline]!.append(write)
            return (false, state.waitingForWrites.removeValue(forKey: pipeline))
        }
        if startsDrain { Task { await drain(pipeline) } }
        waiting?.resume(returning: false)
    }

    /// The pipeline's next group; none when it has nothing left (it is gone then, unless
    /// `staying`: a group of it is still to be applied).
    private func takeGroup(_ pipeline: ZoneOrder?, staying: Bool = false) -> [PendingWrite] {
        state.withLock { state in
            let waiting = state.pending[pipeline] ?? []
            guard !waiting.isEmpty else {
                if !staying {
                    state.pending[pipeline] = nil
                    state.applied.remove(pipeline)
                }
                return []
            }
            let group = Array(waiting.prefix(Self.maximumWritesPerGroup))
            // Left empty rather than removed: the pipeline is still draining this group.
            state.pending[pipeline] = Array(waiting.dropFirst(group.count))
            return group
        }
    }

    /// Commits the pipeline's groups in order until it has none left.
    ///
    /// A zone's pipeline decides its next group while the group before it is applied: over the
    /// rows that group leaves (`DecidedRows`), so the node's decisions and the engine's applies
    /// overlap instead of taking turns. That decision is applied only if the group before was
    /// applied as decided (decided again otherwise), and its zone checks expect what that group
    /// leaves, so a writer elsewhere in between makes its apply refuse it like any collision.
    /// The shared pipeline, a zone's taking turns after colliding, and groups of few records
    /// (`recordsWorthDecidingAhead`) go one group at a time.
    private func drain(_ pipeline: ZoneOrder?) async {
        // A zone pipeline that collided takes the zone's turn for every group until
        // `turnsAfterCollision` has passed without another collision.
        var takesTurnsUntil: ContinuousClock.Instant?
        func note(_ committed: Committed) {
            if committed.collided { takesTurnsUntil = .now + Self.turnsAfterCollision }
        }
        // Taken while the group before was applied, and decided over its rows if that went well.
        var ahead: (group: [PendingWrite], decided: DecidedGroup?)?
        while true {
            let group = ahead?.group ?? takeGroup(pipeline)
            let decidedAhead = ahead?.decided
            ahead = nil
            if group.isEmpty { return }
            let takesTurns = takesTurnsUntil.map { ContinuousClock.now < $0 } ?? false
            guard pipeline != nil, !takesTurns else {
                note(await commit(group, in: pipeline, takingTurns: takesTurns))
                continue
            }
            let decided: DecidedGroup
            if let decidedAhead {
                decided = decidedAhead
            } else {
                do {
                    decided = try await units.decide(group, after: lastRows(of: pipeline), handingOnRows: true)
                } catch {
                    // The rows could not be loaded (the engine is down or slow), as in `commit`.
                    fail(group, error)
                    continue
                }
            }
            guard let rows = decided.rows, Self.worthDecidingAhead(decided.changes) else {
                let outcome = await commit(group, in: pipeline, takingTurns: false, decided: decided)
                note(outcome)
                keep(outcome.appliedAsDecided ? decided.rows : nil, of: pipeline)
                continue
            }
            state.withLock { _ = $0.applied.remove(pipeline) }
            async let committed = commitThenSignal(group, in: pipeline, decided: decided)
            let next = await nextGroupWhileApplying(pipeline)
            let nextDecided = next.isEmpty ? nil : try? await units.decide(next, after: rows, handingOnRows: true)
            let outcome = await committed
            note(outcome)
            keep(outcome.appliedAsDecided ? rows : nil, of: pipeline)
            if !next.isEmpty { ahead = (next, outcome.appliedAsDecided ? nextDecided : nil) }
        }
    }

    /// The rows the zone's last group left, if they are kept: its next write is decided over
    /// them, so it loads only what they lack (a create, nothing: `ReadUnit.expect`). Whatever
    /// changed since is caught by the apply's checks, as for a group decided ahead.
    private func lastRows(of pipeline: ZoneOrder?) -> DecidedRows? {
        guard let pipeline else { return nil }
        return state.withLock { state in
            guard case .rows(let rows, let kept) = state.lastRows[pipeline] else { return nil }
            guard kept.duration(to: .now) < Self.rowsKeptFor else {
                state.lastRows[pipeline] = nil
                return nil
            }
            return rows
        }
    }

    /// Keeps `rows` as the zone's last (forgets them when nil: the group was not applied as
    /// decided), unless deciding over kept rows failed there lately.
    private func keep(_ rows: DecidedRows?, of pipeline: ZoneOrder?) {
        guard let pipeline else { return }
        var rows = rows?.applied
        if let kept = rows, kept.records.count > Self.recordsKept { rows?.records = [:] }
        state.withLock { state in
            let now = ContinuousClock.now
            if case .contended(let until) = state.lastRows[pipeline], now < until { return }
            guard let rows else {
                state.lastRows[pipeline] = nil
                return
            }
            if state.lastRows[pipeline] == nil, state.lastRows.count >= Self.zonesKept {
                state.lastRows = state.lastRows.filter { _, last in
                    switch last {
                    case .rows(_, let kept): kept.duration(to: now) < Self.rowsKeptFor
                    case .contended(let until): now < until
                    }
                }
                if state.lastRows.count >= Self.zonesKept { state.lastRows.removeAll() }
            }
            state.lastRows[pipeline] = .rows(rows, kept: now)
        }
    }

    /// Deciding over the zone's kept rows failed: another writer changed the zone, or a create
    /// found its record there. The zone's rows are not kept for a while.
    private func contended(_ pipeline: ZoneOrder?) {
        guard let pipeline else { return }
        state.withLock { $0.lastRows[pipeline] = .contended(until: .now + Self.turnsAfterCollision) }
    }

    /// Records a group writes from which the pipeline decides the next group while it is
    /// applied. Below, the decisions are too short to be worth hiding, and taking the next
    /// group early halves the groups: at 64 clients creating one record each on PostgreSQL,
    /// deciding ahead cost 10% more CPU per create and 3% of throughput, where it gave
    /// 200-record batches 29% (docs/benchmarks.md).
    static let recordsWorthDecidingAhead = 200

    static func worthDecidingAhead(_ changes: UnitOfWorkChanges) -> Bool {
        var records = 0
        for write in changes.writes {
            guard case .putRecord = write else { continue }
            records += 1
            if records >= recordsWorthDecidingAhead { return true }
        }
        return false
    }

    /// A zone pipeline's group committed from `decided`, then its end made known to the drain
    /// waiting for writes to decide ahead.
    private func commitThenSignal(_ group: [PendingWrite], in pipeline: ZoneOrder?, decided: DecidedGroup) async -> Committed {
        let committed = await commit(group, in: pipeline, takingTurns: false, decided: decided)
        let waiting = state.withLock { state in
            state.applied.insert(pipeline)
            return state.waitingForWrites.removeValue(forKey: pipeline)
        }
        waiting?.resume(returning: true)
        return committed
    }

    /// The writes to decide while the pipeline's group in flight is applied: those waiting now
    /// or, when there are none, the first to arrive before the apply ends (none if none does).
    private func nextGroupWhileApplying(_ pipeline: ZoneOrder?) async -> [PendingWrite] {
        while true {
            let next = takeGroup(pipeline, staying: true)
            if !next.isEmpty { return next }
            let applied = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let now: Bool? = state.withLock { state in
                    if state.applied.contains(pipeline) { return true }
                    if state.pending[pipeline]?.isEmpty == false { return false }
                    state.waitingForWrites[pipeline] = continuation
                    return nil
                }
                if let now { continuation.resume(returning: now) }
            }
            if applied { return [] }
        }
    }

    /// How many times a group is decided again after colliding with another node before its
    /// writes are handed back to `RetryingStorage`.
    static let decisionsAfterCollision = 3
    /// How long a zone pipeline keeps taking turns after its last collision: another node
    /// writing the zone now is likely to go on for a while.
    static let turnsAfterCollision: Duration = .seconds(1)

    /// Decisions made again after a collision, and groups decided in a zone's turn (tests and
    /// benchmarks read them).
    let collisions = Atomic<Int>(0)
    let turns = Atomic<Int>(0)

    /// How a group's commit went: whether it collided on the way, and whether it was applied
    /// as first decided (the decision the pipeline's next group was decided over).
    private struct Committed {
        var collided = false
        var appliedAsDecided = false
    }

    /// Decides and applies `group` (its first apply `decided` already, when given); how it
    /// went. On an engine that gives turns (`ZoneTurns`), a zone pipeline's group is decided in
    /// the zone's turn when `takingTurns`, and after its first collision in any case, so it is
    /// not outrun again.
    private func commit(
        _ group: [PendingWrite], in pipeline: ZoneOrder?, takingTurns: Bool, decided: DecidedGroup? = nil
    ) async -> Committed {
        var collided = 0
        var decided = decided
        // Whether the attempt under way was decided over rows an earlier group left.
        var carried = decided?.overCarriedRows == true
        while true {
            let turn = takingTurns || collided > 0 ? pipeline : nil
            do {
                let outcomes: [Result<Void, any Error>]
                if let first = decided {
                    decided = nil
                    try await units.apply(first.changes)
                    outcomes = first.outcomes
                } else {
                    outcomes = try await decideAndApply(group, inTurnOf: turn)
                }
                for (write, outcome) in zip(group, outcomes) { write.complete(outcome) }
                return Committed(collided: collided > 0, appliedAsDecided: collided == 0)
            } catch let failure as LoadFailure {
                // The rows could not be loaded (the engine is down or slow): no write can go on.
                fail(group, failure.error)
                return Committed(collided: collided > 0)
            } catch StorageError.serializationFailure(let detail) {
                if carried {
                    // Decided over rows an earlier group left: they were stale, or a create's
                    // record was there. Decided again at once from fresh rows; no collision yet.
                    carried = false
                    contended(pipeline)
                    continue
                }
                // Another node wrote what the group read: decide again from fresh rows (in the
                // zone's turn from now on), after a pause of up to a millisecond or two from the
                // second time on, so two nodes taking turns on one database stop meeting at the
                // same moment.
                collisions.add(1, ordering: .relaxed)
                guard collided >= Self.decisionsAfterCollision else {
                    collided += 1
                    if collided > 1 { try? await Task.sleep(for: .microseconds(Int.random(in: 0...2_000))) }
                    continue
                }
                fail(group, StorageError.serializationFailure(detail))
                return Committed(collided: true)
            } catch let error as StorageError where error.retryAfterSeconds != nil {
                // The engine is busy or gone: the same for every write.
                fail(group, error)
                return Committed(collided: collided > 0)
            } catch {
                // Anything else may be one write's doing: each is tried alone, so only that one
                // fails.
                guard group.count > 1 else {
                    fail(group, error)
                    return Committed(collided: collided > 0)
                }
                var anyCollided = collided > 0
                for write in group {
                    if await commit([write], in: pipeline, takingTurns: takingTurns).collided { anyCollided = true }
                }
                return Committed(collided: anyCollided)
            }
        }
    }

    /// The group decided over rows loaded for it, and applied: in the zone's turn when `zone`
    /// is given and the engine has turns. A failure to load comes as `LoadFailure`.
    private func decideAndApply(_ group: [PendingWrite], inTurnOf zone: ZoneOrder?) async throws -> [Result<Void, any Error>] {
        let run: @Sendable () async throws -> [Result<Void, any Error>] = { [units] in
            let decided: DecidedGroup
            do {
                decided = try await units.decide(group)
            } catch {
                throw LoadFailure(error: error)
            }
            try await units.apply(decided.changes)
            return decided.outcomes
        }
        guard let zone, let engine = units.base as? any ZoneTurns else { return try await run() }
        turns.add(1, ordering: .relaxed)
        return try await engine.withZoneTurn(zone, run)
    }

    /// A group's rows could not be loaded.
    private struct LoadFailure: Error {
        let error: any Error
    }

    private func fail(_ group: [PendingWrite], _ error: any Error) {
        for write in group { write.complete(.failure(error)) }
    }
}
