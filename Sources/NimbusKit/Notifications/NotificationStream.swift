import Foundation
import Logging
import NimbusWire
import WSClient

extension CKContainer {
    /// Nimbus's push channel for every platform: the container's notifications as they
    /// happen, over a WebSocket, without APNs. It starts now: what was in the collection
    /// before is not replayed (read it with `CKFetchNotificationChangesOperation`).
    ///
    /// ```swift
    /// for try await notification in container.notifications {
    ///     if notification is CKDatabaseNotification { try await fetchChanges() }
    /// }
    /// ```
    public var notifications: CKNotificationStream { CKNotificationStream(transport: transport, since: nil) }

    /// The notifications after `token` (a `nimbusSyncToken` the app kept), then live ones:
    /// nothing is missed across an app's restart.
    public func notifications(since token: CKServerChangeToken?) -> CKNotificationStream {
        CKNotificationStream(transport: transport, since: token?.syncToken, replay: token != nil)
    }
}

/// The WebSocket notification stream as an `AsyncSequence`. When the connection drops (the
/// server restarted, the network went away) it reconnects with the token of the last
/// notification it delivered, and the server replays what came meanwhile; so nothing is lost
/// and nothing is delivered twice. The user's own device's changes are not delivered.
/// Iteration ends with an error only for one that reconnecting cannot fix (a signed-out user).
public struct CKNotificationStream: AsyncSequence, Sendable {
    public typealias Element = CKNotification

    let transport: NimbusTransport
    let since: String?
    var replay = false

    /// The wait before the first reconnection; each further one waits twice as long, up to
    /// `maximumReconnectDelay`.
    static let firstReconnectDelay: Duration = .milliseconds(250)
    static let maximumReconnectDelay: Duration = .seconds(30)

    init(transport: NimbusTransport, since: String?, replay: Bool = false) {
        self.transport = transport
        self.since = since
        self.replay = replay
    }

    public func makeAsyncIterator() -> AsyncThrowingStream<CKNotification, any Error>.Iterator {
        let (stream, continuation) = AsyncThrowingStream<CKNotification, any Error>.makeStream(bufferingPolicy: .unbounded)
        let task = Task { [transport, since, replay] in
            await Self.pump(transport: transport, since: since, replay: replay, into: continuation)
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream.makeAsyncIterator()
    }

    /// Where the stream stands, shared with the WebSocket handler.
    private struct Cursor {
        /// The collection token of the last notification delivered (or of `ready`).
        var token: String?
        /// With no token the first connection replays the whole collection: skip it, and
        /// start from the token in `ready`.
        var skipping: Bool
        /// Whether the last connection got as far as `ready` (then reconnecting starts over
        /// with the shortest wait).
        var reachedReady = false
    }

    private static func pump(
        transport: NimbusTransport, since: String?, replay: Bool,
        into continuation: AsyncThrowingStream<CKNotification, any Error>.Continuation
    ) async {
        let cursor = Collector(Cursor(token: since, skipping: !replay))
        var delay = firstReconnectDelay
        let logger = Logger(label: "NimbusKit.notifications")
        while !Task.isCancelled {
            let url: String
            do {
                url = try await transport.notificationStreamURL(after: cursor.value.token)
            } catch {
                continuation.finish(throwing: error)
                return
            }
            cursor.update { $0.reachedReady = false }
            var refused: CKError?
            do {
                _ = try await WebSocketClient.connect(url: url, logger: logger) { inbound, _, _ in
                    for try await message in inbound.messages(maxSize: 1 << 20) {
                        guard case .text(let text) = message, let frame = try? JSON.parse(text) else { continue }
                        Self.handle(frame, cursor: cursor, continuation: continuation)
                    }
                }
            } catch is WebSocketClientError {
                // The server refused the upgrade: a plain request tells why, with the
                // CloudKit error (a signed-out user, a pruned token).
                refused = await Self.refusal(transport: transport, token: cursor.value.token)
            } catch {
                // A dropped connection: reconnect below.
            }
            if let refused {
                if refused.code == .changeTokenExpired {
                    // The collection was pruned past our token: start again from now.
                    cursor.update { $0 = Cursor(token: nil, skipping: true) }
                } else if refused.code != .networkFailure && refused.code != .serviceUnavailable {
                    continuation.finish(throwing: refused)
                    return
                }
            }
            if cursor.value.reachedReady { delay = firstReconnectDelay }
            do { try await Task.sleep(for: delay) } catch { break }
            delay = Swift.min(delay * 2, maximumReconnectDelay)
        }
        continuation.finish()
    }

    private static func handle(
        _ frame: JSON, cursor: Collector<Cursor>, continuation: AsyncThrowingStream<CKNotification, any Error>.Continuation
    ) {
        // A frame this version does not read (a newer server's) is skipped.
        guard let frame = try? NotificationStreamFrame(body: frame) else { return }
        switch frame {
        case .ready(let syncToken):
            cursor.update {
                $0.skipping = false
                $0.reachedReady = true
                $0.token = syncToken.isEmpty ? $0.token : syncToken
            }
        case .notification(_, let payload, let frameToken):
            let skipping = cursor.value.skipping
            if !skipping { cursor.update { $0.token = frameToken } }
            guard !skipping, let notification = CKNotification.make(payload: payload) else { return }
            notification.nimbusSyncToken = CKServerChangeToken(syncToken: frameToken)
            continuation.yield(notification)
        case .badge:
            return
        }
    }

    /// Why the server would not open the stream, as a `CKError` (networkFailure when the
    /// server is not reachable at all).
    private static func refusal(transport: NimbusTransport, token: String?) async -> CKError? {
        do {
            _ = try NimbusTransport.read(
                NotificationChangesResponse.self,
                from: await transport.device("notifications/changes", NotificationChangesRequest(syncToken: token, resultsLimit: 1).json),
                endpoint: "notifications/changes")
            return nil
        } catch {
            return error
        }
    }
}
