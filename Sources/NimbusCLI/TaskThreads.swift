import ArgumentParser
import Foundation
import NIOCore
import NIOPosix

/// Which threads run the process's Swift tasks: Swift's cooperative pool beside NIO's event
/// loops, or the loops themselves (`NIMBUS_TASK_THREADS=pool|loops`, the pool by default).
///
/// On the loops, a request is read, handled and answered on the thread that reads its socket,
/// with no thread woken to hand it over and back. That pays only under many connections: with
/// wrk on two cores (docs/benchmarks.md, "Tasks on NIO's event loops"), seven alternating
/// rounds against the pool gave fetches at 64 connections 1.10× and lists 1.13×, but a single
/// client's fetches 0.91× and creates 0.75× (CPU per request +11% and +24%: a write's commit
/// resumes its task from the writer thread onto any loop, often not its socket's), and p99 at
/// 64 connections 1.2–1.3× worse. The pool is therefore the default, and the loops an
/// operator's choice for read-heavy servers with many clients. Blocking work runs on threads
/// of its own either way (`BlockingWork`, the SQLite writer and scan lane).
enum TaskThreads {
    static let variable = "NIMBUS_TASK_THREADS"

    /// Where tasks run, for the server's first lines: Swift's pool until `install` says otherwise.
    nonisolated(unsafe) private(set) static var chosen = "on Swift's cooperative pool"

    /// Hands Swift's global executor to NIO's event loops when the environment asks for them.
    /// Called once, first thing in `main`: jobs enqueued before it ran on the pool.
    static func install(environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        switch environment[variable] {
        case nil, "", "pool":
            chosen = "on Swift's cooperative pool (\(variable)=loops for NIO's event loops)"
        case "loops":
            chosen =
                NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
                ? "on NIO's \(NIOSingletons.groupLoopCountSuggestion) event loops, beside the sockets (\(variable)=loops)"
                : "on Swift's cooperative pool (this platform cannot hand it to NIO's event loops)"
        case let other?:
            throw ValidationError("\(variable) must be 'pool' or 'loops', not '\(other)'")
        }
    }
}
