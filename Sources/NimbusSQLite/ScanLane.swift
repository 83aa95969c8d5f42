import Synchronization

/// Lets at most `width` scans run at once; the others wait suspended, holding no thread, and
/// start in arrival order. With GRDB's reader connections shared by scans and point reads,
/// the lane keeps connections free for point reads (a point read waiting for a connection
/// would block the thread it runs on), and keeps more scans than cores from slicing the
/// processor time each one's budget counts.
final class ScanLane: Sendable {
    private struct State {
        var running = 0
        var waiting: [CheckedContinuation<Void, Never>] = []
        var nextWaiter = 0
    }

    let width: Int
    private let state = Mutex(State())

    init(width: Int) {
        precondition(width > 0)
        self.width = width
    }

    func run<T>(_ body: () async throws -> T) async throws -> T {
        await enter()
        defer { leave() }
        return try await body()
    }

    private func enter() async {
        let admitted = state.withLock { state -> Bool in
            guard state.running < width else { return false }
            state.running += 1
            return true
        }
        if admitted { return }
        await withCheckedContinuation { continuation in
            let admittedNow = state.withLock { state -> Bool in
                // A scan may have left between the two looks.
                if state.running < width {
                    state.running += 1
                    return true
                }
                state.waiting.append(continuation)
                return false
            }
            if admittedNow { continuation.resume() }
        }
    }

    /// Hands the slot straight to the oldest waiter, if any.
    private func leave() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard state.nextWaiter < state.waiting.count else {
                state.running -= 1
                state.waiting.removeAll(keepingCapacity: true)
                state.nextWaiter = 0
                return nil
            }
            let waiter = state.waiting[state.nextWaiter]
            state.nextWaiter += 1
            return waiter
        }
        next?.resume()
    }
}
