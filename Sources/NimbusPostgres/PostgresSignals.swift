import Logging
import NimbusStorage
import PostgresNIO
import Synchronization

/// Every node's commits, heard by every node: the apply function (`PostgresApply`) sends `NOTIFY nimbus` with what
/// the transaction left for the notification pipeline (`outbox`, `notifications`), delivered
/// by PostgreSQL when it commits; each node LISTENs on a connection of its own and wakes its
/// pipeline. The signals are hints: the outbox and the notification collection stay the
/// truth, and the pipeline's poll finds what a signal lost while the connection was down.
final class PostgresSignals: Sendable {
    static let channel = "nimbus"

    private let listeners = Mutex<[Task<Void, Never>]>([])

    /// A stream of the store's signals until it is dropped or `stop()` is called; reconnects
    /// by itself after the connection is lost (a signal sent meanwhile is not heard), to the
    /// host `primary` serves from then (NOTIFY is not replicated: after a failover, only the
    /// new primary's commits are heard).
    func stream(_ primary: PostgresPrimary, logger: Logger) -> AsyncStream<StoreSignal> {
        let (stream, continuation) = AsyncStream.makeStream(of: StoreSignal.self, bufferingPolicy: .bufferingNewest(8))
        let task = Task {
            var attempt = 0
            while !Task.isCancelled {
                do {
                    let connection = try await PostgresConnection.connect(
                        configuration: try primary.location.connectionConfiguration(to: primary.endpoint), id: 0, logger: logger)
                    attempt = 0
                    do {
                        try await withTaskCancellationHandler {
                            try await connection.listen(on: Self.channel) { notifications in
                                // Heard from now on: what committed before is the poll's to find.
                                continuation.yield(.outboxAppended)
                                continuation.yield(.notificationsStored)
                                for try await notification in notifications {
                                    if let signal = StoreSignal(rawValue: notification.payload) { continuation.yield(signal) }
                                }
                            }
                        } onCancel: {
                            let closing: EventLoopFuture<Void> = connection.close()
                            _ = closing
                        }
                    } catch {
                        logger.debug("the PostgreSQL signal connection ended", metadata: ["error": "\(error)"])
                    }
                    try? await connection.close()
                } catch {
                    logger.debug("the PostgreSQL signal connection could not be made", metadata: ["error": "\(error)"])
                }
                attempt += 1
                try? await Task.sleep(for: .milliseconds(min(5_000, 100 * attempt * attempt)))
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in task.cancel() }
        listeners.withLock { $0.append(task) }
        return stream
    }

    func stop() async {
        let tasks = listeners.withLock { tasks in
            defer { tasks = [] }
            return tasks
        }
        for task in tasks { task.cancel() }
        for task in tasks { await task.value }
    }
}
