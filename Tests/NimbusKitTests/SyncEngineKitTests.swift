import Foundation
@testable import NimbusKit
import NimbusTestSupport
import Testing

/// CKSyncEngine (issue 20): two devices of one user converge through a live server after
/// concurrent edits, deletions, a conflict the app merges, an offline period and a crash of
/// one device mid-send; bad batches and bad state serializations are handled.
@Suite("NimbusKit CKSyncEngine")
struct SyncEngineKitTests {
    static let zoneID = CKRecordZone.ID(zoneName: "Notes")

    @Test("two devices converge: edits, deletions, a merged conflict, an offline period, a crash mid-send")
    func twoDevicesConverge() async throws {
        try await TestServer.with { server in
            try await server.createUser("ann")
            let a = SyncDevice(server, name: "A")
            let b = SyncDevice(server, name: "B")
            try await a.start()
            try await b.start()

            // A creates the zone and three notes; B fetches them.
            a.engine.state.add(pendingDatabaseChanges: [.saveZone(CKRecordZone(zoneID: Self.zoneID))])
            for name in ["n1", "n2", "n3"] { a.edit(name, "first \(name)") }
            try await a.engine.sendChanges()
            #expect(a.engine.state.pendingRecordZoneChanges.isEmpty)
            try await b.engine.fetchChanges()
            expectEqual(b.notes, ["n1": "first n1", "n2": "first n2", "n3": "first n3"])
            #expect(b.events.contains { $0.hasPrefix("accountChange(signIn") })

            // Concurrent edits and a deletion on both sides.
            a.edit("n1", "A's n1")
            b.edit("n2", "B's n2")
            b.delete("n3")
            try await a.engine.sendChanges()
            try await b.engine.sendChanges()
            try await a.engine.fetchChanges()
            try await b.engine.fetchChanges()
            expectEqual(a.notes, ["n1": "A's n1", "n2": "B's n2"])
            expectEqual(b.notes, a.notes)

            // A conflict: both edit n1; B's send meets A's change, fails it (as CloudKit's
            // engine, sendChanges throws after the event), B merges and adds it again; the
            // merge goes with B's next send, not the same one.
            a.edit("n1", "from A")
            b.edit("n1", "from B")
            try await a.engine.sendChanges()
            await #expect(throws: CKError.self) { try await b.engine.sendChanges() }
            expectEqual(b.conflicts, ["n1"])
            expectEqual(b.engine.state.pendingRecordZoneChanges, [.saveRecord(Self.id("n1"))])
            try await b.engine.sendChanges()
            #expect(b.engine.state.pendingRecordZoneChanges.isEmpty)
            try await a.engine.fetchChanges()
            try await b.engine.fetchChanges()
            expectEqual(a.notes["n1"], "from A + from B")
            expectEqual(b.notes, a.notes)

            // Offline: B edits with no server in reach; the changes wait, then go.
            let offline = SyncDevice(server, name: "B", journals: b.journals, serverURL: URL(string: "http://127.0.0.1:1")!)
            offline.inherit(from: b)
            try await offline.start()
            offline.edit("n4", "written offline")
            offline.edit("n2", "B offline edit")
            await #expect(throws: CKError.self) { try await offline.engine.sendChanges() }
            expectEqual(Set(offline.engine.state.pendingRecordZoneChanges), [.saveRecord(Self.id("n4")), .saveRecord(Self.id("n2"))])
            a.edit("n5", "A while B was away")
            try await a.engine.sendChanges()
            // Back online: a new engine from what the app kept.
            let online = SyncDevice(server, name: "B", journals: b.journals)
            online.inherit(from: offline)
            try await online.start()
            expectEqual(online.engine.state.pendingRecordZoneChanges.count, 2)
            try await online.engine.sendChanges()
            try await online.engine.fetchChanges()
            try await a.engine.fetchChanges()
            expectEqual(a.notes["n4"], "written offline")
            expectEqual(a.notes["n2"], "B offline edit")
            expectEqual(online.notes, a.notes)

            // A crash mid-send: the server applied A's request, the answer never came, the
            // process died. The app kept no state after adding the changes.
            let relay = try await AnswerDroppingRelay(targetPort: server.port)
            defer { Task { try? await relay.close() } }
            let doomed = SyncDevice(server, name: "A", journals: a.journals, serverURL: URL(string: "http://127.0.0.1:\(relay.port)")!)
            doomed.inherit(from: a)
            try await doomed.start()
            try await doomed.engine.fetchChanges()  // signed in, account checked: only the send is left to lose
            let keptBeforeTheCrash = doomed.savedState
            doomed.edit("n6", "sent as the process died")
            doomed.edit("n1", "A's last edit")
            relay.dropAnswers(1)
            let sending = Task { try await doomed.engine.sendChanges() }
            try await waitUntil { relay.droppedAnswers == 1 }
            doomed.container.longLivedOperations.abandonAll()  // the process is gone
            sending.cancel()

            let relaunched = SyncDevice(server, name: "A", journals: a.journals)
            relaunched.inherit(from: doomed)
            relaunched.savedState = keptBeforeTheCrash
            try await relaunched.start()
            // What the app kept knew nothing of the two edits: the journal carried them.
            let kept = try JSONDecoder().decode(CKSyncEngine.State.Serialization.self, from: try #require(keptBeforeTheCrash))
            #expect(kept.stored.pendingRecordZoneChanges.isEmpty && kept.stored.sendsInFlight.isEmpty)
            expectEqual(relaunched.engine.state.snapshot.sendsInFlight.count, 1)
            try await relaunched.engine.sendChanges()
            // The resumed request was answered from its first outcome: saved, no conflict.
            #expect(relaunched.conflicts.isEmpty)
            #expect(relaunched.saved.contains("n6"))
            #expect(relaunched.engine.state.pendingRecordZoneChanges.isEmpty)
            #expect(relaunched.engine.state.snapshot.sendsInFlight.isEmpty)
            try await online.engine.fetchChanges()
            try await relaunched.engine.fetchChanges()
            expectEqual(online.notes["n6"], "sent as the process died")
            expectEqual(online.notes["n1"], "A's last edit")
            expectEqual(online.notes, relaunched.notes)

            // Both devices create the same record before either hears of the other's.
            relaunched.edit("twin", "A's twin")
            online.edit("twin", "B's twin")
            try await relaunched.engine.sendChanges()
            await #expect(throws: CKError.self) { try await online.engine.sendChanges() }
            #expect(online.conflicts.contains("twin"), "\(online.failures)")
            try await online.engine.sendChanges()
            try await relaunched.engine.fetchChanges()
            expectEqual(relaunched.notes["twin"], "A's twin + B's twin")
        }
    }

    @Test("a batch over the request limit is split, never refused; atomic batches per zone")
    func oversizedBatchIsSplit() async throws {
        try await TestServer.with { server in
            try await server.createUser("ann")
            let a = SyncDevice(server, name: "A")
            try await a.start()
            _ = try await a.container.privateCloudDatabase.save(CKRecordZone(zoneID: Self.zoneID))
            for index in 0..<450 { a.edit("bulk\(index)", "note \(index)") }
            a.batchAll = true
            try await a.engine.sendChanges()
            expectEqual(a.sentRequests, [200, 200, 50])
            expectEqual(a.saved.count, 450)
            #expect(a.engine.state.pendingRecordZoneChanges.isEmpty)

            // Over the limit and atomic by zone: still split, each request one zone's.
            let requests = CKSyncEngine.requests(
                saves: (0..<250).map { CKRecord(recordType: "Note", recordID: Self.id("x\($0)")) }
                    + [CKRecord(recordType: "Note", recordID: CKRecord.ID(recordName: "y", zoneID: CKRecordZone.ID(zoneName: "Other")))],
                deletes: [Self.id("gone")], atomicByZone: true)
            expectEqual(requests.map(\.items.count), [200, 51, 1])
            #expect(requests.allSatisfy { $0.atomic })
            #expect(requests.allSatisfy { Set($0.items.map(\.recordID.zoneID)).count == 1 })

            // Sixty records of 100 KB: 6 MB, over the 4 MiB a records/modify body may carry
            // (modifyRequestBodyBytes). The server refuses the request whole; the engine sends
            // it again in halves, and every record arrives, none reported failed.
            let before = a.sentRequests.count
            let text = String(repeating: "x", count: 100_000)
            for index in 0..<60 { a.edit("large\(index)", text) }
            try await a.engine.sendChanges()
            expectEqual(a.saved.filter { $0.hasPrefix("large") }.count, 60)
            #expect(a.failures.isEmpty, "\(a.failures)")
            #expect(a.engine.state.pendingRecordZoneChanges.isEmpty)
            #expect(a.sentRequests.count - before >= 2, "\(a.sentRequests)")
        }
    }

    @Test("automatic sync: a change on one device arrives on the other by notification; added changes go by themselves")
    func automaticSync() async throws {
        try await TestServer.with { server in
            try await server.createUser("ann")
            let a = SyncDevice(server, name: "A")
            let b = SyncDevice(server, name: "B", automaticallySync: true)
            try await a.start()
            try await b.start()
            a.engine.state.add(pendingDatabaseChanges: [.saveZone(CKRecordZone(zoneID: Self.zoneID))])
            try await a.engine.sendChanges()
            // B's engine subscribes, fetches and connects on its own; after its first fetch
            // only a notification brings A's edits. A keeps writing until B hears.
            try await waitUntil { b.events.contains("didFetchChanges") }
            var heard = false
            for attempt in 0..<30 where !heard {
                a.edit("live", "edit \(attempt)")
                try await a.engine.sendChanges()
                heard = (try? await waitUntil(within: 1) { b.notes["live"] == "edit \(attempt)" }) != nil
            }
            #expect(heard)
            let subscriptions = try await b.container.privateCloudDatabase.allSubscriptions()
            #expect(subscriptions.contains { $0.subscriptionID == CKSyncEngine.defaultSubscriptionID })
            // B adds a change and does not call sendChanges.
            b.edit("fromB", "sent by itself")
            try await waitUntil(within: 10) { b.engine.state.pendingRecordZoneChanges.isEmpty }
            try await a.engine.fetchChanges()
            expectEqual(a.notes["fromB"], "sent by itself")
        }
    }

    @Test("bad state: a garbled serialization is a clear decoding error; another container's starts fresh; the journal survives a crash")
    func badState() async throws {
        try await TestServer.with { server in
            try await server.createUser("ann")
            #expect {
                _ = try JSONDecoder().decode(CKSyncEngine.State.Serialization.self, from: Data(#"{"pending": 1}"#.utf8))
            } throws: { error in
                "\(error)".contains("not a CKSyncEngine state serialization")
            }

            let a = SyncDevice(server, name: "A")
            try await a.start()
            try await a.engine.fetchChanges()  // signed in: the app has kept a state
            a.edit("kept", "pending")
            let other = CKSyncEngine.State.Stored(containerIdentifier: "iCloud.other", databaseScope: "private")
            let foreign = try JSONEncoder().encode(CKSyncEngine.State.Serialization(stored: other))
            let fresh = SyncDevice(server, name: "A2")
            fresh.savedState = foreign
            try await fresh.start()
            #expect(fresh.engine.state.pendingRecordZoneChanges.isEmpty)
            expectEqual(fresh.engine.state.snapshot.containerIdentifier, TestServer.container)

            // The app crashed before it kept the stateUpdate that followed the edit: started
            // from what it kept, the engine takes the change from the journal of that state's
            // history. An engine started fresh in the same folder is another device: it sees
            // nothing of it.
            let keptBeforeTheEdit = try #require(a.savedStates.first { !$0.pending.contains("kept") }?.data)
            try await waitUntil { a.savedStates.last?.pending.contains("kept") == true }
            let relaunched = SyncDevice(server, name: "A", journals: a.journals)
            relaunched.savedState = keptBeforeTheEdit
            try await relaunched.start()
            expectEqual(relaunched.engine.state.pendingRecordZoneChanges, [.saveRecord(Self.id("kept"))])
            let anotherDevice = SyncDevice(server, name: "A3", journals: a.journals)
            try await anotherDevice.start()
            #expect(anotherDevice.engine.state.pendingRecordZoneChanges.isEmpty)
        }
    }

    static func id(_ name: String) -> CKRecord.ID { CKRecord.ID(recordName: name, zoneID: zoneID) }
}

/// Polls `condition` until it holds or `within` seconds pass.
func waitUntil(within seconds: Double = 20, _ condition: @Sendable () -> Bool) async throws {
    let deadline = Date().addingTimeInterval(seconds)
    while !condition() {
        guard Date() < deadline else { throw TestFailure("condition not met within \(seconds) s") }
        try await Task.sleep(for: .milliseconds(50))
    }
}

/// A notes app on one device: its local store, its kept engine state, and the delegate that
/// merges conflicts by joining both texts.
final class SyncDevice: CKSyncEngineDelegate, @unchecked Sendable {
    let container: CKContainer
    let journals: URL
    let automaticallySync: Bool
    private let lock = NSLock()
    private var _notes: [String: String] = [:]
    private var _serverRecords: [String: CKRecord] = [:]
    private var _savedState: Data?
    private var _savedStates: [(data: Data, pending: [String])] = []
    private var _events: [String] = []
    private var _conflicts: [String] = []
    private var _failures: [String] = []
    private var _saved: [String] = []
    private var _sentRequests: [Int] = []
    private var _batchAll = false
    private var _atomicByZone = false
    private(set) var engine: CKSyncEngine!

    init(_ server: TestServer, name: String, journals: URL? = nil, serverURL: URL? = nil, automaticallySync: Bool = false) {
        var configuration = server.configuration(user: "ann")
        if let serverURL { configuration.serverURL = serverURL }
        // Short, so failures show soon; long enough for a 3 MB batch on a busy two-core machine.
        configuration.requestTimeout = 15
        self.journals = journals ?? FileManager.default.temporaryDirectory.appendingPathComponent("sync-\(name)-\(UUID().uuidString)")
        configuration.longLivedOperationDirectory = self.journals
        container = CKContainer(configuration: configuration)
        self.automaticallySync = automaticallySync
    }

    func start() async throws {
        let serialization = try savedState.map { try JSONDecoder().decode(CKSyncEngine.State.Serialization.self, from: $0) }
        var configuration = CKSyncEngine.Configuration(
            database: container.privateCloudDatabase, stateSerialization: serialization, delegate: self)
        configuration.automaticallySync = automaticallySync
        engine = CKSyncEngine(configuration)
    }

    var notes: [String: String] {
        get { lock.withLock { _notes } }
        set { lock.withLock { _notes = newValue } }
    }
    var savedState: Data? {
        get { lock.withLock { _savedState } }
        set { lock.withLock { _savedState = newValue } }
    }
    /// Every state the app kept, with the records pending in it.
    var savedStates: [(data: Data, pending: [String])] { lock.withLock { _savedStates } }
    var events: [String] { lock.withLock { _events } }
    var conflicts: [String] { lock.withLock { _conflicts } }
    var failures: [String] { lock.withLock { _failures } }
    var saved: [String] { lock.withLock { _saved } }
    /// The server's copy of a record as this device last saw it.
    func serverRecord(_ name: String) -> CKRecord? { lock.withLock { _serverRecords[name] } }
    var sentRequests: [Int] { lock.withLock { _sentRequests } }
    var batchAll: Bool {
        get { lock.withLock { _batchAll } }
        set { lock.withLock { _batchAll = newValue } }
    }
    /// Batches the engine applies all or nothing per zone.
    var atomicByZone: Bool {
        get { lock.withLock { _atomicByZone } }
        set { lock.withLock { _atomicByZone = newValue } }
    }

    /// What the app had on disk, for a device started again (or its engine recreated).
    func inherit(from other: SyncDevice) {
        let (notes, records, state) = other.lock.withLock { (other._notes, other._serverRecords, other._savedState) }
        lock.withLock {
            _notes = notes
            _serverRecords = records
            _savedState = state
        }
    }

    func edit(_ name: String, _ text: String) {
        lock.withLock { _notes[name] = text }
        engine.state.add(pendingRecordZoneChanges: [.saveRecord(SyncEngineKitTests.id(name))])
    }

    func delete(_ name: String) {
        lock.withLock { _notes[name] = nil }
        engine.state.add(pendingRecordZoneChanges: [.deleteRecord(SyncEngineKitTests.id(name))])
    }

    /// The record to send: the last server copy (its change tag) with the local text.
    private func record(_ id: CKRecord.ID) -> CKRecord? {
        lock.withLock {
            guard let text = _notes[id.recordName] else { return nil }
            let record = _serverRecords[id.recordName] ?? CKRecord(recordType: "Note", recordID: id)
            record["text"] = text
            return record
        }
    }

    func handleEvent(_ event: CKSyncEngine.Event, syncEngine: CKSyncEngine) async {
        lock.withLock { _events.append(event.description) }
        switch event {
        case .stateUpdate(let update):
            let data = try? JSONEncoder().encode(update.stateSerialization)
            savedState = data
            if let data {
                let pending = update.stateSerialization.stored.pendingRecordZoneChanges.map(\.recordID.recordName)
                lock.withLock { _savedStates.append((data, pending)) }
            }
        case .fetchedRecordZoneChanges(let changes):
            lock.withLock {
                for modification in changes.modifications {
                    let record = modification.record
                    _serverRecords[record.recordID.recordName] = record
                    _notes[record.recordID.recordName] = record["text"] as? String
                }
                for deletion in changes.deletions {
                    _serverRecords[deletion.recordID.recordName] = nil
                    _notes[deletion.recordID.recordName] = nil
                }
            }
        case .sentRecordZoneChanges(let sent):
            var again: [CKSyncEngine.PendingRecordZoneChange] = []
            var zonesAgain: [CKSyncEngine.PendingDatabaseChange] = []
            lock.withLock {
                _sentRequests.append(sent.savedRecords.count + sent.failedRecordSaves.count + sent.deletedRecordIDs.count)
                for record in sent.savedRecords {
                    _serverRecords[record.recordID.recordName] = record
                    _saved.append(record.recordID.recordName)
                }
                for failure in sent.failedRecordSaves {
                    let id = failure.record.recordID
                    let name = id.recordName
                    _failures.append("\(name): \(failure.error.code)")
                    switch failure.error.code {
                    case .serverRecordChanged:
                        guard let server = failure.error.serverRecord else { continue }
                        // Merge: both texts, the server's first.
                        _conflicts.append(name)
                        let mine = _notes[name] ?? ""
                        let theirs = server["text"] as? String ?? ""
                        _notes[name] = "\(theirs) + \(mine)"
                        _serverRecords[name] = server
                        again.append(.saveRecord(id))
                    case .zoneNotFound:
                        // Deleted elsewhere: the zone goes first, then the record, made anew.
                        zonesAgain.append(.saveZone(CKRecordZone(zoneID: id.zoneID)))
                        _serverRecords[name] = nil
                        again.append(.saveRecord(id))
                    case .unknownItem:
                        // Deleted elsewhere: this device still has it, and sends it anew.
                        _serverRecords[name] = nil
                        again.append(.saveRecord(id))
                    default:
                        break
                    }
                }
            }
            syncEngine.state.add(pendingDatabaseChanges: zonesAgain)
            syncEngine.state.add(pendingRecordZoneChanges: again)
        default:
            break
        }
    }

    func nextRecordZoneChangeBatch(_ context: CKSyncEngine.SendChangesContext, syncEngine: CKSyncEngine) async
        -> CKSyncEngine.RecordZoneChangeBatch?
    {
        let pending = syncEngine.state.pendingRecordZoneChanges.filter { context.options.scope.contains($0) }
        if batchAll {
            // A delegate that hands everything over at once, past the request limit.
            let saves = pending.compactMap { change -> CKRecord? in
                if case .saveRecord(let id) = change { return record(id) }
                return nil
            }
            return saves.isEmpty ? nil : CKSyncEngine.RecordZoneChangeBatch(recordsToSave: saves)
        }
        guard var batch = await CKSyncEngine.RecordZoneChangeBatch(pendingChanges: pending, recordProvider: { id in self.record(id) })
        else { return nil }
        batch.atomicByZone = atomicByZone
        return batch
    }
}
