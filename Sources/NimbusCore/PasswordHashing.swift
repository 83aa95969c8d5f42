import Foundation
import NimbusWire

#if canImport(Glibc)
    import Glibc
#endif

/// Where passwords are hashed and checked: threads of their own, at a lower priority, with a
/// bounded queue. PBKDF2 costs a tenth of a second of processor a check on purpose; on Swift's
/// cooperative threads (as many as the machine has cores) a few sign-ins at once stalled every
/// other request behind them (two attackers sending wrong passwords raised everyone's lookup
/// p50 from 3 ms to 97 ms). Here the operating system shares the processor between hashing and
/// the executor, and past `queueLimit` waiting checks a sign-in is refused with `THROTTLED`
/// instead of queueing without end.
public final class PasswordHashing: @unchecked Sendable {
    /// The process's pool: half the machine's cores (at least one).
    public static let shared = PasswordHashing(
        threads: max(1, ProcessInfo.processInfo.activeProcessorCount / 2), queueLimit: 64)

    public let threads: Int
    public let queueLimit: Int
    // NSCondition guards `jobs` and `started` (the threads wait on it); `@unchecked Sendable`
    // states that every access holds it.
    private let condition = NSCondition()
    private var jobs: [@Sendable () -> Void] = []
    private var started = false

    public init(threads: Int, queueLimit: Int) {
        precondition(threads >= 1 && queueLimit >= 1)
        self.threads = threads
        self.queueLimit = queueLimit
    }

    /// Runs `work` on a hashing thread; `THROTTLED` (retry after a second) when `queueLimit`
    /// checks are already waiting.
    public func run<Value: Sendable>(_ work: @escaping @Sendable () -> Value) async throws(CloudKitError) -> Value {
        let result: Result<Value, CloudKitError> = await withCheckedContinuation { continuation in
            condition.lock()
            defer { condition.unlock() }
            guard jobs.count < queueLimit else {
                var refusal = CloudKitError(
                    .throttled, "the server is checking too many passwords at once; try again after retryAfter seconds")
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

    private static let threadMark = "nimbus.passwordHashing"

    /// Whether the calling code runs on one of the hashing threads (tests).
    public static var isHashingThread: Bool { Thread.current.threadDictionary[threadMark] as? Bool == true }

    /// Jobs waiting for a thread (tests).
    public var waiting: Int {
        condition.lock()
        defer { condition.unlock() }
        return jobs.count
    }

    private func startThread(_ index: Int) {
        let thread = Thread { [self] in
            Thread.current.name = "nimbus-pw-\(index)"  // Linux keeps 15 bytes of a thread's name
            Thread.current.threadDictionary[Self.threadMark] = true
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
