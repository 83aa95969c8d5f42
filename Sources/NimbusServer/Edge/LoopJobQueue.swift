import CNimbusLibc
import Glibc
import NIOCore
import NIOPosix

/// Swift's global executor on NIO's event loops, with a queue of its own on each loop for the
/// jobs a loop's tasks enqueue there.
///
/// With tasks on the loops (`TaskThreads`), a request's task hops back to the global executor at
/// every nonisolated async function it enters: about sixty times in a fetch by ID. NIO's own
/// takeover (`NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor`)
/// queues each hop as one of the loop's tasks: a lock, a boxed task in its deque, a dynamic cast
/// to run it. A profile of fetches at 64 connections put that queueing at a tenth of the
/// server's processor time (docs/benchmarks.md). The hops themselves are worth keeping: under
/// load they let a loop's requests advance together, stage by stage (`LoopTaskExecutor`).
///
/// Here a job enqueued on a loop's own thread goes into that loop's plain array, with no lock,
/// and the loop is handed one task for the whole batch, which runs the batch's jobs in order as
/// the loop's serial executor, as NIO would have. Jobs enqueued while a batch runs form the next
/// batch, a task of the loop's after those queued meanwhile, so the order of the loop's work is
/// NIO's. A job enqueued on any other thread goes to a loop in turn the way NIO queues it.
public enum LoopJobQueue {
    /// Makes the loops of NIO's shared group Swift's global executor. Call once, first thing in
    /// `main`, before any task runs; false where the runtime has no hook for it.
    public static func install() -> Bool {
        // As the linker resolved it (a static build exports no symbol `dlsym` could find), else by name.
        guard let slot = UnsafeMutableRawPointer(nimbus_swift_enqueue_global_hook())
            ?? dlsym(dlopen(nil, RTLD_NOW), "swift_task_enqueueGlobal_hook")
        else { return false }
        let global = slot.assumingMemoryBound(to: UnsafeRawPointer?.self)
        // Someone else's hook (NIO's takeover, made first) keeps the jobs; no queues are made.
        guard global.pointee == nil else { return false }
        for loop in MultiThreadedEventLoopGroup.singleton.makeIterator() {
            // Each queue lives as long as the process; its thread keeps it unretained.
            let queue = Unmanaged.passRetained(LoopJobs(loop: loop))
            loop.execute { nimbus_set_thread_slot(queue.toOpaque()) }
        }
        typealias EnqueueGlobalHook = @convention(thin) (UnownedJob, @convention(thin) (UnownedJob) -> Void) -> Void
        withUnsafeTemporaryAllocation(of: EnqueueGlobalHook.self, capacity: 1) { hook in
            hook.baseAddress!.initialize(to: { job, _ in LoopJobQueue.enqueue(job) })
            // The runtime reads the hook as a plain function pointer.
            hook.baseAddress!.withMemoryRebound(to: UnsafeRawPointer?.self, capacity: 1) { function in
                global.pointee = function.pointee
            }
        }
        return true
    }

    static func enqueue(_ job: UnownedJob) {
        if let queue = nimbus_thread_slot() {
            Unmanaged<LoopJobs>.fromOpaque(queue).takeUnretainedValue().append(job)
        } else {
            MultiThreadedEventLoopGroup.singleton.next().executor.enqueue(ExecutorJob(job))
        }
    }
}

/// One loop's jobs waiting to run, touched only on the loop's thread.
private final class LoopJobs: @unchecked Sendable {
    private let loop: any EventLoop
    private let executor: UnownedSerialExecutor
    private var waiting: [UnownedJob] = []
    /// The batch being run, kept to reuse its storage.
    private var running: [UnownedJob] = []
    private var batchScheduled = false

    init(loop: any EventLoop) {
        self.loop = loop
        executor = loop.executor.asUnownedSerialExecutor()
        waiting.reserveCapacity(256)
        running.reserveCapacity(256)
    }

    func append(_ job: UnownedJob) {
        waiting.append(job)
        guard !batchScheduled else { return }
        batchScheduled = true
        loop.execute { self.runBatch() }
    }

    private func runBatch() {
        swap(&waiting, &running)
        batchScheduled = false
        for job in running { job.runSynchronously(on: executor) }
        running.removeAll(keepingCapacity: true)
    }
}
