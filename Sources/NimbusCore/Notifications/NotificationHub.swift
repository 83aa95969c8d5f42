import Foundation
import NimbusStorage
import NimbusWire

/// A notification as stored in a user's collection and pushed to their devices.
public struct PushedNotification: Sendable {
    public var owner: NotificationOwner
    public var sequence: Int64
    public var notificationID: String
    /// The device whose change caused it (`iCloud` when the request named none); that device
    /// is not told.
    public var originDeviceID: String
    /// The push payload (`aps` and `ck`, reference §11.3).
    public var payload: JSON
    /// `apns-collapse-id`: later pushes with the same ID replace earlier ones on the device.
    public var collapseID: String?
    /// Nothing to show: an APNs background push at priority 5 rather than an alert at 10.
    public var isSilent: Bool
    /// The collection token just after this notification, for a client that resumes.
    public var syncToken: String

    /// Whether `deviceID` should be told: every device but the one that made the change.
    public func isFor(deviceID: String) -> Bool {
        originDeviceID == Names.anonymousDevice || originDeviceID != deviceID
    }
}

/// Where notifications go once they are in the collection: open WebSockets, APNs, web-courier
/// polls. `deliver` is called from the notification pipeline and must not wait: a sink
/// queues, and sends on its own tasks.
public protocol NotificationSink: Sendable {
    func deliver(_ notifications: [PushedNotification])
    /// A badge change for every device of the owner (`CKModifyBadgeOperation`).
    func deliverBadge(_ value: Int64, to owner: NotificationOwner, from deviceID: String)
}

/// A value behind a lock; NimbusCore runs on macOS 14, before `Synchronization.Mutex`.
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}

/// The hand-off between writers and the notification pipeline. A writer puts what it changed
/// in the change outbox, in its own transaction (`enqueue`), and wakes the pipeline after the
/// commit; the pipeline (`NimbusService.runNotificationPipeline`) drains the outbox on its own
/// task, so matching and delivery never slow or block a write, and a crash loses nothing a
/// client was told was saved.
public final class NotificationHub: Sendable {
    /// One element per wake-up of the outbox drain; wake-ups that arrive while it drains fold
    /// into one.
    let wakeups: AsyncStream<Void>
    private let continuation: AsyncStream<Void>.Continuation
    /// The same for live delivery, which pushes what the collection gained.
    let deliveryWakeups: AsyncStream<Void>
    private let deliveryContinuation: AsyncStream<Void>.Continuation
    /// Every subscription, compiled; read from storage when the service starts, kept in step
    /// by this process's changes to subscriptions after they commit, and built again when
    /// storage's `subscriptionsVersion` shows another process changed them.
    let index = Locked(SubscriptionIndex())
    private let sinks = Locked<[any NotificationSink]>([])
    let statistics = Locked(NotificationPipelineStatistics())
    /// Partitions whose outbox the last forward could not reach: said in the log when one
    /// stops answering and when it answers again, not at every wake-up in between.
    let unreachablePartitions = Locked(Set<String>())
    /// Stages whose storage is busy or does not answer: said when a spell starts and when it ends (`StorageSpells`).
    let storageSpells = Locked(StorageSpells())

    init() {
        (wakeups, continuation) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
        (deliveryWakeups, deliveryContinuation) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    /// Writes `committed` to the outbox in `tx`, the transaction that made the change, unless
    /// nobody subscribes to its database (then matching could find nothing, and the write
    /// costs nothing extra). Returns whether it wrote: the caller wakes the pipeline after
    /// its commit. The index must be current (`NimbusService.queueForMatching`).
    func enqueue(_ committed: CommittedChanges, at time: Int64, tx: UnitOfWork) throws -> Bool {
        guard index.withLock({ $0.watches(databaseID: committed.database.id) }) else { return false }
        try tx.appendOutbox(databaseID: committed.database.id, body: OutboxCodec.encode(committed), createdAt: time)
        return true
    }

    /// Tells the pipeline the outbox has something new. Never waits.
    func wake() { continuation.yield() }

    /// Tells live delivery the collection has something new. Never waits.
    func wakeDelivery() { deliveryContinuation.yield() }

    /// Ends the pipeline after one last drain of the outbox and one last delivery.
    public func finish() {
        continuation.finish()
        deliveryContinuation.finish()
    }

    public func addSink(_ sink: any NotificationSink) {
        sinks.withLock { $0.append(sink) }
    }

    var currentSinks: [any NotificationSink] { sinks.withLock { $0 } }

    /// What the pipeline did so far (benchmarks, diagnostics).
    public var currentStatistics: NotificationPipelineStatistics { statistics.withLock { $0 } }
}

/// Counters of the notification pipeline since the service started.
public struct NotificationPipelineStatistics: Sendable {
    /// Committed writes matched against the subscription index.
    public var writesMatched = 0
    /// Time spent finding the subscriptions a write fires (the index lookup and the filter
    /// evaluation), in total.
    public var matchingNanoseconds: Int64 = 0
    /// Notifications stored in users' collections.
    public var notificationsStored = 0
}
