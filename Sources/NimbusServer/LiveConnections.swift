import Foundation
import NimbusCore
import NimbusStorage
import NimbusWire

/// The devices listening on a WebSocket (`/device/1/{c}/{env}/notifications/connect`), by
/// owner: a notification goes to each of the owner's connections except the device that
/// caused it. Each connection has a bounded queue; a device too slow to drain it misses
/// pushes and recovers them from the collection, as after any disconnection.
final class LiveConnections: NotificationSink, @unchecked Sendable {
    enum Outbound: Sendable {
        case notification(PushedNotification)
        case badge(Int64)
    }

    struct Connection {
        let deviceID: String
        let continuation: AsyncStream<Outbound>.Continuation
    }

    /// Frames waiting for a slow connection; past this, new ones are dropped.
    static let queueLimit = 1_024

    private let lock = NSLock()
    private var connections: [NotificationOwner: [UUID: Connection]] = [:]

    /// Registers a connection; its outbound stream ends when it is removed.
    func connect(owner: NotificationOwner, deviceID: String) -> (UUID, AsyncStream<Outbound>) {
        let (stream, continuation) = AsyncStream<Outbound>.makeStream(bufferingPolicy: .bufferingOldest(Self.queueLimit))
        let id = UUID()
        lock.lock()
        connections[owner, default: [:]][id] = Connection(deviceID: deviceID, continuation: continuation)
        lock.unlock()
        return (id, stream)
    }

    func disconnect(owner: NotificationOwner, id: UUID) {
        lock.lock()
        let connection = connections[owner]?.removeValue(forKey: id)
        if connections[owner]?.isEmpty == true { connections[owner] = nil }
        lock.unlock()
        connection?.continuation.finish()
    }

    /// Ends every connection's stream (server shutdown).
    func disconnectAll() {
        lock.lock()
        let all = connections.values.flatMap(\.values)
        connections = [:]
        lock.unlock()
        for connection in all { connection.continuation.finish() }
    }

    var count: Int {
        lock.lock()
        defer { lock.unlock() }
        return connections.values.reduce(0) { $0 + $1.count }
    }

    private func listeners(of owner: NotificationOwner) -> [Connection] {
        lock.lock()
        defer { lock.unlock() }
        return connections[owner].map { Array($0.values) } ?? []
    }

    func deliver(_ notifications: [PushedNotification]) {
        for notification in notifications {
            for connection in listeners(of: notification.owner) where notification.isFor(deviceID: connection.deviceID) {
                connection.continuation.yield(.notification(notification))
            }
        }
    }

    func deliverBadge(_ value: Int64, to owner: NotificationOwner, from deviceID: String) {
        for connection in listeners(of: owner) where connection.deviceID != deviceID {
            connection.continuation.yield(.badge(value))
        }
    }

    /// A WebSocket text frame: `{"type": "notification", "notificationID", "payload", "syncToken"}`,
    /// `{"type": "badge", "badgeValue"}` or, after the replay, `{"type": "ready", "syncToken"}`.
    static func frame(notificationID: String, payload: JSON, syncToken: String) -> String {
        frameText([
            "type": "notification", "notificationID": .string(notificationID), "payload": payload,
            "syncToken": .string(syncToken),
        ])
    }

    static func frameText(_ object: JSONObject) -> String {
        String(decoding: JSON.object(object).serialized(), as: UTF8.self)
    }
}
