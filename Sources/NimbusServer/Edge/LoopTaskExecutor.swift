import NIOConcurrencyHelpers
import NIOCore
import Synchronization

/// Runs a request alone on its event loop straight through on that loop, as a task executor
/// (SE-0417), with no hop at each `await`.
///
/// With Swift's tasks on NIO's loops (`TaskThreads`), NIO runs a task's jobs as the loop's serial
/// executor. Nonisolated async functions run on the generic executor, so each one the task enters
/// (about sixty in a fetch by ID) switches back to it: the job is queued on the loop again and
/// resumed from the queue. With the loop as the task's executor those switches cost nothing, and
/// a single client's fetch took 12% less processor time (docs/benchmarks.md, "A lone request
/// straight through on its loop").
///
/// Under load the hops pay for themselves: a loop's requests then advance together, stage by
/// stage, with each stage's code and data warm for the next request. Every request run straight
/// through made fetches at 64 connections 0.56 of the rate with hops. So a request runs straight
/// through only when its task's first job finds it the only request of its loop in flight: by
/// then the loop has read every request that arrived with it.
final class LoopTaskExecutor: TaskExecutor, @unchecked Sendable {
    // Set once, in `init`; the runtime reads a weak reference safely from any thread.
    private weak var loop: (any EventLoop)?
    /// Requests read on this loop and not yet answered.
    private let inFlight = Atomic<Int>(0)

    private init(loop: any EventLoop) {
        self.loop = loop
    }

    private static let byLoop = NIOLockedValueBox([ObjectIdentifier: LoopTaskExecutor]())

    /// The one executor of `loop`, made on first use. Loops that are gone leave the table then.
    static func of(_ loop: any EventLoop) -> LoopTaskExecutor {
        byLoop.withLockedValue { executors in
            if let executor = executors[ObjectIdentifier(loop)], executor.loop === loop { return executor }
            executors = executors.filter { $0.value.loop != nil }
            let executor = LoopTaskExecutor(loop: loop)
            executors[ObjectIdentifier(loop)] = executor
            return executor
        }
    }

    /// Counts a request in, on its loop, as its route is about to start and before its task does.
    func requestRead() {
        inFlight.add(1, ordering: .relaxed)
    }

    /// Answers a request counted in by `requestRead`, from its task: straight through on the loop
    /// when the task runs there and no other request of the loop is in flight, else as it runs.
    func answer<Answer>(_ work: @Sendable () async -> Answer) async -> Answer {
        defer { inFlight.subtract(1, ordering: .relaxed) }
        if runsStraightThrough {
            return await withTaskExecutorPreference(self, operation: work)
        } else {
            return await work()
        }
    }

    /// Whether a request that calls this from its task now runs straight through.
    var runsStraightThrough: Bool {
        loop?.inEventLoop == true && inFlight.load(ordering: .relaxed) == 1
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        guard let loop else {
            // The loop is gone (a server stopped with a task suspended): the task goes on where
            // other tasks run.
            globalConcurrentExecutor.enqueue(ExecutorJob(job))
            return
        }
        let executor = asUnownedTaskExecutor()
        loop.execute { job.runSynchronously(on: executor) }
    }
}
