// CloudKit code in the style of iOS 8 to 14 apps: completion handlers and the operations'
// older blocks. Only the import differs from an app written against Apple's CloudKit.
import Foundation
import NimbusKit

/// A notes store written the way the 2014–2016 sessions taught.
final class LegacyNoteStore: @unchecked Sendable {
    let container = CKContainer.default()
    lazy var database = container.privateCloudDatabase
    let zoneID = CKRecordZone.ID(zoneName: "Notes", ownerName: CKCurrentUserDefaultName)
    var serverChangeToken: CKServerChangeToken?
    var databaseChangeToken: CKServerChangeToken?

    func observeAccount() -> NSObjectProtocol {
        NotificationCenter.default.addObserver(forName: .CKAccountChanged, object: nil, queue: .main) { [weak self] _ in
            self?.checkAccount()
        }
    }

    func checkAccount() {
        container.accountStatus { status, error in
            switch status {
            case .available: print("signed in")
            case .noAccount, .restricted, .couldNotDetermine, .temporarilyUnavailable: print("not available", error as Any)
            @unknown default: break
            }
        }
        container.fetchUserRecordID { recordID, error in
            print(recordID?.recordName ?? "none", error?.localizedDescription ?? "")
        }
    }

    func createZone(completion: @escaping (Error?) -> Void) {
        let zone = CKRecordZone(zoneID: zoneID)
        let operation = CKModifyRecordZonesOperation(recordZonesToSave: [zone], recordZoneIDsToDelete: nil)
        operation.modifyRecordZonesCompletionBlock = { saved, deleted, error in
            completion(error)
        }
        operation.qualityOfService = .userInitiated
        database.add(operation)
        // Apple's defaults: either argument may be left out.
        _ = CKModifyRecordZonesOperation()
        _ = CKModifyRecordZonesOperation(recordZonesToSave: [zone])
    }

    func save(title: String, completion: @escaping (CKRecord?, Error?) -> Void) {
        let record = CKRecord(recordType: "Note", recordID: CKRecord.ID(recordName: UUID().uuidString, zoneID: zoneID))
        record["title"] = title as CKRecordValue
        record["count"] = 1 as NSNumber
        record["tags"] = ["a", "b"] as CKRecordValue
        record.setValue(Date(), forKey: "editedAt")
        database.save(record) { saved, error in
            if let error = error as? CKError {
                switch error.code {
                case .serverRecordChanged:
                    let server = error.serverRecord
                    let client = error.clientRecord
                    let ancestor = error.ancestorRecord
                    print(server as Any, client as Any, ancestor as Any)
                case .networkUnavailable, .networkFailure, .serviceUnavailable, .requestRateLimited, .zoneBusy:
                    let delay = error.retryAfterSeconds ?? 3
                    DispatchQueue.global().asyncAfter(deadline: .now() + delay) { self.save(title: title, completion: completion) }
                    return
                case .partialFailure:
                    for (id, itemError) in error.partialErrorsByItemID ?? [:] { print(id, itemError) }
                case .zoneNotFound, .userDeletedZone, .changeTokenExpired, .quotaExceeded, .unknownItem, .notAuthenticated:
                    break
                default: break
                }
            }
            completion(saved, error)
        }
    }

    func batch(_ records: [CKRecord], deleting ids: [CKRecord.ID]) {
        let operation = CKModifyRecordsOperation(recordsToSave: records, recordIDsToDelete: ids)
        operation.savePolicy = .changedKeys
        operation.isAtomic = true
        operation.perRecordCompletionBlock = { record, error in print(record.recordID, error as Any) }
        operation.perRecordProgressBlock = { record, progress in print(record.recordType, progress) }
        operation.modifyRecordsCompletionBlock = { saved, deleted, error in print(saved?.count ?? 0, deleted?.count ?? 0, error as Any) }
        operation.completionBlock = { print("done") }
        database.add(operation)
        // Apple's defaults: either argument may be left out.
        let empty = CKModifyRecordsOperation()
        empty.recordsToSave = records
        _ = CKModifyRecordsOperation(recordsToSave: records)
        _ = CKModifyRecordsOperation(recordIDsToDelete: ids)
    }

    func fetch(_ id: CKRecord.ID) {
        database.fetch(withRecordID: id) { record, error in
            let title = record?["title"] as? String
            let count = record?["count"] as? Int
            let tags = record?["tags"] as? [String]
            print(title as Any, count as Any, tags as Any, record?.recordChangeTag as Any, record?.modificationDate as Any)
        }
        let operation = CKFetchRecordsOperation(recordIDs: [id])
        operation.desiredKeys = ["title"]
        operation.perRecordCompletionBlock = { record, recordID, error in print(record as Any, recordID as Any, error as Any) }
        operation.fetchRecordsCompletionBlock = { recordsByID, error in print(recordsByID?.count ?? 0, error as Any) }
        database.add(operation)
        database.delete(withRecordID: id) { deletedID, error in print(deletedID as Any, error as Any) }
    }

    func query() {
        let predicate = NSPredicate(format: "title BEGINSWITH %@ AND count > %d", "Gro", 2)
        let query = CKQuery(recordType: "Note", predicate: predicate)
        query.sortDescriptors = [NSSortDescriptor(key: "modificationDate", ascending: false)]
        database.perform(query, inZoneWith: zoneID) { records, error in print(records?.count ?? 0, error as Any) }
        let operation = CKQueryOperation(query: query)
        operation.zoneID = zoneID
        operation.resultsLimit = 50
        operation.desiredKeys = ["title", "count"]
        operation.recordFetchedBlock = { record in print(record.recordID.recordName) }
        operation.queryCompletionBlock = { cursor, error in
            if let cursor { self.database.add(CKQueryOperation(cursor: cursor)) }
            print(error as Any)
        }
        database.add(operation)
    }

    /// Delta sync as the 2016 session shows it: database changes, then zone changes.
    func sync() {
        let databaseOperation = CKFetchDatabaseChangesOperation(previousServerChangeToken: databaseChangeToken)
        var changedZones: [CKRecordZone.ID] = []
        databaseOperation.recordZoneWithIDChangedBlock = { changedZones.append($0) }
        databaseOperation.recordZoneWithIDWasDeletedBlock = { print("deleted", $0) }
        databaseOperation.recordZoneWithIDWasPurgedBlock = { print("purged", $0) }
        databaseOperation.changeTokenUpdatedBlock = { self.databaseChangeToken = $0 }
        databaseOperation.fetchDatabaseChangesCompletionBlock = { token, moreComing, error in
            self.databaseChangeToken = token
            self.fetchZoneChanges(changedZones)
        }
        databaseOperation.fetchAllChanges = true
        database.add(databaseOperation)
    }

    func fetchZoneChanges(_ zoneIDs: [CKRecordZone.ID]) {
        var configurations: [CKRecordZone.ID: CKFetchRecordZoneChangesOperation.ZoneConfiguration] = [:]
        for zoneID in zoneIDs {
            let configuration = CKFetchRecordZoneChangesOperation.ZoneConfiguration()
            configuration.previousServerChangeToken = serverChangeToken
            configuration.resultsLimit = 100
            configurations[zoneID] = configuration
            // Apple's initializer takes an optional limit.
            let limit: Int? = nil
            configurations[zoneID] = .init(previousServerChangeToken: serverChangeToken, resultsLimit: limit, desiredKeys: nil)
        }
        let operation = CKFetchRecordZoneChangesOperation(recordZoneIDs: zoneIDs, configurationsByRecordZoneID: configurations)
        operation.recordChangedBlock = { record in print(record.recordID) }
        operation.recordWithIDWasDeletedBlock = { recordID, recordType in print(recordID, recordType) }
        operation.recordZoneChangeTokensUpdatedBlock = { zoneID, token, data in self.serverChangeToken = token }
        operation.recordZoneFetchCompletionBlock = { zoneID, token, data, moreComing, error in self.serverChangeToken = token }
        operation.fetchRecordZoneChangesCompletionBlock = { error in print(error as Any) }
        operation.fetchAllChanges = true
        database.add(operation)
    }

    /// The iOS 8 and 9 way to read one zone's changes, still in apps.
    func legacyZoneChanges() {
        let operation = CKFetchRecordChangesOperation(recordZoneID: zoneID, previousServerChangeToken: serverChangeToken)
        operation.desiredKeys = nil
        operation.resultsLimit = 200
        operation.recordChangedBlock = { record in print(record.recordID) }
        operation.recordWithIDWasDeletedBlock = { recordID in print(recordID) }
        operation.fetchRecordChangesCompletionBlock = { token, clientData, error in
            self.serverChangeToken = token
            print(operation.moreComing, clientData as Any, error as Any)
        }
        database.add(operation)
    }

    func subscribe() {
        let predicate = NSPredicate(value: true)
        let subscription = CKQuerySubscription(
            recordType: "Note", predicate: predicate, subscriptionID: "notes",
            options: [.firesOnRecordCreation, .firesOnRecordUpdate, .firesOnRecordDeletion])
        let info = CKNotificationInfo()
        info.shouldSendContentAvailable = true
        info.alertBody = "A note changed"
        info.desiredKeys = ["title"]
        subscription.notificationInfo = info
        let zoneSubscription = CKRecordZoneSubscription(zoneID: zoneID, subscriptionID: "zone")
        zoneSubscription.notificationInfo = CKSubscription.NotificationInfo()
        let databaseSubscription = CKDatabaseSubscription(subscriptionID: "db")
        let operation = CKModifySubscriptionsOperation(
            subscriptionsToSave: [subscription, zoneSubscription, databaseSubscription], subscriptionIDsToDelete: nil)
        operation.modifySubscriptionsCompletionBlock = { saved, deleted, error in print(saved?.count ?? 0, error as Any) }
        database.add(operation)
        _ = CKModifySubscriptionsOperation()
        _ = CKModifySubscriptionsOperation(subscriptionIDsToDelete: ["old"])
        database.save(subscription) { saved, error in print(saved as Any, error as Any) }
        database.fetchAllSubscriptions { subscriptions, error in print(subscriptions?.count ?? 0, error as Any) }
        database.delete(withSubscriptionID: "old") { id, error in print(id as Any, error as Any) }
    }

    func zones() {
        database.fetchAllRecordZones { zones, error in print(zones?.count ?? 0, error as Any) }
        database.fetch(withRecordZoneID: zoneID) { zone, error in print(zone as Any, error as Any) }
        database.save(CKRecordZone(zoneName: "Other")) { zone, error in print(zone as Any, error as Any) }
        database.delete(withRecordZoneID: zoneID) { id, error in print(id as Any, error as Any) }
    }

    func references(_ parent: CKRecord, _ child: CKRecord) {
        child["list"] = CKRecord.Reference(record: parent, action: .deleteSelf)
        child.parent = CKRecord.Reference(recordID: parent.recordID, action: .none)
        child.setParent(parent)
        child.setParent(parent.recordID)
        let asset = CKAsset(fileURL: URL(fileURLWithPath: "/tmp/photo.jpg"))
        child["photo"] = asset
        child["place"] = CLLocation(latitude: 37.33, longitude: -122.03)
        print(child.allKeys(), child.changedKeys(), child.creationDate as Any, child.creatorUserRecordID as Any)
    }
}
