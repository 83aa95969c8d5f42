import Foundation
import NimbusCore
import NimbusStorage
import NimbusWire

/// CloudKit JS's web-courier long poll: a browser registers a token from `tokens/create`,
/// then polls `GET /webcourier/aps?tok=…`. A poll answers at once with the oldest waiting
/// notification's payload, or waits up to `pollTimeout` for one and answers 204 if none came.
///
/// Mailboxes exist for tokens that have polled: a notification before a token's first poll
/// is not queued (the client reads it from the notification collection, as after any gap).
/// Each mailbox keeps at most `mailboxLimit` payloads; a mailbox not polled for
/// `idleLifetime` is dropped.
final class WebCourier: NotificationSink, @unchecked Sendable {
    static let mailboxLimit = 100
    static let idleLifetime: TimeInterval = 600

    private struct Waiter {
        let id: UUID
        let continuation: CheckedContinuation<[UInt8]?, Never>
    }

    private struct Mailbox {
        let deviceID: String
        var queue: [[UInt8]] = []
        var waiter: Waiter?
        var lastPoll: Date
    }

    let service: NimbusService
    let pollTimeout: Duration
    private let lock = NSLock()
    /// By owner, then by token: a notification goes to its owner's mailboxes only.
    private var mailboxes: [NotificationOwner: [String: Mailbox]] = [:]

    init(service: NimbusService, pollTimeout: Duration) {
        self.service = service
        self.pollTimeout = pollTimeout
    }

    /// The next payload for a registered token, or nil when `pollTimeout` passes first. A
    /// newer poll for the same token ends an older one (with nil).
    func poll(token: PushTokenRow) async -> [UInt8]? {
        let id = UUID()
        let timeout = pollTimeout
        return await withCheckedContinuation { continuation in
            let (ready, superseded) = withLock { () -> ([UInt8]?, Waiter?) in
                var mailbox = mailboxes[token.owner]?[token.token] ?? Mailbox(deviceID: token.deviceID, lastPoll: Date())
                mailbox.lastPoll = Date()
                defer { mailboxes[token.owner, default: [:]][token.token] = mailbox }
                if !mailbox.queue.isEmpty { return (mailbox.queue.removeFirst(), nil) }
                let previous = mailbox.waiter
                mailbox.waiter = Waiter(id: id, continuation: continuation)
                return (nil, previous)
            }
            superseded?.continuation.resume(returning: nil)
            if let ready {
                continuation.resume(returning: ready)
                return
            }
            Task {
                try? await Task.sleep(for: timeout)
                self.expire(token, waiter: id)
            }
        }
    }

    private func expire(_ token: PushTokenRow, waiter id: UUID) {
        let waiter = withLock { () -> Waiter? in
            guard let waiter = mailboxes[token.owner]?[token.token]?.waiter, waiter.id == id else { return nil }
            mailboxes[token.owner]?[token.token]?.waiter = nil
            return waiter
        }
        waiter?.continuation.resume(returning: nil)
    }

    private func withLock<T>(_ body: () -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body()
    }

    // MARK: NotificationSink

    func deliver(_ notifications: [PushedNotification]) {
        for notification in notifications {
            post(notification.payload.serialized(), to: notification.owner, where: { notification.isFor(deviceID: $0) }) { deviceID in
                // The sync doctor's "pushes sent" (docs/sync-doctor.md).
                self.service.notePushed(owner: notification.owner, deviceID: deviceID, sequence: notification.sequence)
            }
        }
    }

    func deliverBadge(_ value: Int64, to owner: NotificationOwner, from deviceID: String) {
        post(JSON.object([WireKey.aps: [WireKey.badge: .int(value)]]).serialized(), to: owner) { $0 != deviceID }
    }

    /// Hands `payload` to each recipient's waiting poll or mailbox; `sent` hears each device it went to.
    private func post(
        _ payload: [UInt8], to owner: NotificationOwner, where isRecipient: (String) -> Bool, sent: (String) -> Void = { _ in }
    ) {
        let now = Date()
        let woken = withLock { () -> [Waiter] in
            guard var boxes = mailboxes[owner] else { return [] }
            var woken: [Waiter] = []
            for (token, var mailbox) in boxes {
                if mailbox.waiter == nil, now.timeIntervalSince(mailbox.lastPoll) > Self.idleLifetime {
                    boxes[token] = nil
                    continue
                }
                guard isRecipient(mailbox.deviceID) else { continue }
                if let waiter = mailbox.waiter {
                    // The waiting poll takes this payload; the queue keeps later ones.
                    mailbox.waiter = nil
                    woken.append(waiter)
                    sent(mailbox.deviceID)
                } else if mailbox.queue.count < Self.mailboxLimit {
                    mailbox.queue.append(payload)
                    sent(mailbox.deviceID)
                }
                boxes[token] = mailbox
            }
            mailboxes[owner] = boxes.isEmpty ? nil : boxes
            return woken
        }
        for waiter in woken { waiter.continuation.resume(returning: payload) }
    }
}
