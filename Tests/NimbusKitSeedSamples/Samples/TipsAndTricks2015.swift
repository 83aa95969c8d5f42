// "CloudKit Tips and Tricks" (WWDC 2015, session 715) in today's Swift.
import NimbusKit

enum TipsAndTricks2015 {
    /// Subscripting with Swift types.
    static func clownCount(_ record: CKRecord) -> (Int?, Date?) {
        record.setObject(5 as NSNumber, forKey: "numberOfClowns")
        record["numberOfClowns"] = 5
        record["date"] = Date()
        var partyDate: Date?
        if let date = record["date"] as? Date { partyDate = date }
        return (record["numberOfClowns"] as? Int, partyDate)
    }

    static func checkAccount(completion: @escaping @Sendable (CKAccountStatus, (any Error)?) -> Void) {
        let container = CKContainer.default()
        container.accountStatus { accountStatus, error in
            if accountStatus == .noAccount {
                // Ask the user to sign in before writing to the public database.
            }
            completion(accountStatus, error)
        }
    }

    /// Busy servers say when to come back.
    static func retryDate(for error: any Error) -> Date? {
        guard let error = error as? CKError else { return nil }
        if let retryAfterValue = error.userInfo[CKErrorRetryAfterKey] as? Double {
            return Date(timeIntervalSinceNow: retryAfterValue)
        }
        return nil
    }

    /// The server's copy of a record that changed under us.
    static func serverCopy(from error: any Error) -> CKRecord? {
        let userInfo = (error as? CKError)?.userInfo ?? [:]
        if let serverRecord = userInfo[CKRecordChangedErrorServerRecordKey] as? CKRecord {
            return serverRecord
        }
        return nil
    }

    /// Only 20 photos, only their thumbnails; then the next page from the cursor.
    static func thumbnails(
        of party: CKRecord, in database: CKDatabase, cursor: CKQueryOperation.Cursor?,
        completion: @escaping @Sendable ([CKRecord], CKQueryOperation.Cursor?, (any Error)?) -> Void
    ) {
        let queryOperation: CKQueryOperation
        if let cursor {
            queryOperation = CKQueryOperation(cursor: cursor)
        } else {
            let query = CKQuery(recordType: "Photo", predicate: NSPredicate(format: "party == %@", party))
            query.sortDescriptors = [NSSortDescriptor(key: "creationDate", ascending: true)]
            queryOperation = CKQueryOperation(query: query)
        }
        queryOperation.resultsLimit = 20
        queryOperation.desiredKeys = ["photoThumbnail"]
        let page = LockedList<CKRecord>()
        queryOperation.recordFetchedBlock = { record in page.append(record) }
        queryOperation.queryCompletionBlock = { cursor, error in
            completion(page.items, cursor, error)
        }
        database.add(queryOperation)
    }

    /// A local cache keeps each record's system fields beside the app's own data.
    static func archiveSystemFields(of record: CKRecord) -> Data {
        let archiver = NSKeyedArchiver(requiringSecureCoding: true)
        record.encodeSystemFields(with: archiver)
        archiver.finishEncoding()
        return archiver.encodedData
    }

    static func unarchiveSystemFields(_ archivedData: Data) throws -> CKRecord? {
        let unarchiver = try NSKeyedUnarchiver(forReadingFrom: archivedData)
        unarchiver.requiresSecureCoding = true
        let unarchivedRecord = CKRecord(coder: unarchiver)
        return unarchivedRecord
    }

    static func notesZone() -> CKRecordZone {
        CKRecordZone(zoneName: "NotesZone")
    }

    /// Dependencies instead of nested callbacks or semaphores.
    static func fetchInOrder(
        first: CKRecord.ID, second: CKRecord.ID, database: CKDatabase, log: @escaping @Sendable (String) -> Void
    ) -> OperationQueue {
        let firstFetch = CKFetchRecordsOperation(recordIDs: [first])
        let secondFetch = CKFetchRecordsOperation(recordIDs: [second])
        firstFetch.database = database
        secondFetch.database = database
        firstFetch.fetchRecordsCompletionBlock = { _, _ in log("first") }
        secondFetch.fetchRecordsCompletionBlock = { _, _ in log("second") }
        secondFetch.addDependency(firstFetch)
        firstFetch.qualityOfService = .userInitiated
        secondFetch.qualityOfService = .utility
        let queue = OperationQueue()
        queue.addOperations([firstFetch, secondFetch], waitUntilFinished: false)
        return queue
    }
}

/// A list operation callbacks append to: they may run on any thread, so an app guards what
/// they share.
final class LockedList<Item>: @unchecked Sendable {
    private let lock = NSLock()
    private var storage: [Item] = []
    func append(_ item: Item) { lock.withLock { storage.append(item) } }
    var items: [Item] { lock.withLock { storage } }
}
