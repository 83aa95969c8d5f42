import Foundation
import NIOCore
import NIOWebSocket
import NimbusCore
import NimbusStorage
import NimbusWire

/// The devices listening on a WebSocket (`/device/1/{c}/{env}/notifications/connect`), by
/// owner: a notification goes to each of the owner's connections except the device that
/// caused it.
///
/// Memory per idle connection matters (10,000 idle devices is an ordinary load), so an idle
/// connection has no task at all: it is a NIO pipeline that answers pings and closes
/// (`NotificationStreamChannel`), frames wait in the connection's queue, and a writer task
/// runs only while there is something to write. One loop pings every connection
/// (`pingAll`), instead of a ping task per connection. A device too slow to drain its queue
/// (`queueLimit`) misses pushes and recovers them from the collection, as after any
/// disconnection.
final class LiveConnections: NotificationSink, @unchecked Sendable {
    enum Outbound: Sendable {
        case notification(PushedNotification)
        case badge(Int64)
        case ping
    }

    /// Told of each notification handed to a device's connection (the sync doctor's "pushes
    /// sent"): the owner, the device, the notification's sequence.
    let onPushed: (@Sendable (NotificationOwner, String, Int64) -> Void)?

    init(onPushed: (@Sendable (NotificationOwner, String, Int64) -> Void)? = nil) {
        self.onPushed = onPushed
    }

    /// Frames waiting for a slow connection; past this, new ones are dropped.
    static let queueLimit = 1_024
    /// How often every connection is pinged, so a peer that vanished is noticed (the write
    /// fails and the connection closes).
    static let pingInterval: Duration = .seconds(30)

    /// One open stream.
    final class Connection: @unchecked Sendable {
        let deviceID: String
        /// The upgraded channel: its pipeline ends in NIO's WebSocket frame encoder.
        private let channel: any Channel
        private let lock = NSLock()
        private var queue: [Outbound] = []
        /// Until the replay is written, live frames only queue.
        private var isReady = false
        private var isWriting = false
        private var isClosed = false
        /// Notifications up to this sequence went out in the replay: not again.
        private var replayedThrough: Int64 = 0

        init(deviceID: String, channel: any Channel) {
            self.deviceID = deviceID
            self.channel = channel
        }

        /// Writes one text frame and waits until it is written (the replay's pace is the
        /// device's).
        func write(_ text: String) async throws {
            try await write(WebSocketFrame(fin: true, opcode: .text, data: ByteBuffer(string: text)))
        }

        private func write(_ frame: WebSocketFrame) async throws {
            try await channel.writeAndFlush(frame).get()
        }

        /// Closes the stream from the server's side: a close frame with `code`, then the
        /// connection (its close unregisters it).
        func end(_ code: WebSocketErrorCode) {
            close()
            var data = ByteBuffer()
            data.write(webSocketErrorCode: code)
            let channel = channel
            channel.writeAndFlush(WebSocketFrame(fin: true, opcode: .connectionClose, data: data)).whenComplete { _ in
                channel.close(promise: nil)
            }
        }

        func enqueue(_ item: Outbound) {
            lock.lock()
            guard !isClosed, queue.count < LiveConnections.queueLimit else {
                lock.unlock()
                return
            }
            queue.append(item)
            let startWriter = isReady && !isWriting
            if startWriter { isWriting = true }
            lock.unlock()
            if startWriter { Task { await self.drain() } }
        }

        /// The replay is written: frames queued meanwhile follow, less those it covered.
        func ready(replayedThrough sequence: Int64) {
            lock.lock()
            replayedThrough = sequence
            isReady = true
            let startWriter = !queue.isEmpty && !isWriting
            if startWriter { isWriting = true }
            lock.unlock()
            if startWriter { Task { await self.drain() } }
        }

        func close() {
            lock.lock()
            isClosed = true
            queue = []
            lock.unlock()
        }

        /// The next frame to write, or nil (and the writer stops) when none waits.
        private func next() -> (Outbound, Int64)? {
            lock.withLock {
                guard !isClosed, !queue.isEmpty else {
                    isWriting = false
                    return nil
                }
                return (queue.removeFirst(), replayedThrough)
            }
        }

        private func drain() async {
            while let (item, replayedThrough) = next() {
                do {
                    switch item {
                    case .notification(let notification):
                        guard notification.sequence > replayedThrough else { continue }
                        try await write(
                            LiveConnections.text(
                                .notification(
                                    notificationID: notification.notificationID, payload: notification.payload,
                                    syncToken: notification.syncToken)))
                    case .badge(let value):
                        try await write(LiveConnections.text(.badge(value)))
                    case .ping:
                        try await write(WebSocketFrame(fin: true, opcode: .ping, data: ByteBuffer()))
                    }
                } catch {
                    close()  // the connection is gone; its reading task ends and unregisters it
                    return
                }
            }
        }
    }

    private let lock = NSLock()
    private var connections: [NotificationOwner: [ObjectIdentifier: Connection]] = [:]

    /// Registers a connection; it queues live frames until `ready(replayedThrough:)`.
    func connect(owner: NotificationOwner, deviceID: String, channel: any Channel) -> Connection {
        let connection = Connection(deviceID: deviceID, channel: channel)
        lock.lock()
        connections[owner, default: [:]][ObjectIdentifier(connection)] = connection
        lock.unlock()
        return connection
    }

    func disconnect(owner: NotificationOwner, _ connection: Connection) {
        lock.lock()
        connections[owner]?[ObjectIdentifier(connection)] = nil
        if connections[owner]?.isEmpty == true { connections[owner] = nil }
        lock.unlock()
        connection.close()
    }

    /// Closes every connection with 1001, going away (server shutdown).
    func disconnectAll() {
        lock.lock()
        let all = connections.values.flatMap(\.values)
        connections = [:]
        lock.unlock()
        for connection in all { connection.end(.goingAway) }
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
                connection.enqueue(.notification(notification))
                onPushed?(notification.owner, connection.deviceID, notification.sequence)
            }
        }
    }

    func deliverBadge(_ value: Int64, to owner: NotificationOwner, from deviceID: String) {
        for connection in listeners(of: owner) where connection.deviceID != deviceID {
            connection.enqueue(.badge(value))
        }
    }

    /// Pings every connection (called every `pingInterval`).
    func pingAll() {
        lock.lock()
        let all = connections.values.flatMap(\.values)
        lock.unlock()
        for connection in all { connection.enqueue(.ping) }
    }

    /// A WebSocket text frame (`NotificationStreamFrame`: a notification, the badge, or `ready`
    /// after the replay).
    static func text(_ frame: NotificationStreamFrame) -> String {
        String(decoding: frame.json.serialized(), as: UTF8.self)
    }
}
