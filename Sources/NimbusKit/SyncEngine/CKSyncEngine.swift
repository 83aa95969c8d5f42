import Foundation
import Logging
import NimbusWire

/// CloudKit's sync engine (iOS 17): keeps a private or shared database and the app's local
/// store in step. The app tells the engine what changed locally (`state.add(...)`) and hands
/// over records when asked (`nextRecordZoneChangeBatch`); the engine sends them in batches
/// within the server's limits, fetches what other devices changed when the server says so
/// (NimbusKit's WebSocket stream, on every platform), and reports everything as events.
///
/// As CloudKit's, the engine's state is only what the app keeps from `stateUpdate` events:
/// several engines in one process are several devices. Beyond CloudKit: pending changes are
/// also journaled on the device (for the history the app's state belongs to) before `add`
/// returns, and a send is a long-lived modify whose operation ID the server answers once, so
/// a crash at any instant loses nothing and applies nothing twice (docs/sdk.md, "CKSyncEngine").
public final class CKSyncEngine: @unchecked Sendable {
    static let logger = Logger(label: "NimbusKit.syncEngine")
    /// Records (saves and deletes) in one request: the server's limit.
    static var recordsPerRequest: Int { Limits.operationsPerRequest.value }
    /// The subscription the engine creates when the app names none and the database has none.
    static let defaultSubscriptionID = "nimbus-sync-engine"
    /// The starting account check's priority: above the work of the code making the engine
    /// (and at least high), so on that code's actor it runs ahead of what that code queued
    /// there before (see `init`).
    static func accountCheckPriority(makerPriority: TaskPriority = Task.currentPriority) -> TaskPriority {
        TaskPriority(rawValue: max(TaskPriority.high.rawValue, makerPriority.rawValue == .max ? .max : makerPriority.rawValue + 1))
    }

    public let database: CKDatabase
    public let state: State
    private weak var delegate: (any CKSyncEngineDelegate)?
    private let automaticallySync: Bool
    private let configuredSubscriptionID: CKSubscription.ID?

    private let gate = SyncGate()
    private let lock = NSLock()
    private var running: [UUID: Task<Void, any Error>] = [:]
    private var listener: Task<Void, Never>?
    private var sendScheduled = false
    private var stateUpdateScheduled = false
    private var accountChecked = false
    /// The account check the engine starts with; every fetch and send waits for it.
    private var startingAccountCheck: Task<Void, Never>?

    /// `isolation`: where the app makes the engine (its actor, if any), for the account check
    /// the engine starts with (see below); callers leave it to its default.
    public init(_ configuration: Configuration, isolation: isolated (any Actor)? = #isolation) {
        database = configuration.database
        delegate = configuration.delegate
        automaticallySync = configuration.automaticallySync
        configuredSubscriptionID = configuration.subscriptionID
        let container = configuration.database.container
        let journal = SyncEngineJournal(directory: container.longLivedOperations.directory, scope: configuration.database.databaseScope)
        let app = configuration.stateSerialization?.stored
        let stored = Self.startingState(
            app: app, journal: app.flatMap { journal.read(lineage: $0.lineage) },
            containerIdentifier: container.containerIdentifier ?? "", scope: configuration.database.databaseScope)
        state = State(stored, journal: journal)
        // No file work here (apps make their engine on their own actor): the journal is
        // written at the first change, and other histories' journals are cleared aside, on a
        // Dispatch queue rather than a thread of Swift's cooperative pool (the calls block).
        let lineage = stored.lineage
        DispatchQueue.global(qos: .background).async { journal.removeAbandoned(keeping: lineage) }
        state.onAppChange = { [weak self] added in
            self?.scheduleStateUpdate()
            if added { self?.scheduleSend() }
        }
        // As CloudKit's engine, it learns who is signed in as it starts and tells the app, on
        // the actor the app made it on (no hop when the session already knows the user), so
        // a first sign-in, on which apps add their zone, reaches the app before its first send.
        // The check is queued on that actor during the maker's turn there, above the maker's
        // priority: an actor runs its queued work by priority, so the check goes ahead of work
        // the maker queued there before, and work arriving later finds it queued. An app that
        // makes its engine again from such work (Apple's CKSyncEngine sample makes one lazily
        // at first use and another from a `Task` its initializer starts) otherwise hears of the
        // sign-in only after it replaced this engine, and gives its zone to the other engine
        // while its caller sends with this one. The task starts on this thread at once
        // (`Task.immediate`) and off any actor (`@concurrent`): its hop to the maker's actor,
        // which the maker holds, queues it there. (A plain `Task` first waits for a free
        // thread, 0 to 5 ms measured on Linux; one that inherits the maker's actor runs at once,
        // inside the maker's turn, before the maker kept the engine; one that yields first comes
        // back through the global queue, behind whatever reached the actor meanwhile: 6 of
        // 2,000 starts lost that race in a loop built to provoke it, none this way.)
        let priority = Self.accountCheckPriority()
        if #available(macOS 26, iOS 26, watchOS 26, tvOS 26, visionOS 26, *) {
            startingAccountCheck = Task.immediate(priority: priority) { @concurrent [weak self] in
                await Self.startingAccountCheck(of: self, on: isolation)
            }
        } else {
            startingAccountCheck = Task(priority: priority) { [weak self] in
                await Self.startingAccountCheck(of: self, on: isolation)
            }
        }
        if automaticallySync { startListening() }
    }

    deinit {
        startingAccountCheck?.cancel()
        listener?.cancel()
        for task in running.values { task.cancel() }
    }

    /// Fetches what changed on the server: the database's zones, then each changed zone's records.
    public func fetchChanges(_ options: FetchChangesOptions = FetchChangesOptions()) async throws {
        try await tracked { try await self.fetch(reason: .manual, options: options) }
    }

    /// Sends the pending changes: zones first, then records in batches from the delegate.
    /// Per-record failures come as `sentRecordZoneChanges` events; a request that failed as a
    /// whole (no network, signed out) throws after its event.
    public func sendChanges(_ options: SendChangesOptions = SendChangesOptions()) async throws {
        try await tracked { try await self.send(reason: .manual, options: options) }
    }

    /// Stops the fetches and sends under way (they end with `operationCancelled`); pending
    /// changes stay pending.
    public func cancelOperations() async {
        let tasks = lock.withLock { Array(running.values) }
        for task in tasks { task.cancel() }
        for task in tasks { _ = await task.result }
    }

    // MARK: Starting

    /// The state to start from: the app's serialization (when it is this database's), with
    /// pending changes and sends in flight from the device's journal of the same history when
    /// that is newer (the app crashed before keeping the last `stateUpdate`); a fresh state
    /// when the app hands none, as CloudKit's engine starts.
    static func startingState(
        app: State.Stored?, journal: State.Stored?, containerIdentifier: String, scope: CKDatabase.Scope
    ) -> State.Stored {
        func ours(_ stored: State.Stored?, _ source: String) -> State.Stored? {
            guard let stored else { return nil }
            guard stored.containerIdentifier == containerIdentifier, stored.databaseScope == scope.name else {
                logger.error(
                    "the \(source) is for container \(stored.containerIdentifier), \(stored.databaseScope) database, not \(containerIdentifier), \(scope.name): the engine starts fresh"
                )
                return nil
            }
            return stored
        }
        let app = ours(app, "state serialization")
        let journal = ours(journal, "sync engine's journal")
        switch (app, journal) {
        case (var app?, let journal?) where journal.lineage == app.lineage && journal.revision > app.revision:
            // The app's tokens (it has the records they stand for); the journal's pending work.
            app.pendingRecordZoneChanges = journal.pendingRecordZoneChanges
            app.pendingDatabaseChanges = journal.pendingDatabaseChanges
            app.hasPendingUntrackedChanges = journal.hasPendingUntrackedChanges
            app.sendsInFlight = journal.sendsInFlight
            app.subscriptionID = journal.subscriptionID ?? app.subscriptionID
            app.revision = journal.revision
            return app
        case (let app?, _):
            return app
        case (nil, _):
            return State.Stored(containerIdentifier: containerIdentifier, databaseScope: scope.name)
        }
    }

    /// Automatic sync: the account, the subscription, a first fetch and send, then a fetch
    /// each time the server says the database changed.
    private func startListening() {
        let stream = database.container.notifications
        let scope = database.databaseScope
        listener = Task { [weak self] in
            if let engine = self {
                try? await engine.tracked { try await engine.prepareForAutomaticSync() }
                try? await engine.tracked { try await engine.fetch(reason: .scheduled, options: FetchChangesOptions()) }
                try? await engine.tracked { try await engine.send(reason: .scheduled, options: SendChangesOptions()) }
            }
            do {
                for try await notification in stream {
                    guard let self else { return }
                    guard let change = notification as? CKDatabaseNotification, change.databaseScope == scope else { continue }
                    try? await self.tracked { try await self.fetch(reason: .scheduled, options: FetchChangesOptions()) }
                }
            } catch {
                CKSyncEngine.logger.warning("the notification stream ended: \(error); automatic fetches stop")
            }
        }
    }

    private func prepareForAutomaticSync() async throws {
        try await gate.serialized {
            try await ensureAccountChecked()
            try await ensureSubscription()
        }
    }

    /// A send soon after changes are added (they often come several at once).
    private func scheduleSend(after delay: Duration = .milliseconds(100)) {
        guard automaticallySync else { return }
        let schedule = lock.withLock {
            defer { sendScheduled = true }
            return !sendScheduled
        }
        guard schedule else { return }
        Task { [weak self] in
            try? await Task.sleep(for: delay)
            guard let self else { return }
            lock.withLock { sendScheduled = false }
            try? await tracked { try await self.send(reason: .scheduled, options: SendChangesOptions()) }
        }
    }

    /// A `stateUpdate` soon after the app changes the state (CloudKit's engine sends one, and
    /// apps keep the state only from these), after the fetch or send under way if any.
    private func scheduleStateUpdate() {
        let schedule = lock.withLock {
            defer { stateUpdateScheduled = true }
            return !stateUpdateScheduled
        }
        guard schedule else { return }
        Task { [weak self] in
            guard let self else { return }
            try? await gate.serialized {
                self.lock.withLock { self.stateUpdateScheduled = false }
                await self.emitStateUpdate()
            }
        }
    }

    /// Runs work that `cancelOperations()` can stop.
    private func tracked(_ work: @escaping @Sendable () async throws -> Void) async throws {
        let id = UUID()
        let task = Task { try await work() }
        lock.withLock { running[id] = task }
        defer { _ = lock.withLock { running.removeValue(forKey: id) } }
        try await withTaskCancellationHandler {
            try await task.value
        } onCancel: {
            task.cancel()
        }
    }

    // MARK: Account and subscription

    /// The account check an engine starts with, on the actor it was made on (`isolation`),
    /// after the maker's turn there: the maker has not yet kept the engine, and the app's
    /// sign-in handler may reach for it.
    private static func startingAccountCheck(of engine: CKSyncEngine?, on isolation: isolated (any Actor)?) async {
        // Made off any actor, nothing holds the maker back: the check waits for the next turn.
        if isolation == nil { await Task.yield() }
        try? await engine?.checkAccount()
    }

    /// Waits for the account check the engine started with, and checks again if that one
    /// could not reach the server.
    private func ensureAccountChecked() async throws {
        await startingAccountCheck?.value
        try await checkAccount()
    }

    /// Tells the delegate who is signed in, once per engine: sign-in on first use, a switch
    /// or sign-out when the state was another user's (the state then starts over).
    /// `isolation`: run where the caller is (the starting check: on the app's actor, so the
    /// event reaches the app with no hop when the session already knows the user).
    private func checkAccount(isolation: isolated (any Actor)? = #isolation) async throws {
        guard !lock.withLock({ accountChecked }) else { return }
        let previous = state.snapshot.userRecordName.map { CKRecord.ID(recordName: $0) }
        let current: CKRecord.ID?
        if let known = database.container.transport.userRecordName {
            // The container's session knows who is signed in (a sign-out forgets it): no round
            // trip, so the app hears of a first sign-in as the engine starts.
            current = CKRecord.ID(recordName: known)
        } else {
            do {
                current = try await database.container.userRecordID()
            } catch let error as CKError where error.code == .notAuthenticated {
                current = nil
            }
        }
        lock.withLock { accountChecked = true }
        let change: Event.AccountChange.ChangeType?
        switch (previous, current) {
        case (nil, let current?): change = .signIn(currentUser: current)
        case (let previous?, nil): change = .signOut(previousUser: previous)
        case (let previous?, let current?) where previous.recordName != current.recordName:
            change = .switchAccounts(previousUser: previous, currentUser: current)
        default: change = nil
        }
        guard let change else { return }
        if previous != nil {
            // Another user's changes and positions are not this user's.
            state.track { stored in
                stored = State.Stored(containerIdentifier: stored.containerIdentifier, databaseScope: stored.databaseScope)
            }
        }
        // Told before anything is written: the app (adding its zone on a first sign-in) hears
        // it as soon as can be.
        await emit(.accountChange(.init(changeType: change)))
        state.track { $0.userRecordName = current?.recordName }
        await emitStateUpdate()
    }

    /// The database subscription that makes the server say when something changed.
    private func ensureSubscription() async throws {
        if let id = configuredSubscriptionID {
            if state.snapshot.subscriptionID == id { return }
            do {
                _ = try await database.subscription(for: id)
            } catch let error as CKError where error.code == .unknownItem {
                _ = try await database.save(Self.subscription(id))
            }
            state.track { $0.subscriptionID = id }
            return
        }
        if state.snapshot.subscriptionID != nil { return }
        let existing = try await database.allSubscriptions().first { $0 is CKDatabaseSubscription }
        let id: CKSubscription.ID
        if let existing {
            id = existing.subscriptionID
        } else {
            id = try await database.save(Self.subscription(Self.defaultSubscriptionID)).subscriptionID
        }
        state.track { $0.subscriptionID = id }
    }

    private static func subscription(_ id: CKSubscription.ID) -> CKDatabaseSubscription {
        let subscription = CKDatabaseSubscription(subscriptionID: id)
        let info = CKSubscription.NotificationInfo()
        info.shouldSendContentAvailable = true
        subscription.notificationInfo = info
        return subscription
    }

    // MARK: Events

    private func emit(_ event: Event, isolation: isolated (any Actor)? = #isolation) async {
        await delegate?.handleEvent(event, syncEngine: self)
    }

    private func emitStateUpdate(isolation: isolated (any Actor)? = #isolation) async {
        await emit(.stateUpdate(.init(stateSerialization: state.serialization)))
    }

    // MARK: Fetching

    private func fetch(reason: SyncReason, options: FetchChangesOptions) async throws {
        try await gate.serialized {
            guard let delegate else { return }
            try await ensureAccountChecked()
            let asked = FetchChangesContext(reason: reason, options: options)
            let context = FetchChangesContext(reason: reason, options: await delegate.nextFetchChangesOptions(asked, syncEngine: self))
            await emit(.willFetchChanges(.init(context: context)))
            do {
                try await fetchDatabaseChanges()
                try await fetchZoneChanges(context.options)
            } catch {
                await emit(.didFetchChanges(.init(context: context)))
                throw error
            }
            await emit(.didFetchChanges(.init(context: context)))
        }
    }

    private func fetchDatabaseChanges() async throws {
        var moreComing = true
        while moreComing {
            try Task.checkCancellation()
            let token = state.snapshot.databaseToken.map { CKServerChangeToken(syncToken: $0) }
            let page: (
                modifications: [CKDatabase.DatabaseChange.Modification], deletions: [CKDatabase.DatabaseChange.Deletion],
                changeToken: CKServerChangeToken, moreComing: Bool
            )
            do {
                page = try await database.databaseChanges(since: token)
            } catch let error as CKError where error.code == .changeTokenExpired && token != nil {
                // The feed moved on past the token: read it again from the start.
                state.track { $0.databaseToken = nil }
                continue
            }
            if !page.modifications.isEmpty || !page.deletions.isEmpty {
                await emit(.fetchedDatabaseChanges(.init(modifications: page.modifications, deletions: page.deletions)))
            }
            state.track { stored in
                stored.databaseToken = page.changeToken.syncToken
                for modification in page.modifications {
                    let zone = ZoneName(modification.zoneID)
                    if !stored.unfetchedZones.contains(zone) { stored.unfetchedZones.append(zone) }
                }
                for deletion in page.deletions {
                    let zone = ZoneName(deletion.zoneID)
                    stored.unfetchedZones.removeAll { $0 == zone }
                    stored.zoneTokens[zone.key] = nil
                }
            }
            await emitStateUpdate()
            moreComing = page.moreComing
        }
    }

    private func fetchZoneChanges(_ options: FetchChangesOptions) async throws {
        let unfetched = state.snapshot.unfetchedZones.filter { options.scope.contains($0.zoneID) }
        let first = unfetched.filter { zone in options.prioritizedZoneIDs.contains(zone.zoneID) }
        var failure: (any Error)?
        for zone in first + unfetched.filter({ !first.contains($0) }) {
            try Task.checkCancellation()
            await emit(.willFetchRecordZoneChanges(.init(zoneID: zone.zoneID)))
            do {
                try await fetchRecords(in: zone)
                await emit(.didFetchRecordZoneChanges(.init(zoneID: zone.zoneID, error: nil)))
            } catch {
                let ckError = CKError.wrapping(error)
                await emit(.didFetchRecordZoneChanges(.init(zoneID: zone.zoneID, error: ckError)))
                if ckError.code == .zoneNotFound || ckError.code == .userDeletedZone {
                    // Gone since the server listed it: its deletion comes with the next fetch.
                    state.track { $0.unfetchedZones.removeAll { $0 == zone } }
                } else {
                    failure = failure ?? error
                }
            }
        }
        if let failure { throw failure }
    }

    private func fetchRecords(in zone: ZoneName) async throws {
        var moreComing = true
        while moreComing {
            try Task.checkCancellation()
            let token = state.snapshot.zoneTokens[zone.key].map { CKServerChangeToken(syncToken: $0) }
            let page: (
                modificationResultsByID: [CKRecord.ID: Result<CKDatabase.RecordZoneChange.Modification, any Error>],
                deletions: [CKDatabase.RecordZoneChange.Deletion], changeToken: CKServerChangeToken, moreComing: Bool
            )
            do {
                page = try await database.recordZoneChanges(inZoneWith: zone.zoneID, since: token)
            } catch let error as CKError where error.code == .changeTokenExpired && token != nil {
                state.track { $0.zoneTokens[zone.key] = nil }
                continue
            }
            var modifications: [CKDatabase.RecordZoneChange.Modification] = []
            for (id, result) in page.modificationResultsByID {
                switch result {
                case .success(let modification): modifications.append(modification)
                case .failure(let error):
                    // A record this device cannot read (its encrypted values' key is not here):
                    // reported, not delivered.
                    CKSyncEngine.logger.warning("record \(id.recordName) in \(zone.zoneName) could not be read: \(error)")
                }
            }
            modifications.sort { ($0.record.modificationDate ?? .distantPast) < ($1.record.modificationDate ?? .distantPast) }
            if !modifications.isEmpty || !page.deletions.isEmpty {
                await emit(.fetchedRecordZoneChanges(.init(modifications: modifications, deletions: page.deletions)))
            }
            state.track { stored in
                stored.zoneTokens[zone.key] = page.changeToken.syncToken
                if !page.moreComing { stored.unfetchedZones.removeAll { $0 == zone } }
            }
            await emitStateUpdate()
            moreComing = page.moreComing
        }
    }

    // MARK: Sending

    /// What one `sendChanges` met: each record or zone that failed, by its ID.
    final class SendFailures: @unchecked Sendable {
        private let lock = NSLock()
        private var errors: [AnyHashable: any Error] = [:]

        func add(_ id: AnyHashable, _ error: CKError) { lock.withLock { errors[id] = error } }

        /// CloudKit's engine throws from `sendChanges` when anything it sent failed (after
        /// the `sent…Changes` events that name each failure): a `partialFailure` here.
        var error: CKError? {
            lock.withLock { errors.isEmpty ? nil : CKError.partialFailure(errors, what: "changes sent") }
        }
    }

    private func send(reason: SyncReason, options: SendChangesOptions) async throws {
        try await gate.serialized {
            guard let delegate else { return }
            let snapshot = state.snapshot
            let hasWork =
                !snapshot.sendsInFlight.isEmpty || snapshot.hasPendingUntrackedChanges
                || snapshot.pendingDatabaseChanges.contains { options.scope.contains($0) }
                || snapshot.pendingRecordZoneChanges.contains { options.scope.contains($0) }
            guard hasWork else { return }
            try await ensureAccountChecked()
            let context = SendChangesContext(reason: reason, options: options)
            let failures = SendFailures()
            await emit(.willSendChanges(.init(context: context)))
            do {
                try await resumeSendsInFlight(failures)
                try await sendDatabaseChanges(options, failures)
                try await sendRecordZoneChanges(context, delegate: delegate, failures)
            } catch {
                await emit(.didSendChanges(.init(context: context)))
                throw error
            }
            await emit(.didSendChanges(.init(context: context)))
            if let failure = failures.error { throw failure }
        }
    }

    private func sendDatabaseChanges(_ options: SendChangesOptions, _ failures: SendFailures) async throws {
        let pending = state.pendingDatabaseChanges.filter { options.scope.contains($0) }
        guard !pending.isEmpty else { return }
        var saves: [CKRecordZone] = []
        var deletes: [CKRecordZone.ID] = []
        for change in pending {
            switch change {
            case .saveZone(let zone): saves.append(zone)
            case .deleteZone(let id): deletes.append(id)
            }
        }
        let (saveResults, deleteResults) = try await database.modifyRecordZones(saving: saves, deleting: deletes)
        var saved: [CKRecordZone] = []
        var failedSaves: [Event.SentDatabaseChanges.FailedZoneSave] = []
        var deleted: [CKRecordZone.ID] = []
        var failedDeletes: [CKRecordZone.ID: CKError] = [:]
        var done: [PendingDatabaseChange] = []
        for zone in saves {
            switch saveResults[zone.zoneID] {
            case .success(let savedZone)?:
                saved.append(savedZone)
                done.append(.saveZone(zone))
            case .failure(let error)?:
                let error = CKError.wrapping(error)
                failedSaves.append(.init(zone: zone, error: error))
                failures.add(zone.zoneID, error)
                if !Self.retriesByItself(error) { done.append(.saveZone(zone)) }
            case nil: break
            }
        }
        for id in deletes {
            switch deleteResults[id] {
            case .success?:
                deleted.append(id)
                done.append(.deleteZone(id))
            case .failure(let error)?:
                let error = CKError.wrapping(error)
                failedDeletes[id] = error
                failures.add(id, error)
                if !Self.retriesByItself(error) { done.append(.deleteZone(id)) }
            case nil: break
            }
        }
        state.remove(pendingDatabaseChanges: done)
        state.track { stored in
            for id in deleted { stored.zoneTokens[ZoneName(id).key] = nil }
        }
        await emit(
            .sentDatabaseChanges(.init(savedZones: saved, failedZoneSaves: failedSaves, deletedZoneIDs: deleted, failedZoneDeletes: failedDeletes)))
        await emitStateUpdate()
    }

    /// Asks the delegate for batches until it has none or only changes this call already
    /// sent: as with CloudKit's engine, a change is sent once per `sendChanges`, so one that
    /// failed (and that the app added again after merging, or after saving the zone) waits
    /// for the next call, and the failure reaches the caller.
    private func sendRecordZoneChanges(_ context: SendChangesContext, delegate: any CKSyncEngineDelegate, _ failures: SendFailures)
        async throws
    {
        var sent = Set<PendingRecordZoneChange>()
        while true {
            try Task.checkCancellation()
            guard let batch = await delegate.nextRecordZoneChangeBatch(context, syncEngine: self) else { break }
            let saves = batch.recordsToSave.filter { !sent.contains(.saveRecord($0.recordID)) }
            let deletes = batch.recordIDsToDelete.filter { !sent.contains(.deleteRecord($0)) }
            if saves.isEmpty, deletes.isEmpty { break }
            for record in saves { sent.insert(.saveRecord(record.recordID)) }
            for id in deletes { sent.insert(.deleteRecord(id)) }
            var busy: CKError?
            for request in Self.requests(saves: saves, deletes: deletes, atomicByZone: batch.atomicByZone) {
                busy = try await sendRequest(request, failures) ?? busy
            }
            if let busy {
                // The server asked for patience: the rest waits for the retry.
                scheduleSend(after: .seconds(max(busy.retryAfterSeconds ?? 2, 0.1)))
                break
            }
        }
    }

    /// A batch as requests within the server's limit; an atomic batch by zone, so each
    /// request is one zone's all-or-nothing.
    static func requests(saves: [CKRecord], deletes: [CKRecord.ID], atomicByZone: Bool) -> [SendRequest] {
        func chunked<T>(_ items: [T]) -> [[T]] {
            stride(from: 0, to: items.count, by: recordsPerRequest).map { Array(items[$0..<min($0 + recordsPerRequest, items.count)]) }
        }
        guard atomicByZone else {
            // Saves then deletes, filling each request.
            let items: [Either] = saves.map(Either.save) + deletes.map(Either.delete)
            return chunked(items).map { SendRequest(items: $0, atomic: false) }
        }
        var zones: [CKRecordZone.ID] = []
        var byZone: [CKRecordZone.ID: [Either]] = [:]
        for item in saves.map(Either.save) + deletes.map(Either.delete) {
            if byZone[item.recordID.zoneID] == nil { zones.append(item.recordID.zoneID) }
            byZone[item.recordID.zoneID, default: []].append(item)
        }
        return zones.flatMap { zone in chunked(byZone[zone] ?? []).map { SendRequest(items: $0, atomic: true) } }
    }

    enum Either {
        case save(CKRecord)
        case delete(CKRecord.ID)

        var recordID: CKRecord.ID {
            switch self {
            case .save(let record): record.recordID
            case .delete(let id): id
            }
        }
    }

    struct SendRequest {
        let items: [Either]
        let atomic: Bool

        var saves: [CKRecord] { items.compactMap { if case .save(let record) = $0 { record } else { nil } } }
        var deletes: [CKRecord.ID] { items.compactMap { if case .delete(let id) = $0 { id } else { nil } } }
    }

    /// Sends one request as a long-lived modify (journaled, so a crash mid-request resumes it
    /// under the same operation ID), reports it, and settles the pending changes it carried.
    /// Returns the error of a server that asked for patience, if one did.
    private func sendRequest(_ request: SendRequest, _ failures: SendFailures) async throws -> CKError? {
        let operation = CKModifyRecordsOperation(recordsToSave: request.saves, recordIDsToDelete: request.deletes)
        operation.savePolicy = .ifServerRecordUnchanged
        operation.isAtomic = request.atomic
        // Long-lived, shares and assets too: a send the app's stop interrupts resumes, its
        // uploads from the bytes the server holds.
        operation.configuration.isLongLived = true
        let counts = Dictionary(
            request.saves.map { (PendingRecordZoneChange.saveRecord($0.recordID), state.additionCount(.saveRecord($0.recordID))) }
                + request.deletes.map { (PendingRecordZoneChange.deleteRecord($0), state.additionCount(.deleteRecord($0))) },
            uniquingKeysWith: { a, _ in a })
        let id = operation.operationID
        operation.longLivedOperationWasPersistedBlock = { [state] in state.track { $0.sendsInFlight.append(id) } }
        switch try await run(operation, counts: counts, failures, splitsWhenTooLarge: request.items.count > 1 && !request.atomic) {
        case .answered(let busy): return busy
        case .tooLarge: break
        }
        // Larger than the server takes in one request (records that are large together): sent
        // again in halves, as Apple's engine sizes its requests itself. An atomic request is
        // not split; its failure is the app's (limitExceeded).
        var busy: CKError?
        let half = request.items.count / 2
        for part in [request.items[..<half], request.items[half...]] {
            busy = try await sendRequest(SendRequest(items: Array(part), atomic: false), failures) ?? busy
        }
        return busy
    }

    /// Sends an earlier process left unanswered: added again under their IDs, answered by the
    /// server from their first outcome where they got that far.
    private func resumeSendsInFlight(_ failures: SendFailures) async throws {
        for id in state.snapshot.sendsInFlight {
            try Task.checkCancellation()
            guard let operation = try? await database.container.longLivedOperation(for: id) as? CKModifyRecordsOperation else {
                // Finished (its callbacks ran) or never journaled: nothing to resume.
                state.track { $0.sendsInFlight.removeAll { $0 == id } }
                continue
            }
            let changes =
                (operation.recordsToSave ?? []).map { PendingRecordZoneChange.saveRecord($0.recordID) }
                + (operation.recordIDsToDelete ?? []).map { PendingRecordZoneChange.deleteRecord($0) }
            let counts = Dictionary(changes.map { ($0, state.additionCount($0)) }, uniquingKeysWith: { a, _ in a })
            _ = try await run(operation, counts: counts, failures, splitsWhenTooLarge: false)
        }
    }

    /// How one request ended for the engine.
    enum RequestOutcome {
        /// Answered (each record's outcome reported); `busy`: the server asked for patience.
        case answered(busy: CKError?)
        /// Refused whole as larger than the server takes; nothing reported, to be split.
        case tooLarge
    }

    /// Sends `operation`, reports what became of each change (failures also to `failures`)
    /// and settles those the app has its answer for; a change that failed in a way the engine
    /// retries by itself stays pending, moved behind the changes not yet tried.
    /// `splitsWhenTooLarge`: a request whose body passed the server's bound
    /// (`modifyRequestBodyBytes`) reports nothing and answers `tooLarge`, for the caller to split.
    private func run(
        _ operation: CKModifyRecordsOperation, counts: [PendingRecordZoneChange: Int], _ failures: SendFailures, splitsWhenTooLarge: Bool
    ) async throws -> RequestOutcome {
        // The engine decides about retries itself (it reports each failure first).
        operation.configuration.qualityOfService = .userInitiated
        let saves = Collector<[CKRecord.ID: Result<CKRecord, any Error>]>([:])
        let deletes = Collector<[CKRecord.ID: Result<Void, any Error>]>([:])
        operation.perRecordSaveBlock = { id, result in saves.update { $0[id] = result } }
        operation.perRecordDeleteBlock = { id, result in deletes.update { $0[id] = result } }
        let whole: (any Error)?
        do {
            try await database.run(operation) { operation.modifyRecordsResultBlock = $0 }
            whole = nil
        } catch {
            whole = error
        }
        let id = operation.operationID
        state.track { $0.sendsInFlight.removeAll { $0 == id } }
        let wholeError = whole.map { CKError.wrapping($0) }
        if wholeError?.code == .operationCancelled { throw wholeError! }
        if splitsWhenTooLarge, let wholeError, wholeError.code == .limitExceeded,
            wholeError.userInfo[CKErrorLimitNameKey] as? String == Limits.modifyRequestBodyBytes.name
        {
            return .tooLarge
        }

        var saved: [CKRecord] = []
        var failedSaves: [Event.SentRecordZoneChanges.FailedRecordSave] = []
        var deleted: [CKRecord.ID] = []
        var failedDeletes: [CKRecord.ID: CKError] = [:]
        var settled: [PendingRecordZoneChange: Int] = [:]
        var retried: [PendingRecordZoneChange] = []
        var busy: CKError?
        func failed(_ error: CKError, _ change: PendingRecordZoneChange) {
            failures.add(change.recordID, error)
            if Self.retriesByItself(error) {
                retried.append(change)
                if error.retryAfterSeconds != nil || [.zoneBusy, .serviceUnavailable, .requestRateLimited].contains(error.code) {
                    busy = busy ?? error
                }
            } else {
                // The app decides (merge and add again, save the zone first, …).
                settled[change] = counts[change]
            }
        }
        for record in operation.recordsToSave ?? [] {
            let change = PendingRecordZoneChange.saveRecord(record.recordID)
            switch saves.value[record.recordID] {
            case .success(let savedRecord)?:
                saved.append(savedRecord)
                settled[change] = counts[change]
            case .failure(let error)?:
                let error = CKError.wrapping(error)
                failedSaves.append(.init(record: record, error: error))
                failed(error, change)
            case nil:
                let error = wholeError ?? CKError(.internalError, "no answer for record \(record.recordID.recordName)")
                failedSaves.append(.init(record: record, error: error))
                failed(error, change)
            }
        }
        for recordID in operation.recordIDsToDelete ?? [] {
            let change = PendingRecordZoneChange.deleteRecord(recordID)
            switch deletes.value[recordID] {
            case .success?:
                deleted.append(recordID)
                settled[change] = counts[change]
            case .failure(let error)?:
                let error = CKError.wrapping(error)
                if error.code == .unknownItem {
                    // Already gone: what the app asked for.
                    deleted.append(recordID)
                    settled[change] = counts[change]
                } else {
                    failedDeletes[recordID] = error
                    failed(error, change)
                }
            case nil:
                let error = wholeError ?? CKError(.internalError, "no answer for record \(recordID.recordName)")
                failedDeletes[recordID] = error
                failed(error, change)
            }
        }
        state.removeSent(settled)
        state.requeue(retried)
        await emit(
            .sentRecordZoneChanges(
                .init(savedRecords: saved, failedRecordSaves: failedSaves, deletedRecordIDs: deleted, failedRecordDeletes: failedDeletes)))
        await emitStateUpdate()
        if let wholeError, busy == nil, Self.retriesByItself(wholeError) { throw wholeError }
        return .answered(busy: busy)
    }

    /// Failures the engine sends again by itself; the pending change stays.
    static func retriesByItself(_ error: CKError) -> Bool {
        [
            .networkFailure, .networkUnavailable, .zoneBusy, .serviceUnavailable, .requestRateLimited, .notAuthenticated,
            .operationCancelled, .batchRequestFailed, .serverResponseLost,
        ].contains(error.code)
    }
}

/// One fetch or send at a time, in the order they were asked for.
actor SyncGate {
    private var busy = false
    private var waiting: [CheckedContinuation<Void, Never>] = []

    func serialized<T: Sendable>(_ work: @Sendable () async throws -> T) async throws -> T {
        await acquire()
        do {
            let value = try await work()
            release()
            return value
        } catch {
            release()
            throw error
        }
    }

    private func acquire() async {
        if !busy {
            busy = true
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }

    private func release() {
        if waiting.isEmpty { busy = false } else { waiting.removeFirst().resume() }
    }
}

