// CloudKit code written with Swift concurrency (iOS 15 and later), the way Apple's current
// samples are: async convenience methods, typed subscripts, structured results.
import Foundation
import NimbusKit

struct Note: Identifiable, Hashable {
    static let recordType: CKRecord.RecordType = "Note"
    let id: CKRecord.ID
    var title: String
    var count: Int
    var edited: Date?
    var secret: String?

    init(record: CKRecord) {
        id = record.recordID
        // The typed subscripts of Apple's overlay: the annotation picks the type.
        let title: String? = record["title"]
        self.title = title ?? ""
        count = record["count"] as Int? ?? 0
        edited = record["editedAt"] as? Date
        // Apple's encryption sample: encrypted fields read and written the same way.
        secret = record.encryptedValues["secret"]
    }

    func record(in zoneID: CKRecordZone.ID) -> CKRecord {
        let record = CKRecord(recordType: Note.recordType, recordID: CKRecord.ID(recordName: id.recordName, zoneID: zoneID))
        record["title"] = title
        record["count"] = count
        record["editedAt"] = edited
        record.encryptedValues["secret"] = secret
        return record
    }
}

actor NoteRepository {
    let container: CKContainer
    let database: CKDatabase
    let zone = CKRecordZone(zoneName: "Notes")
    private var databaseToken: CKServerChangeToken?
    private var zoneToken: CKServerChangeToken?

    init(container: CKContainer = .default()) {
        self.container = container
        database = container.privateCloudDatabase
    }

    func prepare() async throws {
        guard try await container.accountStatus() == .available else { throw CKError(.notAuthenticated) }
        let userID = try await container.userRecordID()
        print(userID.recordName)
        _ = try await database.save(zone)
        let (saved, deleted) = try await database.modifyRecordZones(saving: [zone], deleting: [])
        print(saved.count, deleted.count)
        let subscription = CKRecordZoneSubscription(zoneID: zone.zoneID, subscriptionID: "notes-zone")
        let info = CKSubscription.NotificationInfo()
        info.shouldSendContentAvailable = true
        subscription.notificationInfo = info
        _ = try await database.save(subscription)
        _ = try await database.modifySubscriptions(saving: [subscription], deleting: [])
        _ = try await database.allSubscriptions()
        _ = try await database.allRecordZones()
    }

    func save(_ note: Note) async throws -> Note {
        let saved = try await database.save(note.record(in: zone.zoneID))
        return Note(record: saved)
    }

    func saveAll(_ notes: [Note]) async throws {
        let records = notes.map { $0.record(in: zone.zoneID) }
        let (saveResults, _) = try await database.modifyRecords(saving: records, deleting: [], savePolicy: .changedKeys)
        for (id, result) in saveResults {
            do {
                _ = try result.get()
            } catch let error as CKError where error.code == .serverRecordChanged {
                print("conflict on", id, error.serverRecord as Any)
            }
        }
    }

    func note(_ id: CKRecord.ID) async throws -> Note {
        Note(record: try await database.record(for: id))
    }

    func notes(matching text: String) async throws -> [Note] {
        let predicate = NSPredicate(format: "self CONTAINS %@", text)
        let query = CKQuery(recordType: Note.recordType, predicate: predicate)
        query.sortDescriptors = [NSSortDescriptor(key: "title", ascending: true)]
        var (results, cursor) = try await database.records(matching: query, inZoneWith: zone.zoneID, desiredKeys: nil, resultsLimit: 100)
        var notes = results.compactMap { try? $0.1.get() }.map(Note.init)
        while let next = cursor {
            (results, cursor) = try await database.records(continuingMatchFrom: next)
            notes += results.compactMap { try? $0.1.get() }.map(Note.init)
        }
        return notes
    }

    func delete(_ id: CKRecord.ID) async throws {
        try await database.deleteRecord(withID: id)
        _ = try await database.records(for: [id], desiredKeys: ["title"])
    }

    func sync() async throws -> (changed: [Note], deleted: [CKRecord.ID]) {
        let databaseChanges = try await database.databaseChanges(since: databaseToken)
        databaseToken = databaseChanges.changeToken
        print(databaseChanges.modifications.map(\.zoneID), databaseChanges.deletions.map(\.zoneID), databaseChanges.moreComing)
        let changes = try await database.recordZoneChanges(inZoneWith: zone.zoneID, since: zoneToken)
        zoneToken = changes.changeToken
        let changed = changes.modificationResultsByID.compactMap { try? $0.value.get().record }.map(Note.init)
        return (changed, changes.deletions.map(\.recordID))
    }
}
