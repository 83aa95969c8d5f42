import Foundation
import Logging
import NimbusCore
import NimbusStorage
import NimbusWire
import ServiceLifecycle
import Synchronization

/// Writes the request log to the store so it lasts (docs/operations.md, "Logs that last"):
/// what `RequestLog` recorded since the last flush goes in one batch a second, with its
/// per-minute figures (what the dashboard's charts read, summed over every node), and the log is
/// trimmed to its named limits (`Limits.requestLogDays`, `Limits.requestLogEntries`) now and
/// then. Reads flush this node's pending entries first, so a request shows at once on the node
/// that answered it, and within a second on the others.
final class RequestArchive: Service, Sendable {
    let requests: RequestLog
    let store: any RequestLogStore
    let clock: any WallClock
    let logger: Logger
    let flushInterval: Duration
    /// This node, as its entries name it.
    let node = RequestLog.node

    init(requests: RequestLog, store: any RequestLogStore, clock: any WallClock, logger: Logger, flushInterval: Duration = .seconds(1)) {
        self.requests = requests
        self.store = store
        self.clock = clock
        self.logger = logger
        self.flushInterval = flushInterval
    }

    func run() async throws {
        await cancelWhenGracefulShutdown {
            var sincePrune: Duration = .zero
            while !Task.isCancelled {
                do { try await Task.sleep(for: self.flushInterval) } catch { break }
                await self.flush()
                sincePrune += self.flushInterval
                if sincePrune >= .seconds(600) {
                    sincePrune = .zero
                    await self.prune()
                }
            }
        }
        await flush()  // what the last second answered
    }

    /// The flush before this one, which the next waits for: flushes store in the order they
    /// drained. Without it a read's flush could find nothing pending because the background
    /// flush had just drained the entries and not yet stored them, and the read would miss a
    /// request this node had already answered.
    private let lastFlush = Mutex<Task<Void, Never>?>(nil)

    /// Stores what is pending, after any flush already under way has stored its batch; on
    /// failure the batch is logged as lost (the log is bounded in memory, never a reason to
    /// hold requests).
    func flush() async {
        let flush = lastFlush.withLock { last in
            let previous = last
            let next = Task {
                await previous?.value
                await self.storePending()
            }
            last = next
            return next
        }
        await flush.value
    }

    private func storePending() async {
        let (entries, dropped) = requests.drainUnarchived()
        if dropped > 0 {
            logger.warning("request log entries dropped before they were stored", metadata: ["dropped": "\(dropped)"])
        }
        guard !entries.isEmpty else { return }
        do {
            try await store.appendRequests(entries.map { $0.stored(node: node) }, minuteFigures: minuteFigures(of: entries))
        } catch {
            logger.warning("request log batch not stored", metadata: ["entries": "\(entries.count)", "reason": "\(error)"])
        }
    }

    /// The batch's figures, a row per minute and container.
    private func minuteFigures(of entries: [RequestLog.Entry]) -> [StoredMinuteFigures] {
        struct Key: Hashable {
            let minute: Int64
            let container: String
        }
        var figures: [Key: RequestLog.Figures] = [:]
        for entry in entries { figures[Key(minute: entry.at / 60_000 * 60_000, container: entry.container ?? ""), default: .init()].count(entry) }
        return figures.map { key, figures in
            StoredMinuteFigures(
                minute: key.minute, node: node, container: key.container, requests: figures.requests, serverErrors: figures.serverErrors,
                errors: figures.errors,
                latency: Dictionary(uniqueKeysWithValues: figures.latency.enumerated().filter { $0.element > 0 }.map { ($0.offset, $0.element) }))
        }
    }

    /// The minutes of the last hour that saw requests on any node, oldest first, with the
    /// figures of the containers `visible` lets through: `RequestLog.lastHour`, from the store.
    func lastHour(now: Int64, visible: (String) -> Bool) async throws -> [(start: Int64, figures: RequestLog.Figures)] {
        await flush()
        var minutes: [Int64: RequestLog.Figures] = [:]
        for row in try await store.minuteFigures(since: now / 60_000 * 60_000 - Int64(RequestLog.minutes - 1) * 60_000)
        where visible(row.container) {
            var figures = RequestLog.Figures()
            figures.requests = row.requests
            figures.serverErrors = row.serverErrors
            figures.errors = row.errors
            for (bucket, count) in row.latency where figures.latency.indices.contains(bucket) { figures.latency[bucket] = count }
            minutes[row.minute, default: .init()].add(figures)
        }
        return minutes.sorted { $0.key < $1.key }.map { (start: $0.key, figures: $0.value) }
    }

    func prune() async {
        let horizon = clock.nowMilliseconds() - Int64(Limits.requestLogDays.value) * 86_400_000
        do {
            _ = try await store.pruneRequests(before: horizon, keepingAtMost: Limits.requestLogEntries.value)
        } catch {
            logger.warning("request log not trimmed", metadata: ["reason": "\(error)"])
        }
    }
}

extension RequestLog.Entry {
    /// The entry as the lasting log keeps it, answered by `node`.
    func stored(node: String) -> StoredRequest {
        StoredRequest(
            at: at, node: node, requestUUID: requestUUID, method: method, route: route, container: container,
            environment: environment, database: database, userRecordName: user, userName: userName, status: status,
            serverErrorCode: serverErrorCode, itemErrorCodes: itemFailureCodes, milliseconds: milliseconds)
    }
}

extension StoredRequest {
    /// The entry as the dashboard reads it and an export writes it (`RequestLogEntry`).
    public var logEntry: RequestLogEntry {
        RequestLogEntry(
            id: id, at: at, uuid: requestUUID, method: method, route: route, status: Int64(status), ms: milliseconds, node: node,
            container: container, environment: environment, database: database, user: userRecordName, userName: userName,
            serverErrorCode: serverErrorCode, itemErrorCodes: itemErrorCodes)
    }
}
