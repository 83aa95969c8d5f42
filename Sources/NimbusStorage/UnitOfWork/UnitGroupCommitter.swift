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
/// writer gets `serializationFailure`, which `RetryingStorage` retries.
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
    }

    init(units: UnitRunner) { self.units = units }

    func submit(_ write: PendingWrite, pipeline: ZoneOrder?) {
        let startsDrain = state.withLock { state in
            guard state.pending[pipeline] != nil else {
                state.pending[pipeline] = [write]
                return true
            }
            state.pending[pipeline]!.append(write)
            return false
        }
        if startsDrain { Task { await drain(pipeline) } }
    }

    /// The pipeline's next group; none when it has nothing left (it is gone then).
    private func takeGroup(_ pipeline: ZoneOrder?) -> [PendingWrite] {
        state.withLock { state in
            let waiting = state.pending[pipeline] ?? []
            guard !waiting.isEmpty else {
                state.pending[pipeline] = nil
                return []
            }
            let group = Array(waiting.prefix(Self.maximumWritesPerGroup))
            // Left empty rather than removed: the pipeline is still draining this group.
            state.pending[pipeline] = Array(waiting.dropFirst(group.count))
            return group
        }
    }

    private func drain(_ pipeline: ZoneOrder?) async {
        while true {
            let group = takeGroup(pipeline)
            if group.isEmpty { return }
            await commit(group)
        }
    }

    /// How many times a group is decided again after colliding with another node before its
    /// writes are handed back to `RetryingStorage`.
    static let decisionsAfterCollision = 3

    private func commit(_ group: [PendingWrite]) async {
        var collisions = 0
        while true {
            let decided: (outcomes: [Result<Void, any Error>], changes: UnitOfWorkChanges)
            do {
                decided = try await units.decide(group)
            } catch {
                // The rows could not be loaded (the engine is down or slow): no write can go on.
                return fail(group, error)
            }
            do {
                try await units.apply(decided.changes)
                for (write, outcome) in zip(group, decided.outcomes) { write.complete(outcome) }
                return
            } catch StorageError.serializationFailure(let detail) {
                // Another node wrote what the group read: decide again from fresh rows, after
                // a pause of up to a millisecond or two from the second time on, so two nodes
                // taking turns on one database stop meeting at the same moment.
                guard collisions >= Self.decisionsAfterCollision else {
                    collisions += 1
                    if collisions > 1 { try? await Task.sleep(for: .microseconds(Int.random(in: 0...2_000))) }
                    continue
                }
                return fail(group, StorageError.serializationFailure(detail))
            } catch let error as StorageError where error.retryAfterSeconds != nil {
                // The engine is busy or gone: the same for every write.
                return fail(group, error)
            } catch {
                // Anything else may be one write's doing: each is tried alone, so only that one
                // fails.
                guard group.count > 1 else { return fail(group, error) }
                for write in group { await commit([write]) }
                return
            }
        }
    }

    private func fail(_ group: [PendingWrite], _ error: any Error) {
        for write in group { write.complete(.failure(error)) }
    }
}
