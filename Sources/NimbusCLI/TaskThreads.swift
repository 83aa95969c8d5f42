import ArgumentParser
import Foundation
import NIOCore
import NIOPosix

/// Which threads run the process's Swift tasks: NIO's event loops, or Swift's cooperative pool
/// beside them (`NIMBUS_TASK_THREADS=loops|pool`, loops by default).
///
/// On the loops, a request is read, handled and answered on the thread that reads its socket,
/// and a task a loop starts stays on that loop: no thread is woken to hand a request over and
/// none to hand its answer back. With the pool, every request crossed from a loop to a pool
/// thread and back, and both kinds of thread competed for the same cores. Measured with wrk
/// on two cores (docs/benchmarks.md, "Tasks on NIO's event loops"): fetches at 64 connections
/// 1.20×, lists 1.13×, creates level, a single client's p99 0.70–0.78×. Blocking work already
/// runs on threads of its own (`BlockingWork`, the SQLite writer and scan lane), so a loop is
/// held only by bounded work; the pool stays available to an operator who finds otherwise.
enum TaskThreads {
    static let variable = "NIMBUS_TASK_THREADS"

    /// Where tasks run, for the server's first lines: Swift's pool until `install` says otherwise.
    nonisolated(unsafe) private(set) static var chosen = "on Swift's cooperative pool"

    /// Hands Swift's global executor to NIO's event loops unless the environment asks for the
    /// pool. Called once, first thing in `main`: jobs enqueued before it ran on the pool.
    static func install(environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        switch environment[variable] {
        case nil, "", "loops":
            chosen =
                NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
                ? "on NIO's \(NIOSingletons.groupLoopCountSuggestion) event loops, beside the sockets (\(variable)=pool for Swift's pool)"
                : "on Swift's cooperative pool (this platform cannot hand it to NIO's event loops)"
        case "pool":
            chosen = "on Swift's cooperative pool (\(variable)=pool)"
        case let other?:
            throw ValidationError("\(variable) must be 'loops' or 'pool', not '\(other)'")
        }
    }
}
