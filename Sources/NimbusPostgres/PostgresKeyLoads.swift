import Foundation
import NimbusStorage
import Synchronization

/// Loads by key that arrive while enough are already on their way to PostgreSQL wait, and then
/// go together: one statement for every load that waited, answered to each of them.
///
/// A load by key is one short statement, and at many clients most of its cost is not the
/// lookup but the round trip around it: postgres-nio's messages and the socket on the node,
/// the protocol and a backend's wake-up on the server (a fetch by ID on one node: 47 µs of
/// execution of about 180 µs of PostgreSQL's CPU, and twice that on the node). Waiting
/// requests took turns for one of the pool's connections anyway; here they share a statement
/// instead. The number in flight adapts nothing and needs no timer: a load that finds a free
/// place goes at once (a single client waits for nothing), and the more requests arrive, the
/// more each statement carries.
///
/// Every load in a statement sees the same committed state, as one load would. A unit gets
/// rows for keys it did not ask for beside its own; `UnitOfWorkDriver` keeps the rows a unit
/// read first (`LoadedRows.merge`), so a unit never sees one of its rows change under it.
final class PostgresKeyLoads: Sendable {
    /// Loads by key in flight before the next ones wait. Few: requests then share statements
    /// rather than queue for connections, and each statement grows with the wait. Two measured
    /// best on this project's machine (two cores for the node and PostgreSQL together: fetches
    /// by ID at 64 clients 2.0× the figure with no waiting, against 1.8× at four and 1.6× at
    /// eight, docs/benchmarks.md); a PostgreSQL with many cores across a network may want more.
    static let defaultInFlight = 2
    /// The most loads one statement carries; the rest wait for the next place.
    static let mostPerStatement = 64

    private struct Waiting {
        let request: LoadRequest
        let answer: CheckedContinuation<LoadedRows, any Error>
    }

    private struct State {
        var inFlight = 0
        var waiting: [Waiting] = []
    }

    let inFlightLimit: Int
    private let state = Mutex(State())

    init(inFlight: Int) {
        inFlightLimit = max(1, inFlight)
    }

    /// `NIMBUS_POSTGRES_KEY_LOADS`: loads by key in flight from one node to one primary.
    static var configuredInFlight: Int {
        ProcessInfo.processInfo.environment["NIMBUS_POSTGRES_KEY_LOADS"].flatMap(Int.init) ?? defaultInFlight
    }

    /// Loads waiting now, and places taken (for tests).
    var waitingCount: Int { state.withLock { $0.waiting.count } }
    var inFlightCount: Int { state.withLock { $0.inFlight } }

    /// Answers `request` by `run`, alone when there is room, else with the others waiting.
    func load(_ request: LoadRequest, _ run: @escaping @Sendable (LoadRequest) async throws -> LoadedRows) async throws -> LoadedRows {
        let goes = state.withLock { state in
            guard state.inFlight < inFlightLimit else { return false }
            state.inFlight += 1
            return true
        }
        if goes {
            do {
                let rows = try await run(request)
                finished(run)
                return rows
            } catch {
                finished(run, failure: error)
                throw error
            }
        }
        return try await withCheckedThrowingContinuation { answer in
            // A place may have come free since: then this load goes now, on a task of its own.
            let goes = state.withLock { state in
                guard state.inFlight < inFlightLimit else {
                    state.waiting.append(Waiting(request: request, answer: answer))
                    return false
                }
                state.inFlight += 1
                return true
            }
            if goes { Task { await self.send([Waiting(request: request, answer: answer)], run) } }
        }
    }

    /// A load in flight ended: the loads waiting take its place, together. When it ended with
    /// the server unavailable (down, or silent past the deadline), they fail with it instead:
    /// their own statement would only wait out a second deadline, and a request's answer
    /// (`TRY_AGAIN_LATER`) must come within one.
    private func finished(_ run: @escaping @Sendable (LoadRequest) async throws -> LoadedRows, failure: (any Error)? = nil) {
        let next: [Waiting] = state.withLock { state in
            guard !state.waiting.isEmpty else {
                state.inFlight -= 1
                return []
            }
            let count = min(state.waiting.count, Self.mostPerStatement)
            let taken = Array(state.waiting.prefix(count))
            state.waiting.removeFirst(count)
            return taken
        }
        guard !next.isEmpty else { return }
        if let failure, case StorageError.unavailable = failure {
            for load in next { load.answer.resume(throwing: failure) }
            // The place is still taken: the loads that came meanwhile fail too, or it is freed.
            finished(run, failure: failure)
            return
        }
        Task { await self.send(next, run) }
    }

    private func send(_ loads: [Waiting], _ run: @escaping @Sendable (LoadRequest) async throws -> LoadedRows) async {
        // The first request's keys taken whole, not hashed again into an empty set: at low load
        // a statement carries one unit's keys.
        var merged = LoadRequest(
            keys: loads[0].request.keys, schemaWithZones: loads.contains { $0.request.schemaWithZones },
            schemaWithVersion: loads.contains { $0.request.schemaWithVersion }, source: .primary)
        for load in loads.dropFirst() { merged.keys.formUnion(load.request.keys) }
        do {
            let rows = try await run(merged)
            for load in loads { load.answer.resume(returning: rows) }
            finished(run)
        } catch {
            for load in loads { load.answer.resume(throwing: error) }
            finished(run, failure: error)
        }
    }
}
