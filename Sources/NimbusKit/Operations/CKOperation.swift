import Foundation
import NimbusWire

/// The base of CloudKit's operations: an asynchronous `Operation` that runs on
/// `CKDatabase.add(_:)` or any `OperationQueue`, with dependencies, priorities and cancellation.
///
/// Each subclass does its requests in `run()` and reports through its own blocks; the
/// CloudKit-specific completion block fires before the operation finishes, so operations that
/// depend on this one start only after it (the seeds' "use the CloudKit completion blocks" tip),
/// while `Operation.completionBlock` fires asynchronously, as with Foundation.
open class CKOperation: Operation, @unchecked Sendable {
    /// How an operation runs: its container, quality of service and time limits. A setting
    /// left unset takes its group's (`CKOperationGroup.defaultConfiguration`), then the
    /// default, as CloudKit merges them.
    open class Configuration: NSObject, @unchecked Sendable {
        /// What was set on this configuration; nil is "not set".
        private var container_: CKContainer??
        private var qualityOfService_: QualityOfService?
        private var allowsCellularAccess_: Bool?
        private var isLongLived_: Bool?
        private var timeoutIntervalForRequest_: TimeInterval?
        private var timeoutIntervalForResource_: TimeInterval?

        /// The container to talk to; nil takes the database's (or the default container's).
        public var container: CKContainer? {
            get { container_ ?? nil }
            set { container_ = .some(newValue) }
        }
        /// `.utility` unless set, as CloudKit's operations (the 2016 session): at utility or
        /// below an operation is discretionary and waits out `zoneBusy`, `requestRateLimited`
        /// and `serviceUnavailable` as the server asks. The convenience API runs its
        /// operations `.userInitiated`, so its calls fail fast.
        public var qualityOfService: QualityOfService {
            get { qualityOfService_ ?? .utility }
            set { qualityOfService_ = newValue }
        }
        /// Kept for source compatibility; every network Nimbus uses is allowed.
        public var allowsCellularAccess: Bool {
            get { allowsCellularAccess_ ?? true }
            set { allowsCellularAccess_ = newValue }
        }
        /// An operation that outlives the app: journaled before it sends anything, resumed
        /// with `CKContainer.longLivedOperation(for:)` after a relaunch (docs/sdk.md, "Operations").
        public var isLongLived: Bool {
            get { isLongLived_ ?? false }
            set { isLongLived_ = newValue }
        }
        /// Seconds each request may wait for an answer before the operation fails with
        /// `networkFailure`.
        public var timeoutIntervalForRequest: TimeInterval {
            get { timeoutIntervalForRequest_ ?? 60 }
            set { timeoutIntervalForRequest_ = newValue }
        }
        /// How long a discretionary operation (`.utility`, `.background`) keeps retrying busy
        /// answers and network failures before it fails; seven days, as CloudKit's.
        public var timeoutIntervalForResource: TimeInterval {
            get { timeoutIntervalForResource_ ?? 7 * 24 * 3600 }
            set { timeoutIntervalForResource_ = newValue }
        }

        public override init() {}

        /// This configuration's settings, with those it left unset taken from `base`.
        func resolved(over base: Configuration?) -> Configuration {
            guard let base else { return self }
            let merged = Configuration()
            merged.container_ = container_ ?? base.container_
            merged.qualityOfService_ = qualityOfService_ ?? base.qualityOfService_
            merged.allowsCellularAccess_ = allowsCellularAccess_ ?? base.allowsCellularAccess_
            merged.isLongLived_ = isLongLived_ ?? base.isLongLived_
            merged.timeoutIntervalForRequest_ = timeoutIntervalForRequest_ ?? base.timeoutIntervalForRequest_
            merged.timeoutIntervalForResource_ = timeoutIntervalForResource_ ?? base.timeoutIntervalForResource_
            return merged
        }
    }

    public typealias ID = String

    public var configuration: Configuration! = Configuration()
    /// Names the operation: to the server (its requests are `operationID.n`, each applied once)
    /// and, for a long-lived one, to `CKContainer.longLivedOperation(for:)`.
    public internal(set) var operationID: ID = UUID().uuidString
    /// Called once a long-lived operation's journal is written, before it sends anything.
    public var longLivedOperationWasPersistedBlock: (@Sendable () -> Void)?
    /// The group this operation belongs to: its `defaultConfiguration` fills in what this
    /// operation's configuration leaves unset.
    public var group: CKOperationGroup?

    /// The configuration the operation runs with: its own, over its group's.
    var effectiveConfiguration: Configuration {
        (configuration ?? Configuration()).resolved(over: group?.defaultConfiguration)
    }

    private let stateLock = NSLock()
    private var executing = false
    private var finished = false
    private var abandoned = false
    private var runningTask: Task<Void, Never>?

    public override init() { super.init() }

    /// The configuration's quality of service, as in CloudKit: setting either sets both.
    open override var qualityOfService: QualityOfService {
        get { configuration?.qualityOfService ?? .utility }
        set {
            if configuration == nil { configuration = Configuration() }
            configuration.qualityOfService = newValue
        }
    }

    open override var isAsynchronous: Bool { true }
    open override var isExecuting: Bool { stateLock.withLock { executing } }
    open override var isFinished: Bool { stateLock.withLock { finished } }

    open override func start() {
        if isFinished { return }
        setExecuting(true)
        let configuration = effectiveConfiguration
        let quality = configuration.qualityOfService
        let discretionary = quality == .utility || quality == .background
        let deadline = discretionary ? Date().addingTimeInterval(configuration.timeoutIntervalForResource) : nil
        let task = Task(priority: Self.priority(quality)) { [self] in
            do {
                if isCancelled { throw CKError.cancelled() }
                if configuration.isLongLived { try persistLongLived() }
                lookAfterKeys()
                defer { lookAfterKeys() }
                try await NimbusTransport.$discretionaryDeadline.withValue(deadline) { try await run() }
                if isCancelled { throw CKError.cancelled() }
                if !isAbandoned {
                    stateLock.withLock { outcome = .success(()) }
                    finish(with: nil)
                }
            } catch {
                if !isAbandoned {
                    let failure = CKError.wrapping(error)
                    stateLock.withLock { outcome = .failure(failure) }
                    finish(with: failure)
                }
            }
            // Its callbacks ran: a long-lived operation has nothing left to resume. One the
            // app's exit stopped keeps its journal.
            if configuration.isLongLived, !isAbandoned { forgetLongLived() }
            setFinished()
        }
        stateLock.withLock { runningTask = task }
    }

    private var isAbandoned: Bool { stateLock.withLock { abandoned } }

    /// How the operation ended, once its final blocks were called: what each kind's own final
    /// block was told. Nil while it runs, and for one the app's exit stopped.
    var result: Result<Void, CKError>? { stateLock.withLock { outcome } }
    private var outcome: Result<Void, CKError>?

    /// Stops the operation as the app's exit would: no more requests, no callbacks, the
    /// journal kept (`LongLivedOperations.abandonAll`).
    func abandon() {
        stateLock.withLock { abandoned = true }
        stateLock.withLock { runningTask }?.cancel()
    }

    /// Whether this operation was rebuilt from a long-lived operation's journal: an earlier
    /// launch may have done part of its work (a delete it repeats may find nothing to delete).
    var isResumedFromJournal = false

    /// The container whose folder keeps this operation's journal.
    var journalContainer: CKContainer { resolvedContainer(database: nil) }

    /// Writes a long-lived operation's journal before it sends anything.
    func persistLongLived() throws(CKError) {
        try rewriteLongLivedJournal()
        longLivedOperationWasPersistedBlock?()
    }

    /// Writes the journal (again, when what it holds changed while running: an asset's upload
    /// URL, then its receipt), so a relaunch resumes from there. Every kind of operation
    /// NimbusKit has keeps one (`LongLivedJournaling`); an app's own subclass of `CKOperation`
    /// runs as an ordinary operation.
    func rewriteLongLivedJournal() throws(CKError) {
        guard let journaling = self as? any LongLivedJournaling else { return }
        try journalContainer.longLivedOperations.persist(self, journal: try journaling.longLivedJournal())
    }

    func forgetLongLived() {
        journalContainer.longLivedOperations.forget(operationID)
    }

    open override func cancel() {
        super.cancel()
        stateLock.withLock { runningTask }?.cancel()
    }

    /// The operation's work: requests and per-item callbacks. Throwing ends the operation with
    /// that error.
    func run() async throws {}

    /// Around a database operation, the keys of encrypted values travel between the user's
    /// devices, in the background (`KeyMailbox`); nothing for other operations.
    func lookAfterKeys() {}

    /// Calls the operation's final CloudKit blocks with the overall error (nil on success).
    func finish(with error: CKError?) {}

    private static func priority(_ quality: QualityOfService) -> TaskPriority {
        switch quality {
        case .userInteractive, .userInitiated: return .userInitiated
        case .utility: return .utility
        case .background: return .background
        default: return .medium
        }
    }

    /// The container this operation talks to.
    func resolvedContainer(database: CKDatabase?) -> CKContainer {
        effectiveConfiguration.container ?? database?.container ?? CKContainer.default()
    }

    private func setExecuting(_ value: Bool) {
        willChangeValue(forKey: "isExecuting")
        stateLock.withLock { executing = value }
        didChangeValue(forKey: "isExecuting")
    }

    private func setFinished() {
        willChangeValue(forKey: "isExecuting")
        willChangeValue(forKey: "isFinished")
        stateLock.withLock {
            executing = false
            finished = true
            runningTask = nil
        }
        didChangeValue(forKey: "isExecuting")
        didChangeValue(forKey: "isFinished")
    }
}

/// A kind of operation that keeps a journal when long-lived: its arguments, enough to
/// rebuild it after a relaunch (`LongLivedJournal.operation(from:container:)`).
protocol LongLivedJournaling: CKOperation {
    func longLivedJournal() throws(CKError) -> JSONObject
}

/// An operation on one database. Without a database it uses the private database of its
/// configuration's container (or the default container), as CloudKit does.
open class CKDatabaseOperation: CKOperation, @unchecked Sendable {
    public var database: CKDatabase?

    var targetDatabase: CKDatabase {
        if let database { return database }
        return resolvedContainer(database: nil).privateCloudDatabase
    }

    var transport: NimbusTransport { targetDatabase.container.transport }

    override var journalContainer: CKContainer { targetDatabase.container }

    override func lookAfterKeys() {
        targetDatabase.container.keyMailbox.lookAfterKeys(scope: targetDatabase.databaseScope)
    }
}

// MARK: Helpers the database operations share

extension CKDatabaseOperation {
    /// POSTs to an endpoint of this operation's database and reads the answer as its wire type.
    func post<Response: WireBody>(_ path: String, _ body: JSON, as: Response.Type) async throws(CKError) -> Response {
        try NimbusTransport.read(
            Response.self,
            from: await transport.database(
                targetDatabase.databaseScope, path, body, timeout: effectiveConfiguration.timeoutIntervalForRequest),
            endpoint: path)
    }

    /// The signed-in user's record name, to recognise the user's own zones and records.
    var currentUser: String? { transport.userRecordName }

    /// The keys that open encrypted fields: the signed-in user's, in the private database
    /// (elsewhere encrypted fields are not read; docs/encryption.md).
    var recordCiphers: FieldCiphers? { targetDatabase.databaseScope == .public ? nil : targetDatabase.container.fieldCiphers }

    /// The maximum items per request (the server's `operationsPerRequest`).
    static var itemsPerRequest: Int { Limits.operationsPerRequest.value }
}

/// Items grouped by zone, zones in order of first appearance, items in their given order:
/// record endpoints work on one zone per request.
func groupedByZone<Item>(_ items: [Item], zoneID: (Item) -> CKRecordZone.ID) -> [(CKRecordZone.ID, [Item])] {
    var order: [CKRecordZone.ID] = []
    var groups: [CKRecordZone.ID: [Item]] = [:]
    for item in items {
        let zone = zoneID(item)
        if groups[zone] == nil { order.append(zone) }
        groups[zone, default: []].append(item)
    }
    return order.map { ($0, groups[$0]!) }
}

/// Splits a list into chunks of at most `size`.
func chunked<Item>(_ items: [Item], size: Int) -> [ArraySlice<Item>] {
    stride(from: 0, to: items.count, by: size).map { items[$0..<min($0 + size, items.count)] }
}
