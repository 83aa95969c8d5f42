import CoreMetrics
import Foundation
import NimbusCore
import NimbusStorage
import NimbusWire
import Prometheus
import Synchronization

/// The server's figures for a monitor (docs/operations.md, "Metrics"): swift-metrics objects
/// over a Prometheus registry of this server's own (not the process-wide `MetricsSystem`, so
/// several servers in one process, as in the tests, never mix their figures), served in
/// Prometheus' text format at `GET /metrics` on `--metrics-port` and to operators on the main
/// port.
///
/// Request figures are counted as each answer goes out (`AccessLog`); figures that are states
/// (storage bytes, connections, the last backup) are read when a monitor scrapes, by the
/// sources added with `addSource`.
public final class ServerMetrics: Sendable {
    public let registry: PrometheusCollectorRegistry
    private let factory: PrometheusMetricsFactory
    /// One counter per label set, made on first use: a registry lookup takes its lock and
    /// builds the labels, which the record path should not pay per request.
    private let requestCounters = Mutex<[RequestKey: CoreMetrics.Counter]>([:])
    private let itemCounters = Mutex<[ItemKey: CoreMetrics.Counter]>([:])
    private let durations = Mutex<[String: CoreMetrics.Timer]>([:])
    private let sources = Mutex<[@Sendable (ServerMetrics) async -> Void]>([])
    /// The port `--metrics-port` listens on, once it does (0 before, or without one).
    public let metricsPort = Atomic<Int>(0)

    struct RequestKey: Hashable {
        var route: String
        var status: Int
        var code: String
    }

    struct ItemKey: Hashable {
        var route: String
        var code: String
    }

    /// Request durations in seconds: half a millisecond to ten seconds.
    static let durationBuckets: [Duration] = [
        .microseconds(500), .milliseconds(1), .microseconds(2_500), .milliseconds(5), .milliseconds(10), .milliseconds(25),
        .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2_500),
        .seconds(5), .seconds(10),
    ]

    public init() {
        registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.durationHistogramBuckets = ["nimbus_request_duration_seconds": Self.durationBuckets]
        self.factory = factory
    }

    /// One answered request: its route (the endpoint's template, never the client's path),
    /// status, `serverErrorCode` (empty for none), the codes of items that failed inside it,
    /// and how long it took.
    func countRequest(route: String, status: Int, code: String?, itemFailures: [ServerErrorCode], duration: Duration) {
        let key = RequestKey(route: route, status: status, code: code ?? "")
        let counter = requestCounters.withLock { counters in
            if let counter = counters[key] { return counter }
            let counter = CoreMetrics.Counter(
                label: "nimbus_requests_total", dimensions: [("route", route), ("status", "\(status)"), ("code", key.code)],
                factory: factory)
            counters[key] = counter
            return counter
        }
        counter.increment()
        let timer = durations.withLock { timers in
            if let timer = timers[route] { return timer }
            let timer = CoreMetrics.Timer(label: "nimbus_request_duration_seconds", dimensions: [("route", route)], factory: factory)
            timers[route] = timer
            return timer
        }
        timer.recordNanoseconds(duration.wholeNanoseconds)
        for code in itemFailures { itemCounter(route: route, code: code.description).increment() }
        if code == ServerErrorCode.throttled.description { throttled.increment() }
    }

    private func itemCounter(route: String, code: String) -> CoreMetrics.Counter {
        let key = ItemKey(route: route, code: code)
        return itemCounters.withLock { counters in
            if let counter = counters[key] { return counter }
            let counter = CoreMetrics.Counter(label: "nimbus_item_errors_total", dimensions: [("route", route), ("code", code)], factory: factory)
            counters[key] = counter
            return counter
        }
    }

    private var throttled: CoreMetrics.Counter { CoreMetrics.Counter(label: "nimbus_throttled_requests_total", factory: factory) }

    /// A gauge of this registry, set to `value`.
    public func set(_ name: String, _ value: Double, _ dimensions: [(String, String)] = []) {
        Gauge(label: name, dimensions: dimensions, factory: factory).record(value)
    }

    /// A counter of this registry, moved up to `total`: for figures another part keeps as
    /// running totals (APNs deliveries). Never moves down.
    public func advance(_ name: String, to total: Int64, _ dimensions: [(String, String)] = []) {
        let key = ([name] + dimensions.map { "\($0.0)=\($0.1)" }).joined(separator: "\u{0}")
        let step = lastTotals.withLock { totals -> Int64 in
            let before = totals[key] ?? 0
            totals[key] = max(before, total)
            return max(0, total - before)
        }
        // Made even for a step of 0, so the family is there from the first scrape.
        CoreMetrics.Counter(label: name, dimensions: dimensions, factory: factory).increment(by: step)
    }

    private let lastTotals = Mutex<[String: Int64]>([:])

    /// A figure read when a monitor scrapes.
    public func addSource(_ source: @escaping @Sendable (ServerMetrics) async -> Void) {
        sources.withLock { $0.append(source) }
    }

    /// Every figure, fresh, in Prometheus' text format.
    public func scrape() async -> [UInt8] {
        for source in sources.withLock({ $0 }) { await source(self) }
        return registry.emitToBuffer()
    }
}
