// CKSyncEngine as Apple's documentation and WWDC23 teach it: an actor that owns the local
// store and is the engine's delegate, state kept from every stateUpdate, a switch over every
// event, batches built from the pending changes in the context's scope, conflicts merged and
// added again.
import Foundation
import NimbusKit

actor NotesSync: CKSyncEngineDelegate {
    struct Note: Codable { var text: String; var systemFields: Data? }

    private var notes: [String: Note] = [:]
    private var lastState: CKSyncEngine.State.Serialization?
    private var _engine: CKSyncEngine?
    private let container: CKContainer
    static let zoneID = CKRecordZone.ID(zoneName: "Notes", ownerName: CKCurrentUserDefaultName)

    init(container: CKContainer) { self.container = container }

    var engine: CKSyncEngine {
        if let _engine { return _engine }
        var configuration = CKSyncEngine.Configuration(
            database: container.privateCloudDatabase, stateSerialization: lastState, delegate: self)
        configuration.automaticallySync = true
        configuration.subscriptionID = nil
        let engine = CKSyncEngine(configuration)
        _engine = engine
        return engine
    }

    func save(_ text: String, name: String) {
        notes[name, default: Note(text: text)].text = text
        let id = CKRecord.ID(recordName: name, zoneID: Self.zoneID)
        engine.state.add(pendingDatabaseChanges: [.saveZone(CKRecordZone(zoneID: Self.zoneID))])
        engine.state.add(pendingRecordZoneChanges: [.saveRecord(id)])
    }

    func delete(_ name: String) {
        notes[name] = nil
        engine.state.add(pendingRecordZoneChanges: [.deleteRecord(CKRecord.ID(recordName: name, zoneID: Self.zoneID))])
    }

    func syncNow() async throws {
        try await engine.fetchChanges()
        try await engine.sendChanges(CKSyncEngine.SendChangesOptions(scope: .zoneIDs([Self.zoneID])))
        try await engine.fetchChanges(CKSyncEngine.FetchChangesOptions(scope: .allExcluding([])))
        await engine.cancelOperations()
        print(engine.state.hasPendingUntrackedChanges, engine.state.zoneIDsWithUnfetchedServerChanges, engine.database.databaseScope)
    }

    func handleEvent(_ event: CKSyncEngine.Event, syncEngine: CKSyncEngine) async {
        switch event {
        case .stateUpdate(let update):
            lastState = update.stateSerialization
            _ = try? JSONEncoder().encode(update.stateSerialization)
        case .accountChange(let change):
            switch change.changeType {
            case .signIn(let user): print("signed in", user.recordName)
            case .signOut, .switchAccounts: notes = [:]
            @unknown default: break
            }
        case .fetchedDatabaseChanges(let changes):
            for deletion in changes.deletions where deletion.zoneID == Self.zoneID {
                switch deletion.reason {
                case .deleted, .purged, .encryptedDataReset: notes = [:]
                @unknown default: break
                }
            }
            print(changes.modifications.map(\.zoneID))
        case .fetchedRecordZoneChanges(let changes):
            for modification in changes.modifications {
                let record = modification.record
                let coder = NSKeyedArchiver(requiringSecureCoding: true)
                record.encodeSystemFields(with: coder)
                notes[record.recordID.recordName] = Note(text: record["text"] ?? "", systemFields: coder.encodedData)
            }
            for deletion in changes.deletions { notes[deletion.recordID.recordName] = nil }
        case .sentDatabaseChanges(let sent):
            print(sent.savedZones.count, sent.failedZoneSaves.map(\.error.code), sent.deletedZoneIDs, sent.failedZoneDeletes)
        case .sentRecordZoneChanges(let sent):
            var again: [CKSyncEngine.PendingRecordZoneChange] = []
            var zonesToSave: [CKSyncEngine.PendingDatabaseChange] = []
            for record in sent.savedRecords { print("saved", record.recordID.recordName) }
            for failure in sent.failedRecordSaves {
                let id = failure.record.recordID
                switch failure.error.code {
                case .serverRecordChanged:
                    if let server = failure.error.serverRecord {
                        let mine: String = failure.record["text"] ?? ""
                        notes[id.recordName]?.text = (server["text"] ?? "") + mine
                        again.append(.saveRecord(id))
                    }
                case .zoneNotFound:
                    zonesToSave.append(.saveZone(CKRecordZone(zoneID: id.zoneID)))
                    again.append(.saveRecord(id))
                case .unknownItem:
                    notes[id.recordName]?.systemFields = nil
                    again.append(.saveRecord(id))
                case .networkFailure, .networkUnavailable, .zoneBusy, .serviceUnavailable, .notAuthenticated, .operationCancelled:
                    break  // the engine tries again
                default:
                    print("cannot save", id, failure.error)
                }
            }
            syncEngine.state.add(pendingDatabaseChanges: zonesToSave)
            syncEngine.state.add(pendingRecordZoneChanges: again)
            print(sent.deletedRecordIDs, sent.failedRecordDeletes)
        case .willFetchChanges(let will): print(will.context.reason, will.context.options.scope)
        case .willFetchRecordZoneChanges(let will): print(will.zoneID)
        case .didFetchRecordZoneChanges(let did): print(did.zoneID, did.error as Any)
        case .didFetchChanges(let did): print(did.context.options.prioritizedZoneIDs)
        case .willSendChanges(let will): print(will.context.options.scope)
        case .didSendChanges(let did): print(did.context.reason == .manual)
        @unknown default:
            print("an event of a newer SDK", event)
        }
    }

    func nextRecordZoneChangeBatch(_ context: CKSyncEngine.SendChangesContext, syncEngine: CKSyncEngine) async
        -> CKSyncEngine.RecordZoneChangeBatch?
    {
        let scope = context.options.scope
        let changes = syncEngine.state.pendingRecordZoneChanges.filter { scope.contains($0) }
        let notes = self.notes
        let batch = await CKSyncEngine.RecordZoneChangeBatch(pendingChanges: changes) { recordID in
            guard let note = notes[recordID.recordName] else {
                syncEngine.state.remove(pendingRecordZoneChanges: [.saveRecord(recordID)])
                return nil
            }
            let record = CKRecord(recordType: "Note", recordID: recordID)
            record["text"] = note.text
            return record
        }
        return batch
    }

    func nextFetchChangesOptions(_ context: CKSyncEngine.FetchChangesContext, syncEngine: CKSyncEngine) async
        -> CKSyncEngine.FetchChangesOptions
    {
        var options = context.options
        options.prioritizedZoneIDs = [Self.zoneID]
        return options
    }
}
