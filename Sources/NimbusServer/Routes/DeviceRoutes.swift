import NimbusCore
import NimbusWire

/// Push registration and the notification collection, for the signed-in user (container-wide,
/// not per database), under `/device/1/{container}/{environment}/`. The `tokens/` routes are
/// also served under `/database/1/{container}/{environment}/` and `…/{database}/` (reference §1.3).
///
/// | path | service |
/// |---|---|
/// | `tokens/create` | `createWebCourierToken` (hands out a `webcourierURL` on this server's public address) |
/// | `tokens/register` | `registerPushToken` |
/// | `notifications/changes` | `notificationChangesResponse` |
/// | `notifications/markRead` | `markNotificationsRead` |
/// | `badge/modify` | `modifyBadge` |
/// | `notifications/connect` | the WebSocket stream (`NotificationSocket`); over plain HTTP, why it was not upgraded |
enum DeviceRoutes {
    static let tokenRoutes: [Route] = [
        .json("tokens/create") { input in
            try await input.service.createWebCourierToken(
                input.caller, body: input.body(), baseURL: input.context.exchange.baseURL(for: input.request))
        },
        .json("tokens/register") { try await $0.service.registerPushToken($0.caller, body: $0.body()) },
    ]

    static let routes: [Route] =
        tokenRoutes + [
            .json("notifications/changes", .reads, cost: .page) {
                try await $0.service.notificationChangesResponse($0.caller, NotificationChangesRequest(json: $0.body()))
            },
            .json("notifications/markRead") {
                try await $0.service.markNotificationsRead($0.caller, MarkNotificationsReadRequest(json: $0.body()))
            },
            .json("badge/modify") { try await $0.service.modifyBadge($0.caller, BadgeModifyRequest(json: $0.body())) },
            Route(NotificationSocket.path, .reads) { input in
                let caller = try input.caller
                _ = try caller.requireUser(for: "The notification stream")
                if let token = input.query(WireKey.syncToken) {
                    _ = try await input.service.notificationChanges(caller, token: token, limit: 1)
                }
                throw CloudKitError.badRequest(
                    "\(NotificationSocket.path) is a WebSocket: connect with an Upgrade: websocket request")
            },
        ]
}
