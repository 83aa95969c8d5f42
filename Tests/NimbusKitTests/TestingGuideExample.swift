// The example of docs/testing.md, word for word (DocsExampleTests checks they match): a notes
// app's CKSyncEngine store, tested against a real Nimbus under throttling, a conflict and a
// lost push.
// BEGIN EXAMPLE
import Foundation
import NimbusTesting
import Testing

/// The app's sync layer: notes in memory, kept in step with the server by CKSyncEngine.
final class NoteStore: CKSyncEngineDelegate, @unchecked Sendable {
    static let zoneID = CKRecordZone.ID(zoneName: "Notes")
    private let lock = NSLock()
    private var notes: [String: String] = [:]
    private var serverRecords: [String: CKRecord] = [:]
    private(set) var engine: CKSyncEngine!

    init(_ container: CKContainer, automaticallySync: Bool = true) {
        var configuration = CKSyncEngine.Configuration(database: container.privateCloudDatabase, stateSerialization: nil, delegate: self)
        configuration.automaticallySync = automaticallySync
        engine = CKSyncEngine(configuration)
    }

    var all: [String: String] { lock.withLock { notes } }

    func write(_ name: String, _ text: String) {
        lock.withLock { notes[name] = text }
        engine.state.add(pendingRecordZoneChanges: [.saveRecord(CKRecord.ID(recordName: name, zoneID: Self.zoneID))])
    }

    func handleEvent(_ event: CKSyncEngine.Event, syncEngine: CKSyncEngine) async {
        switch event {
        case .fetchedRecordZoneChanges(let changes):
            lock.withLock {
                for modification in changes.modifications {
                    let record = modification.record
                    serverRecords[record.recordID.recordName] = record
                    notes[record.recordID.recordName] = record["text"] as? String
                }
            }
        case .sentRecordZoneChanges(let sent):
            var again: [CKSyncEngine.PendingRecordZoneChange] = []
            lock.withLock {
                for record in sent.savedRecords { serverRecords[record.recordID.recordName] = record }
                for failure in sent.failedRecordSaves where failure.error.code == .serverRecordChanged {
                    // Someone saved first: this device's text wins, on top of their record.
                    guard let theirs = failure.error.serverRecord else { continue }
                    serverRecords[failure.record.recordID.recordName] = theirs
                    again.append(.saveRecord(failure.record.recordID))
                }
            }
            syncEngine.state.add(pendingRecordZoneChanges: again)
        default:
            break
        }
    }

    func nextRecordZoneChangeBatch(_ context: CKSyncEngine.SendChangesContext, syncEngine: CKSyncEngine) async
        -> CKSyncEngine.RecordZoneChangeBatch?
    {
        let pending = syncEngine.state.pendingRecordZoneChanges.filter { context.options.scope.contains($0) }
        return await CKSyncEngine.RecordZoneChangeBatch(pendingChanges: pending) { id in
            self.lock.withLock {
                guard let text = self.notes[id.recordName] else { return nil }
                let record = self.serverRecords[id.recordName] ?? CKRecord(recordType: "Note", recordID: id)
                record["text"] = text
                return record
            }
        }
    }
}

@Suite("docs/testing.md: a CKSyncEngine store under faults")
struct NoteStoreTests {
    @Test("throttled, a lost push and a conflict: the store still converges")
    func convergesUnderFaults() async throws {
        try await NimbusTestServer.with { server in
            // The laptop syncs by itself (it fetches when a push says so); the test drives the phone.
            let laptopDevice = try await server.device(of: "alice", named: "laptop")
            let laptop = NoteStore(laptopDevice)
            let phone = NoteStore(try await server.device(of: "alice", named: "phone"), automaticallySync: false)
            // The laptop listens once its engine has subscribed to the database.
            try await eventually("the laptop subscribed") { !(try await laptopDevice.privateCloudDatabase.allSubscriptions()).isEmpty }
            phone.engine.state.add(pendingDatabaseChanges: [.saveZone(CKRecordZone(zoneID: NoteStore.zoneID))])

            // Throttled: the server asks the phone to wait two seconds; the note stays pending.
            try await server.switchOn(Fault(.throttled, retryAfter: 2, route: "records/modify"))
            phone.write("groceries", "milk")
            await #expect(throws: CKError.self) { try await phone.engine.sendChanges() }
            #expect(phone.engine.state.pendingRecordZoneChanges.count == 1)
            try await Task.sleep(for: .seconds(2))
            try await phone.engine.sendChanges()
            #expect(phone.engine.state.pendingRecordZoneChanges.isEmpty)
            try await eventually("the laptop heard of the note") { laptop.all["groceries"] == "milk" }  // the push came, the laptop fetched

            // A lost push: the laptop is not told, and finds the note when it fetches.
            try await server.switchOn(Fault(.pushDropped, user: "alice"))
            phone.write("todo", "call mum")
            try await phone.engine.sendChanges()
            try await Task.sleep(for: .seconds(1.5))
            #expect(laptop.all["todo"] == nil)
            try await laptop.engine.fetchChanges()
            #expect(laptop.all["todo"] == "call mum")

            // A conflict: the phone's save meets "someone saved first"; the store takes the
            // server's record, keeps its text, and the next send goes through.
            try await server.switchOn(Fault(.conflict, recordName: "groceries"))
            phone.write("groceries", "milk, eggs")
            await #expect(throws: CKError.self) { try await phone.engine.sendChanges() }
            try await phone.engine.sendChanges()
            try await eventually("the laptop heard of the edit") { laptop.all["groceries"] == "milk, eggs" }
        }
    }

    /// Waits up to thirty seconds for `condition` (pushes and fetches take their time on a busy machine).
    func eventually(_ what: String, _ condition: () async throws -> Bool) async throws {
        for _ in 0..<300 {
            if try await condition() { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        Issue.record("not so after 30 seconds: \(what)")
    }
}
// END EXAMPLE
