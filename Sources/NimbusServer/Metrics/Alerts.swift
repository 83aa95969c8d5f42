import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NimbusCore
import NimbusWire
import ServiceLifecycle

/// One threshold on the server's figures (`nimbus serve --alert`, docs/operations.md, "Alerts"):
/// `server-errors>1%`, `p99>800ms`, `throttled>10/min`, `backup-age>26h`.
public struct AlertRule: Sendable, Hashable, CustomStringConvertible {
    public enum Figure: String, Sendable, CaseIterable {
        /// The share of requests answered with a 5xx status, over the window.
        case serverErrors = "server-errors"
        /// The 99th percentile of request durations over the window, in milliseconds.
        case p99
        /// Requests refused `THROTTLED`, per minute over the window.
        case throttled
        /// Seconds since the server's last successful backup (since it started, before its first).
        case backupAge = "backup-age"
    }

    public var figure: Figure
    /// In the figure's unit: a fraction, milliseconds, per minute, seconds.
    public var threshold: Double
    /// The rule as the operator wrote it.
    public let text: String

    public var description: String { text }

    public init(parsing text: String) throws(CloudKitError) {
        let trimmed = text.replacingOccurrences(of: " ", with: "")
        let parts = trimmed.split(separator: ">", maxSplits: 1).map(String.init)
        guard parts.count == 2, let figure = Figure(rawValue: parts[0]) else {
            throw .badRequest(
                "--alert '\(text)': write FIGURE>THRESHOLD with FIGURE one of \(Figure.allCases.map(\.rawValue).joined(separator: ", ")), as in p99>800ms")
        }
        func number(_ text: Substring) -> Double? { Double(text).flatMap { $0.isFinite && $0 >= 0 ? $0 : nil } }
        let value = parts[1]
        let threshold: Double?
        switch figure {
        case .serverErrors:
            threshold = value.hasSuffix("%") ? number(value.dropLast()).map { $0 / 100 } : nil
        case .p99:
            threshold = value.hasSuffix("ms") ? number(value.dropLast(2)) : value.hasSuffix("s") ? number(value.dropLast()).map { $0 * 1_000 } : nil
        case .throttled:
            threshold = value.hasSuffix("/min") ? number(value.dropLast(4)) : nil
        case .backupAge:
            threshold = value.hasSuffix("h") ? number(value.dropLast()).map { $0 * 3_600 } : value.hasSuffix("m") ? number(value.dropLast()).map { $0 * 60 } : nil
        }
        guard let threshold else {
            let units = [Figure.serverErrors: "a percentage (1%)", .p99: "ms or s (800ms)", .throttled: "a count per minute (10/min)", .backupAge: "h or m (26h)"]
            throw .badRequest("--alert '\(text)': \(figure.rawValue)'s threshold is \(units[figure] ?? "a number")")
        }
        self.figure = figure
        self.threshold = threshold
        self.text = "\(figure.rawValue)>\(value)"
    }
}

/// Where and how alerts go.
public struct AlertSettings: Sendable {
    public var rules: [AlertRule] = []
    /// Called with a JSON POST when a rule is crossed and when it clears.
    public var webhook: String?
    /// The stretch of traffic a request figure covers.
    public var window: Duration = .seconds(300)
    /// How often the rules are checked.
    public var every: Duration = .seconds(30)

    public init(rules: [AlertRule] = [], webhook: String? = nil) {
        self.rules = rules
        self.webhook = webhook
    }
}

/// Checks the rules against this node's figures (the request log's minutes, the backups) and
/// calls the webhook when one is crossed and when it clears. Each node watches its own traffic.
struct AlertWatcher: Service {
    let settings: AlertSettings
    let requests: RequestLog
    let backups: BackupKeeper?
    let clock: any WallClock
    let logger: Logger
    let started = Date()

    func run() async throws {
        guard !settings.rules.isEmpty else { return try await gracefulShutdown() }
        await cancelWhenGracefulShutdown {
            var firing: [String: Bool] = [:]
            while !Task.isCancelled {
                for rule in settings.rules {
                    let value = await value(of: rule.figure)
                    let crossed = value.map { $0 > rule.threshold } ?? false
                    guard crossed != (firing[rule.text] ?? false) else { continue }
                    firing[rule.text] = crossed
                    await announce(rule, crossed: crossed, value: value)
                }
                do { try await Task.sleep(for: settings.every) } catch { return }
            }
        }
    }

    /// The figure now; nil when there is nothing to measure (no requests in the window).
    func value(of figure: AlertRule.Figure) async -> Double? {
        let now = clock.nowMilliseconds()
        let windowMilliseconds = settings.window.wholeNanoseconds / 1_000_000
        var figures = RequestLog.Figures()
        for minute in requests.lastHour(now: now, visible: { _ in true }) where minute.start >= now - windowMilliseconds {
            figures.add(minute.figures)
        }
        switch figure {
        case .serverErrors:
            return figures.requests == 0 ? nil : Double(figures.serverErrors) / Double(figures.requests)
        case .p99:
            return figures.percentile(0.99)
        case .throttled:
            let minutes = max(1, Double(windowMilliseconds) / 60_000)
            return Double(figures.errors[ServerErrorCode.throttled.description] ?? 0) / minutes
        case .backupAge:
            guard let backups else { return nil }
            let status = await backups.status()
            guard status.directory != nil else { return nil }
            return Date().timeIntervalSince(status.lastSuccess?.at ?? started)
        }
    }

    private func announce(_ rule: AlertRule, crossed: Bool, value: Double?) async {
        let state = crossed ? "firing" : "resolved"
        let shown = value.map { Self.format($0, rule.figure) } ?? "no traffic"
        let metadata: Logger.Metadata = ["alert": "\(rule.text)", "value": "\(shown)"]
        if crossed { logger.warning("alert firing", metadata: metadata) } else { logger.notice("alert resolved", metadata: metadata) }
        guard let webhook = settings.webhook else { return }
        let formatter = ISO8601DateFormatter()
        var body: JSONObject = [
            "alert": .string(rule.text), "figure": .string(rule.figure.rawValue), "state": .string(state),
            "threshold": .double(rule.threshold), "at": .string(formatter.string(from: Date())),
            // Chat services (Slack, Mattermost) show `text` as it is.
            "text": .string("Nimbus alert \(rule.text) \(state): \(shown)"),
        ]
        if let value { body["value"] = .double(value) }
        await post(JSON.object(body).serialized(), to: webhook, alert: rule.text)
    }

    /// Three tries, a second and then two apart; a webhook that never answers is logged.
    private func post(_ bytes: [UInt8], to url: String, alert: String) async {
        for attempt in 1...3 {
            do {
                var request = HTTPClientRequest(url: url)
                request.method = .POST
                request.headers.add(name: "Content-Type", value: "application/json")
                request.body = .bytes(ByteBuffer(bytes: bytes))
                let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
                _ = try await response.body.collect(upTo: 64 * 1_024)
                if (200..<300).contains(response.status.code) { return }
                logger.warning("alert webhook refused", metadata: ["alert": "\(alert)", "status": "\(response.status.code)"])
            } catch {
                logger.warning("alert webhook unreachable", metadata: ["alert": "\(alert)", "reason": "\(error)"])
            }
            if attempt < 3 { try? await Task.sleep(for: .seconds(attempt)) }
        }
        logger.error("alert not delivered", metadata: ["alert": "\(alert)", "webhook": "\(url)"])
    }

    static func format(_ value: Double, _ figure: AlertRule.Figure) -> String {
        switch figure {
        case .serverErrors: String(format: "%.2f%%", value * 100)
        case .p99: String(format: "%.1f ms", value)
        case .throttled: String(format: "%.1f/min", value)
        case .backupAge: String(format: "%.1f h", value / 3_600)
        }
    }
}
