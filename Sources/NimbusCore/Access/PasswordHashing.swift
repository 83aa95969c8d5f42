import Foundation
import NimbusWire

#if canImport(Glibc)
    import Glibc
#endif

/// Where passwords are hashed and checked (`WorkerThreads.passwordHashing`).
public typealias PasswordHashing = WorkerThreads

/// Threads of their own, at a lower priority, with a bounded queue, for work that holds a
/// processor for long stretches without a suspension point. On Swift's cooperative threads (as
/// many as the machine has cores) such work stalls every other request behind it: PBKDF2 costs a
/// tenth of a second a check on purpose, and two attackers sending wrong passwords raised
/// everyone's lookup p50 from 3 ms to 97 ms; parsing a 4 MiB body takes as long, and a flood of
/// them held `/health` for most of a second. Here the operating system shares the processor
/// between this work and the executor, and past `queueLimit` waiting jobs the request is refused
/// with `THROTTLED` instead of queueing without end.
public final class WorkerThreads: @unchecked Sendable {
    /// Password checks: half the machine's cores (at least one).
    public static let shared = WorkerThreads(
        threads: max(1, ProcessInfo.processInfo.activeProcessorCount / 2), queueLimit: 64)
    /// Large request bodies parsed as JSON: one thread (the node's body budget bounds what waits).
    public static let bodyParsing = WorkerThreads(
        threads: 1, queueLimit: 1_024, name: "json", busy: "the server is reading too many large request bodies at once")

    public let threads: Int
    public let queueLimit: Int
    /// Names the threads (`nimbus-NAME-i`) and marks them (`isHashingThread` asks for "pw").
    public let name: String
    /// The refusal's reason past `queueLimit`.
    let busy: String
    // NSCondition guards `jobs` and `started` (the threads wait on it); `@unchecked Sendable`
    // states that every access holds it.
    private let condition = NSCondition()
    private var jobs: [@Sendable () -> Void] = []
    private var started = false

    public init(
        threads: Int, queueLimit: Int, name: String = "pw", busy: String = "the server is checking too many passwords at once"
    ) {
        precondition(threads >= 1 && queueLimit >= 1)
        self.threads = threads
        self.queueLimit = queueLimit
        self.name = name
        self.busy = busy
    }

    /// Runs `work` on a hashing thread; `THROTTLED` (retry after a second) when `queueLimit`
    /// checks are already waiting.
    public func run<Value: Sendable>(_ work: @escaping @Sendable () -> Value) async throws(CloudKitError) -> Value {
        let result: Result<Value, CloudKitError> = await withCheckedContinuation { continuation in
            condition.lock()
            defer { condition.unlock() }
            guard jobs.count < queueLimit else {
                var refusal = CloudKitError(.throttled, "\(busy); try again after retryAfter seconds")
                refusal.retryAfter = 1
                continuation.resume(returning: .failure(refusal))
                return
            }
            if !started {
                started = true
                for index in 0..<threads { startThread(index) }
            }
            jobs.append { continuation.resume(returning: .success(work())) }
            condition.signal()
        }
        return try result.get()
    }

    private static let threadMark = "nimbus.workerThreads"

    /// Whether the calling code runs on one of the password hashing threads (tests).
    public static var isHashingThread: Bool { isThread(of: "pw") }

    /// Whether the calling code runs on a thread of the pool named `name`.
    public static func isThread(of name: String) -> Bool { Thread.current.threadDictionary[threadMark] as? String == name }

    /// Jobs waiting for a thread (tests).
    public var waiting: Int {
        condition.lock()
        defer { condition.unlock() }
        return jobs.count
    }

    private func startThread(_ index: Int) {
        let thread = Thread { [self] in
            Thread.current.name = "nimbus-\(name)-\(index)"  // Linux keeps 15 bytes of a thread's name
            Thread.current.threadDictionary[Self.threadMark] = name
            #if canImport(Glibc)
                // Linux gives each thread its own nice value: this one yields to the executor's.
                _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 10)
            #endif
            while true {
                condition.lock()
                while jobs.isEmpty { condition.wait() }
                let job = jobs.removeFirst()
                condition.unlock()
                job()
            }
        }
        thread.start()
    }
}
