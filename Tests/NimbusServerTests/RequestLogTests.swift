import Foundation
import Logging
import NimbusCore
@testable import NimbusServer
import NimbusStorage
import Synchronization
import Testing

/// The dashboard's request log (docs/dashboard.md): its bound, its search, and the figures of
/// the last hour.
@Suite struct RequestLogTests {
    static func entry(_ index: Int, at: Int64 = 0, container: String? = "C", error: String? = nil, ms: Double = 1) -> RequestLog.Entry {
        RequestLog.Entry(
            at: at, requestUUID: "\(index)", method: "POST", route: "/r", container: container, user: "_u\(index % 2)",
            status: error == nil ? 200 : 400, serverErrorCode: error, milliseconds: ms)
    }

    @Test func theLogKeepsTheNewestTenThousandAndNoMore() {
        let log = RequestLog()
        for index in 0..<RequestLog.capacity { log.record(Self.entry(index)) }
        let full = log.newest(limit: .max) { _ in true }
        #expect(full.count == RequestLog.capacity && full.first?.requestUUID == "\(RequestLog.capacity - 1)" && full.last?.requestUUID == "0")
        log.record(Self.entry(RequestLog.capacity))
        let past = log.newest(limit: .max) { _ in true }
        #expect(past.count == RequestLog.capacity, "one past the bound still holds the bound")
        #expect(past.first?.requestUUID == "\(RequestLog.capacity)" && past.last?.requestUUID == "1", "the oldest went first")
        #expect(log.newest(limit: 3) { $0.user == "_u1" }.map(\.requestUUID) == ["9999", "9997", "9995"])
    }

    @Test func aLongPathIsKeptToTwoHundredBytes() {
        let atLimit = String(repeating: "a", count: RequestLog.textBytes)
        #expect(AccessLog.bounded(atLimit) == atLimit)
        #expect(AccessLog.bounded(atLimit + "b") == atLimit, "one past the bound is cut")
        let euros = AccessLog.bounded(String(repeating: "€", count: 100))  // 3 bytes each: cut at 198, between two
        #expect(euros == String(repeating: "€", count: 66), "\(euros.utf8.count) bytes")
    }

    @Test func theFiguresGiveCountsErrorsAndPercentilesPerMinuteForTheLastHour() {
        let log = RequestLog()
        let minute: Int64 = 60_000
        log.record(Self.entry(0, at: 0, ms: 5))  // more than an hour before `now`
        for index in 0..<99 { log.record(Self.entry(index, at: 61 * minute, ms: 1)) }
        log.record(Self.entry(99, at: 61 * minute + 1, error: "ZONE_NOT_FOUND", ms: 100))
        log.record(Self.entry(100, at: 61 * minute + 2, container: "D", ms: 1))
        let now = 61 * minute + 30_000
        let all = log.lastHour(now: now) { _ in true }
        #expect(all.count == 1 && all[0].start == 61 * minute, "the minute over an hour old is left out: \(all.map(\.start))")
        #expect(all[0].figures.requests == 101 && all[0].figures.errors == ["ZONE_NOT_FOUND": 1])
        let p50 = all[0].figures.percentile(0.5) ?? 0
        let p99 = all[0].figures.percentile(0.99) ?? 0
        #expect(p50 >= 1 && p50 <= 1.1, "\(p50)")
        #expect(p99 >= 1 && p99 <= 1.1, "the 99th of 101 is still a 1 ms request: \(p99)")
        #expect((all[0].figures.percentile(1) ?? 0) >= 100 && (all[0].figures.percentile(1) ?? 0) <= 110)
        let onlyC = log.lastHour(now: now) { $0 == "C" }
        #expect(onlyC[0].figures.requests == 100, "an operator of C sees C's requests only")
    }

    /// A read flushes this node's pending entries before it searches the store. When the
    /// once-a-second flush has just taken them and is still storing them, the read's flush
    /// waits for it, or the read would miss a request this node already answered (seen in CI).
    @Test func aReadsFlushWaitsForTheBatchTheBackgroundFlushIsStoring() async throws {
        let log = RequestLog()
        log.startArchiving()
        let store = HeldStore()
        let archive = RequestArchive(requests: log, store: store, clock: SystemClock(), logger: Logger(label: "test"))
        log.record(Self.entry(1))
        let background = Task { await archive.flush() }
        while !store.isHolding { try await Task.sleep(for: .milliseconds(1)) }

        let readsFlush = Task {
            await archive.flush()
            return store.stored.count
        }
        try await Task.sleep(for: .milliseconds(50))
        store.release()
        await background.value
        #expect(await readsFlush.value == 1, "the read's flush came back before the entry was stored")
    }

    /// A request log store whose first append waits until `release()`.
    final class HeldStore: RequestLogStore {
        private let state = Mutex<(holding: Bool, released: Bool, stored: [StoredRequest])>((false, false, []))
        var isHolding: Bool { state.withLock { $0.holding } }
        var stored: [StoredRequest] { state.withLock { $0.stored } }
        func release() { state.withLock { $0.released = true } }

        func appendRequests(_ rows: [StoredRequest], minuteFigures: [StoredMinuteFigures]) async throws {
            state.withLock { $0.holding = true }
            while !state.withLock({ $0.released }) { try await Task.sleep(for: .milliseconds(1)) }
            state.withLock { $0.stored += rows }
        }
        func requests(_ search: RequestSearch) async throws -> [StoredRequest] { stored }
        func pruneRequests(before time: Int64, keepingAtMost rows: Int) async throws -> Int { 0 }
        func minuteFigures(since time: Int64) async throws -> [StoredMinuteFigures] { [] }
    }
}
