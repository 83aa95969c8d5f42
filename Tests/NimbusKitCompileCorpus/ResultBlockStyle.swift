// CloudKit code in the style Apple introduced with iOS 15: operations report `Result`s per
// item and at the end, and the convenience API takes `Result` completion handlers.
import Foundation
import NimbusKit

final class ResultStyleSync: @unchecked Sendable {
    let database = CKContainer(identifier: "iCloud.com.example.notes").privateCloudDatabase
    let zoneID = CKRecordZone.ID(zoneName: "Notes")

    func save(_ records: [CKRecord], deleting ids: [CKRecord.ID], completion: @escaping (Result<Void, Error>) -> Void) {
        let operation = CKModifyRecordsOperation(recordsToSave: records, recordIDsToDelete: ids)
        operation.perRecordSaveBlock = { recordID, result in
            switch result {
            case .success(let record): print("saved", record.recordChangeTag ?? "")
            case .failure(let error): print("failed", recordID, error)
            }
        }
        operation.perRecordDeleteBlock = { recordID, result in print(recordID, result) }
        operation.modifyRecordsResultBlock = { result in completion(result) }
        let configuration = CKOperation.Configuration()
        configuration.timeoutIntervalForRequest = 30
        configuration.isLongLived = false
        configuration.qualityOfService = .utility
        operation.configuration = configuration
        database.add(operation)
    }

    func fetch(_ ids: [CKRecord.ID]) {
        let operation = CKFetchRecordsOperation(recordIDs: ids)
        operation.perRecordResultBlock = { recordID, result in
            if case .success(let record) = result { print(record[CKRecord.FieldKey("title")] as Any) }
        }
        operation.fetchRecordsResultBlock = { result in print(result) }
        database.add(operation)
        database.fetch(withRecordIDs: ids, desiredKeys: ["title"]) { result in
            switch result {
            case .success(let byID):
                for (id, item) in byID { print(id, (try? item.get())?.recordType ?? "") }
            case .failure(let error): print(error)
            }
        }
    }

    func query() {
        let query = CKQuery(recordType: "Note", predicate: NSPredicate(format: "count >= %d", 1))
        let operation = CKQueryOperation(query: query)
        operation.recordMatchedBlock = { recordID, result in print(recordID, result) }
        operation.queryResultBlock = { result in
            if case .success(let cursor?) = result { self.database.add(CKQueryOperation(cursor: cursor)) }
        }
        database.add(operation)
        database.fetch(withQuery: query, inZoneWith: zoneID, desiredKeys: nil, resultsLimit: CKQueryOperation.maximumResults) { result in
            if case .success(let (matchResults, cursor)) = result { print(matchResults.count, cursor as Any) }
        }
    }

    func changes(since token: CKServerChangeToken?) {
        let databaseOperation = CKFetchDatabaseChangesOperation(previousServerChangeToken: token)
        databaseOperation.recordZoneWithIDChangedBlock = { print($0) }
        databaseOperation.fetchDatabaseChangesResultBlock = { result in
            if case .success(let (token, moreComing)) = result { print(token, moreComing) }
        }
        database.add(databaseOperation)

        let operation = CKFetchRecordZoneChangesOperation(
            recordZoneIDs: [zoneID],
            configurationsByRecordZoneID: [zoneID: .init(previousServerChangeToken: token)])
        operation.recordWasChangedBlock = { recordID, result in print(recordID, result) }
        operation.recordWithIDWasDeletedBlock = { recordID, recordType in print(recordID, recordType) }
        operation.recordZoneFetchResultBlock = { zoneID, result in
            if case .success(let (token, _, moreComing)) = result { print(zoneID, token, moreComing) }
        }
        operation.fetchRecordZoneChangesResultBlock = { result in print(result) }
        database.add(operation)
    }

    func convenience(_ record: CKRecord) {
        database.modifyRecords(saving: [record], deleting: [], savePolicy: .allKeys, atomically: false) { result in
            if case .success(let (saveResults, deleteResults)) = result { print(saveResults.count, deleteResults.count) }
        }
        database.modifyRecordZones(saving: [CKRecordZone(zoneID: zoneID)], deleting: []) { result in print(result) }
        database.fetch(withRecordZoneIDs: [zoneID]) { result in print(result) }
        database.fetchAllRecordZones { zones, error in print(zones as Any, error as Any) }
        database.modifySubscriptions(saving: [CKDatabaseSubscription(subscriptionID: "all")], deleting: []) { result in print(result) }
    }
}
