import Foundation
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

    /// The largest frame a device may send; it is expected to send nothing but pings, pongs and
    /// its close. A larger one closes the stream with 1009 (NIO's protocol error handler).
    static let maxFrameSize = 4_096

    /// A stream request that authenticated and named a valid sync token: who listens, and where
    /// the collection's replay starts.
    struct Accepted: Sendable {
        let caller: Caller
        let owner: NotificationOwner
        let deviceID: String
        let since: String?
    }

    /// Decides an upgrade request for the notification stream: accepted when it authenticates
    /// and names a valid sync token. A refused upgrade is answered with CloudKit's error JSON
    /// saying why (the guard writes it in place of the empty 400), so the client sees an error
    /// it can read.
    static func accept(uri: String, channel: any Channel, service: NimbusService) async -> Accepted? {
        guard let components = URLComponents(string: uri), isStreamPath(components.path) else {
            return nil  // the guard has answered already: not a WebSocket endpoint
        }
        func refuse(_ error: CloudKitError) async -> Accepted? {
            await RequestGuardHandler.noteRefusedUpgrade(error, on: channel)
            return nil
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
        return Accepted(caller: caller, owner: owner, deviceID: deviceID, since: query[WireKey.syncToken])
    }

    /// Starts an upgraded stream, on the connection's task: the collection after the device's
    /// token, then `ready`, then live frames, which the connection queued meanwhile (it was
    /// registered before this runs, so nothing falls between the two). The task ends here;
    /// the connection lives on in its pipeline (`NotificationStreamChannel`).
    static func start(_ accepted: Accepted, on connection: LiveConnections.Connection, service: NimbusService) async {
        do {
            let replayedThrough = try await replay(caller: accepted.caller, since: accepted.since, service: service, to: connection)
            connection.ready(replayedThrough: replayedThrough)
        } catch {
            // The device left during the replay, or the collection could not be read: the
            // device reconnects with its token and misses nothing.
            connection.end(.unexpectedServerError)
        }
    }

    /// Writes the collection after `token`, then `ready`; returns the last sequence written.
    private static func replay(
        caller: Caller, since token: String?, service: NimbusService, to connection: LiveConnections.Connection
    ) async throws -> Int64 {
        var token = token
        var replayedThrough: Int64 = 0
        while true {
            let page = try await service.notificationChanges(caller, token: token, limit: Limits.notificationsPerPage.value)
            for row in page.notifications {
                try await connection.write(
                    LiveConnections.text(
                        .notification(
                            notificationID: row.notificationID, payload: try JSON.parse(row.payload),
                            syncToken: service.notificationToken(for: row))))
                replayedThrough = row.sequence
            }
            token = page.syncToken
            if !page.moreComing { break }
        }
        try await connection.write(LiveConnections.text(.ready(syncToken: token ?? "")))
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
