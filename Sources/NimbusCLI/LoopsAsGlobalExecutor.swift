import CNimbusLibc
import NIOCore
import NIOPosix

/// Swift's global executor handed to NIO's event loops, with each job run as Swift's runtime runs
/// a global job: on the generic executor.
///
/// Why not NIO's own `unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor`:
/// it runs every global job as isolated to the loop's serial executor. A task that then calls a
/// nonisolated async function (it wants the generic executor) finds itself on the "wrong"
/// executor and switches, and a switch to the generic executor is a new global job: back through
/// the hook, into the loop's queue, run again. Counted with uprobes on `swift_job_run` and
/// `swift_task_switch` under wrk (docs/benchmarks.md, "Requests answered from the pipeline"),
/// a fetch's task ran 64 jobs and switched 63 times. Run on the generic executor, as Swift's own
/// global executor does, a task stays where it is until it really waits.
///
/// The jobs go where NIO's hook sends them: the calling thread's loop when it is one of the
/// singleton group's, else the group's next loop.
enum LoopsAsGlobalExecutor {
    /// Installs the hook, once, before any task runs. False when this runtime does not expose
    /// the hook, when another hook is already installed, or when an executor reference is not the
    /// two words this file assumes; the caller then keeps Swift's pool.
    static func install() -> Bool {
        guard MemoryLayout<UnownedSerialExecutor>.size == 2 * MemoryLayout<UInt>.size,
            MemoryLayout<UnownedJob>.size == MemoryLayout<UnsafeMutableRawPointer>.size
        else { return false }
        return nimbus_install_enqueue_global_hook { job in
            LoopsAsGlobalExecutor.enqueue(unsafeBitCast(job, to: UnownedJob.self))
        } == 1
    }

    /// Swift's generic executor: an executor reference of two zero words.
    private static let generic = unsafeBitCast((UInt(0), UInt(0)), to: UnownedSerialExecutor.self)

    private static func enqueue(_ job: UnownedJob) {
        MultiThreadedEventLoopGroup.singleton.any().execute { runJob(job, generic) }
    }
}

/// The runtime's entry for running a job on an executor; the standard library's own
/// `runSynchronously(on:)` calls it with the executor given.
@_silgen_name("swift_job_run")
private func runJob(_ job: UnownedJob, _ executor: UnownedSerialExecutor)
