import Foundation
import HTTPTypes
import HummingbirdCore
import HummingbirdWebSocket
import Logging
import NIOCore
import NimbusCore
import NimbusStorage
import NimbusWire
import ServiceLifecycle

/// The WebSocket notification stream: `GET /device/1/{container}/{environment}/notifications/connect`
/// with `ckAPIToken`, `ckWebAuthToken`, optionally `ckDeviceID` (this device's own changes are
/// not sent to it) and `syncToken` (where the device's collection left off).
///
/// On connect the server first sends what the collection holds after `syncToken`, then
/// `{"type": "ready", "syncToken": …}`, then live notifications as they are stored, each
/// with the collection token just after it. A device that reconnects with its last token
/// misses nothing, also across server restarts.
enum NotificationSocket {
    static let path = "notifications/connect"

    /// Whether a request path (no query) is the stream's: `/device/1/{c}/{env}/notifications/connect`.
    @Sendable static func isStreamPath(_ path: String) -> Bool {
        let parts = path.split(separator: "/")
        return parts.count == 6 && parts[0] == "device" && parts[1] == "1" && "\(parts[4])/\(parts[5])" == Self.path
    }

    /// Upgrades requests for the notification stream that authenticate and name a valid sync
    /// token. A refused upgrade is answered with CloudKit's error JSON saying why (the guard
    /// writes it in place of the framework's empty 400), so the client sees an error it can read.
    static func shouldUpgrade(
        _ request: HTTPRequest, channel: any Channel, service: NimbusService, connections: LiveConnections
    ) async -> ShouldUpgradeResult<WebSocketDataHandler<HTTP1WebSocketUpgradeChannel.Context>> {
        guard let components = request.path.flatMap({ URLComponents(string: $0) }), isStreamPath(components.path) else {
            return .dontUpgrade  // the guard has answered already: not a WebSocket endpoint
        }
        func refuse(_ error: CloudKitError) async -> ShouldUpgradeResult<WebSocketDataHandler<HTTP1WebSocketUpgradeChannel.Context>> {
            await RequestGuardHandler.noteRefusedUpgrade(error, on: channel)
            return .dontUpgrade
        }
        let parts = components.path.split(separator: "/").map(String.init)
        let environment: NimbusStorage.Environment
        do {
            environment = try Authentication.environment(named: parts[3])
        } catch {
            return await refuse(error)
        }
        var query: [String: String] = [:]
        for item in components.queryItems ?? [] { query[item.name] = item.value ?? "" }
        let deviceID = query[WireKey.ckDeviceID].flatMap { $0.isEmpty ? nil : $0 } ?? Names.anonymousDevice
        let caller: Caller
        let user: Caller.User
        do {
            caller = try await service.authenticate(
                container: parts[2], environment: environment, apiToken: query[WireKey.ckAPIToken],
                webAuthToken: query[WireKey.ckWebAuthToken], deviceID: deviceID)
            user = try caller.requireUser(for: "The notification stream")
            _ = try await service.notificationChanges(caller, token: query[WireKey.syncToken], limit: 1)
        } catch let error as CloudKitError {
            return await refuse(error)
        } catch {
            return await refuse(CloudKitError(.internalError, "the notification stream could not start; try again"))
        }
        let owner = NotificationOwner(container: caller.container, environment: caller.environment, userID: user.id)
        let since = query[WireKey.syncToken]
        return .upgrade([:]) { inbound, outbound, _ in
            // Registered before the replay, so nothing falls between the two; live frames
            // wait in the connection until the replay is written.
            let connection = connections.connect(owner: owner, deviceID: deviceID, outbound: outbound)
            defer { connections.disconnect(owner: owner, connection) }
            let replayedThrough = try await replay(caller: caller, since: since, service: service, outbound: outbound)
            connection.ready(replayedThrough: replayedThrough)
            // Nothing is expected from the client; reading notices its close (and answers pings).
            for try await _ in inbound.messages(maxSize: 4_096) {}
        }
    }

    /// Writes the collection after `token`, then `ready`; returns the last sequence written.
    private static func replay(
        caller: Caller, since token: String?, service: NimbusService, outbound: WebSocketOutboundWriter
    ) async throws -> Int64 {
        var token = token
        var replayedThrough: Int64 = 0
        while true {
            let page = try await service.notificationChanges(caller, token: token, limit: Limits.notificationsPerPage.value)
            for row in page.notifications {
                try await outbound.write(
                    .text(
                        LiveConnections.text(
                            .notification(
                                notificationID: row.notificationID, payload: try JSON.parse(row.payload),
                                syncToken: service.notificationToken(for: row)))))
                replayedThrough = row.sequence
            }
            token = page.syncToken
            if !page.moreComing { break }
        }
        try await outbound.write(.text(LiveConnections.text(.ready(syncToken: token ?? ""))))
        return replayedThrough
    }
}

/// Runs the notification pipeline beside the HTTP server, prunes the collection (and the
/// modify answers kept for retries) hourly, pings
/// every WebSocket every 30 seconds, and
/// on shutdown lets the pipeline finish what was submitted.
struct NotificationPipelineService: Service {
    let service: NimbusService
    let connections: LiveConnections

    func run() async throws {
        let pruning = Task {
            while !Task.isCancelled {
                _ = try? await service.pruneNotifications()
                _ = try? await service.pruneOperationOutcomes()
                try? await Task.sleep(nanoseconds: 3_600 * 1_000_000_000)
            }
        }
        let pinging = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: LiveConnections.pingInterval)
                connections.pingAll()
            }
        }
        await withGracefulShutdownHandler {
            await service.runNotificationPipeline()
        } onGracefulShutdown: {
            service.notificationHub.finish()
            connections.disconnectAll()
        }
        pruning.cancel()
        pinging.cancel()
    }
}
