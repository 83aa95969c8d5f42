import ArgumentParser
import Foundation
import NIOCore
import NIOPosix
import NimbusServer

/// Which threads run the process's Swift tasks: NIO's event loops, or Swift's cooperative pool
/// beside them (`NIMBUS_TASK_THREADS=loops|pool`). Unset, a server's storage decides: the loops
/// on SQLite, the pool on PostgreSQL; the other verbs serve no sockets and keep the pool.
///
/// On the loops, a request is read, handled and answered on the thread that reads its socket,
/// with no thread woken to hand it over and back. On SQLite, since a lone writer commits on its
/// own thread and point reads and short scans run on the calling thread, that measured (wrk on
/// two cores, five alternating rounds against the pool; docs/benchmarks.md, "Tasks on the loops
/// by default on SQLite") 1.57× the fetches and 1.30× the lists at 64 connections with lower
/// p99s, creates at one client 1.06× and at 64 connections 0.99× (once a queued writer is
/// resumed on its own loop), and losses of a tenth on a single client's fetches and 14% on the
/// bare health endpoint (the loop's bookkeeping around each Swift job). On PostgreSQL a request
/// waits on postgres-nio's own channel, and the loops gained nothing (fetches 1.00×, creates
/// 0.93×, p99s a fifth worse), so the pool stays. The loops take Swift's jobs through
/// `LoopJobQueue`, not NIO's own takeover of the global executor.
/// Blocking work runs on threads of its own either way (`BlockingWork`, the SQLite writer under
/// load and the scan lane).
enum TaskThreads {
    static let variable = "NIMBUS_TASK_THREADS"

    /// Where tasks run, for the server's first lines: Swift's pool until `install` says otherwise.
    nonisolated(unsafe) private(set) static var chosen = "on Swift's cooperative pool"

    /// Hands Swift's global executor to NIO's event loops when the environment asks for them, or
    /// when it does not say and `serving` is the `--database` of a server that is not on
    /// PostgreSQL (nil for the verbs that serve nothing).
    /// Called once, first thing in `main`, after the arguments are parsed and before any task
    /// runs: jobs enqueued before it ran on the pool.
    static func install(serving database: String?, environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        let loops: Bool
        let reason: String
        switch environment[variable] {
        case nil, "":
            guard let database else {
                (loops, reason) = (false, "the default for a verb; \(variable)=loops for NIO's event loops")
                break
            }
            // A malformed PostgreSQL URL stops the server later, with the reason.
            loops = (try? DatabaseURL.postgresLocation(database)) == nil
            reason = loops ? "the default on SQLite; \(variable)=pool for Swift's pool" : "the default on PostgreSQL; \(variable)=loops for NIO's event loops"
        case "pool":
            (loops, reason) = (false, "\(variable)=pool")
        case "loops":
            (loops, reason) = (true, "\(variable)=loops")
        case let other?:
            throw ValidationError("\(variable) must be 'pool' or 'loops', not '\(other)'")
        }
        guard loops else {
            chosen = "on Swift's cooperative pool (\(reason))"
            return
        }
        chosen =
            LoopJobQueue.install()
            ? "on NIO's \(NIOSingletons.groupLoopCountSuggestion) event loops, beside the sockets (\(reason))"
            : "on Swift's cooperative pool (this platform cannot hand it to NIO's event loops)"
    }
}
