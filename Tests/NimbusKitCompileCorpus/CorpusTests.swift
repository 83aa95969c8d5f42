import Foundation
import NimbusKit
import Testing

/// The corpus beside this file is CloudKit app code in every style Apple has published, with
/// only `import CloudKit` changed to `import NimbusKit`: that it compiles is the test
/// (issue 20). What runs here checks a few of its values, with no server.
@Suite("CloudKit code compiles with NimbusKit")
struct CorpusTests {
    @Test("a record read through the typed subscripts")
    func typedSubscripts() {
        let record = CKRecord(recordType: "Note")
        record["title"] = "Groceries"
        record["count"] = 3
        let note = Note(record: record)
        #expect(note.title == "Groceries" && note.count == 3 && note.edited == nil)
        let title: String? = record["title"]
        #expect(title == "Groceries")
        #expect(record["count"] as Int? == 3)
        #expect(record["count"] as Double? == 3)
        #expect(record["title"] as Int? == nil)
    }

    @Test("Apple's default arguments and legacy names")
    func defaults() {
        #expect(CKModifyRecordsOperation().recordsToSave == nil)
        #expect(CKModifyRecordsOperation(recordIDsToDelete: [CKRecord.ID(recordName: "a")]).recordIDsToDelete?.count == 1)
        #expect(CKModifyRecordZonesOperation(recordZonesToSave: [CKRecordZone(zoneName: "Z")]).recordZoneIDsToDelete == nil)
        #expect(CKModifySubscriptionsOperation(subscriptionIDsToDelete: ["s"]).subscriptionsToSave == nil)
        let configuration = CKFetchRecordZoneChangesOperation.ZoneConfiguration(resultsLimit: nil)
        #expect(configuration.resultsLimit == 0)
        #expect(CKNotificationInfo.self == CKSubscription.NotificationInfo.self)
        #expect(CKOperation().qualityOfService == .utility)
        #expect(Notification.Name.CKAccountChanged.rawValue == "CKAccountChangedNotification")
    }
}
