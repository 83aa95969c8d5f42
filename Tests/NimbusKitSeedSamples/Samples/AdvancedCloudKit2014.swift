// "Advanced CloudKit" (WWDC 2014, session 231) in today's Swift.
import NimbusKit

enum AdvancedCloudKit2014 {
    /// The NSOperation API: fetch records with progress, per-record and final blocks.
    static func fetchRecords(
        _ recordIDs: [CKRecord.ID], desiredKeys: [String]?, in database: CKDatabase,
        log: @escaping @Sendable (String) -> Void,
        completion: @escaping @Sendable ([CKRecord.ID: CKRecord]?, (any Error)?) -> Void
    ) {
        let operation = CKFetchRecordsOperation(recordIDs: recordIDs)
        operation.desiredKeys = desiredKeys
        operation.perRecordProgressBlock = { recordID, progress in
            log("progress \(recordID.recordName) \(progress)")
        }
        operation.perRecordCompletionBlock = { record, recordID, error in
            log("fetched \(recordID?.recordName ?? "?") error=\(error != nil)")
        }
        operation.fetchRecordsCompletionBlock = { recordsByRecordID, operationError in
            completion(recordsByRecordID, operationError)
        }
        database.add(operation)
    }

    /// Shoebox and receipts: each receipt points at its shoebox with a delete-self reference,
    /// so deleting the shoebox deletes its receipts, and a query finds a shoebox's receipts.
    static func fileReceipts(in zoneID: CKRecordZone.ID, count: Int) -> (CKRecord, [CKRecord]) {
        let shoebox = CKRecord(recordType: "Shoebox", recordID: CKRecord.ID(recordName: "Shoebox", zoneID: zoneID))
        let receipts = (0..<count).map { index -> CKRecord in
            let receipt = CKRecord(recordType: "Receipt", recordID: CKRecord.ID(recordName: "Receipt\(index)", zoneID: zoneID))
            receipt["owner"] = CKRecord.Reference(record: shoebox, action: .deleteSelf)
            receipt["amount"] = Double(index) * 9.99
            return receipt
        }
        return (shoebox, receipts)
    }

    static func receiptsQuery(shoebox: CKRecord) -> CKQuery {
        CKQuery(recordType: "Receipt", predicate: NSPredicate(format: "owner = %@", shoebox))
    }

    /// Custom zones give atomic commits: a batch succeeds or fails as a whole, and a failure is
    /// a partial failure whose per-item errors say which record failed.
    static func saveAtomically(
        _ records: [CKRecord], in database: CKDatabase,
        completion: @escaping @Sendable ([CKRecord.ID: CKError.Code]?, (any Error)?) -> Void
    ) {
        let operation = CKModifyRecordsOperation(recordsToSave: records, recordIDsToDelete: nil)
        operation.isAtomic = true
        operation.modifyRecordsCompletionBlock = { _, _, error in
            guard let error = error as? CKError, error.code == .partialFailure else {
                completion(nil, error)
                return
            }
            let partialErrors = error.userInfo[CKPartialErrorsByItemIDKey] as? [AnyHashable: any Error] ?? [:]
            var codes: [CKRecord.ID: CKError.Code] = [:]
            for (itemID, itemError) in partialErrors {
                if let recordID = itemID as? CKRecord.ID, let code = (itemError as? CKError)?.code { codes[recordID] = code }
            }
            completion(codes, error)
        }
        database.add(operation)
    }

    /// Save if unchanged; on a conflict apply the local diff to the server record and retry.
    static func saveResolvingConflicts(_ record: CKRecord, in database: CKDatabase) async throws -> CKRecord {
        do {
            return try await database.save(record)
        } catch let error as CKError where error.code == .serverRecordChanged {
            guard let serverRecord = error.userInfo[CKRecordChangedErrorServerRecordKey] as? CKRecord,
                let clientRecord = error.userInfo[CKRecordChangedErrorClientRecordKey] as? CKRecord,
                let ancestorRecord = error.userInfo[CKRecordChangedErrorAncestorRecordKey] as? CKRecord
            else { throw error }
            for key in clientRecord.changedKeys() {
                let mine = clientRecord[key].map { "\($0)" }
                let before = ancestorRecord[key].map { "\($0)" }
                if mine != before { serverRecord[key] = clientRecord[key] }
            }
            return try await database.save(serverRecord)
        }
    }
}
