import Foundation
import Logging
import NimbusWire
import WSClient

/// A device listening on the notification WebSocket, as a test sees it: frames arrive in
/// `frames`; `next(within:)` waits for one, `nothing(within:)` checks that none comes.
public final class NotificationListener: @unchecked Sendable {
    private let lock = NSLock()
    private var received: [JSON] = []
    private var task: Task<Void, Never>?
    /// The notifications the server replayed from the collection before `ready`.
    public private(set) var replayed: [JSON] = []

    /// Connects `client` (its user, tokens and device) with an optional collection token,
    /// and waits for the server's `ready` frame, keeping what was replayed before it.
    public static func connect(_ client: APIClient, syncToken: String? = nil) async throws -> NotificationListener {
        let listener = NotificationListener()
        let url = client.notificationSocketURL(syncToken: syncToken)
        listener.task = Task {
            _ = try? await WebSocketClient.connect(url: url, logger: Logger(label: "test-ws")) { inbound, _, _ in
                for try await message in inbound.messages(maxSize: 1 << 20) {
                    if case .text(let text) = message, let json = try? JSON.parse(text) { listener.append(json) }
                }
            }
        }
        while true {
            let frame = try await listener.next(within: 10)
            if frame["type"] == "ready" { return listener }
            listener.replayed.append(frame)
        }
    }

    private func append(_ frame: JSON) {
        lock.lock()
        received.append(frame)
        lock.unlock()
    }

    private func takeFirst() -> JSON? {
        lock.lock()
        defer { lock.unlock() }
        // Not a ternary: JSON is ExpressibleByNilLiteral, so `nil` there would be JSON.null.
        if received.isEmpty { return nil }
        return received.removeFirst()
    }

    /// How long a test waits for a frame it expects. A bound on a hang, not a measure: frames
    /// come in milliseconds, but on a slow machine running a pass beside PostgreSQL (CI,
    /// 2026-11-29) one query subscription's frame missed 5 s. A test that measures how soon a
    /// frame comes passes its own bound.
    public static let arrival: Double = 20

    /// The next frame, or a failure after `seconds`.
    public func next(within seconds: Double = NotificationListener.arrival) async throws -> JSON {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if let frame = takeFirst() { return frame }
            try await Task.sleep(nanoseconds: 5_000_000)
        }
        throw TestFailure("no notification frame within \(seconds) s")
    }

    /// Whether no frame arrives within `seconds`.
    public func nothing(within seconds: Double) async -> Bool {
        (try? await next(within: seconds)) == nil
    }

    public func close() {
        task?.cancel()
    }
}

extension APIClient {
    public func notificationSocketURL(syncToken: String? = nil) -> String {
        var url = baseURL.replacingOccurrences(of: "http://", with: "ws://")
            + "/device/1/\(container)/\(environment.rawValue)/notifications/connect" + query
        if let deviceID { url += "&ckDeviceID=\(deviceID)" }
        if let syncToken { url += "&syncToken=\(syncToken)" }
        return url
    }
}
