import Foundation
import NimbusWire

/// Fetches records by ID (`records/lookup`, one request per zone and per 200 IDs).
open class CKFetchRecordsOperation: CKDatabaseOperation, @unchecked Sendable {
    public var recordIDs: [CKRecord.ID]?
    /// The fields to fetch; nil fetches all, an empty list only system fields.
    public var desiredKeys: [CKRecord.FieldKey]?

    public var perRecordProgressBlock: (@Sendable (CKRecord.ID, Double) -> Void)?
    public var perRecordResultBlock: (@Sendable (CKRecord.ID, Result<CKRecord, any Error>) -> Void)?
    public var fetchRecordsResultBlock: (@Sendable (Result<Void, any Error>) -> Void)?
    /// The older per-record callback.
    public var perRecordCompletionBlock: (@Sendable (CKRecord?, CKRecord.ID?, (any Error)?) -> Void)?
    /// The older final callback: every record fetched, and the operation's error.
    public var fetchRecordsCompletionBlock: (@Sendable ([CKRecord.ID: CKRecord]?, (any Error)?) -> Void)?

    private var fetched: [CKRecord.ID: CKRecord] = [:]
    private var failures: [AnyHashable: any Error] = [:]

    public override init() { super.init() }

    public convenience init(recordIDs: [CKRecord.ID]) {
        self.init()
        self.recordIDs = recordIDs
    }

    static let journalKind = "fetchRecords"

    func longLivedJournal() throws(CKError) -> JSONObject {
        var journal = LongLivedJournal.header(self, kind: Self.journalKind)
        journal["recordIDs"] = .array((recordIDs ?? []).map(LongLivedJournal.recordID))
        if let desiredKeys { journal["desiredKeys"] = .strings(desiredKeys) }
        return journal
    }

    /// The operation a journal describes (`LongLivedJournal.operation(from:container:)`).
    convenience init(journal: JSONObject) throws(CKError) {
        self.init()
        recordIDs = try (journal["recordIDs"]?.arrayValue ?? []).map { json throws(CKError) in try LongLivedJournal.recordID(json) }
        desiredKeys = journal["desiredKeys"]?.arrayValue?.compactMap(\.stringValue)
    }

    override func run() async throws {
        for (zoneID, ids) in groupedByZone(recordIDs ?? [], zoneID: \.zoneID) {
            for chunk in chunked(ids, size: Self.itemsPerRequest) {
                try Task.checkCancellation()
                let body = RecordsLookupRequest(
                    records: chunk.map { (recordName: $0.recordName, desiredKeys: nil) },
                    zoneID: WireRecordCoder.zoneIDInput(zoneID), desiredKeys: desiredKeys)
                let entries: [ItemResult<RecordEntry>]
                do {
                    entries = try await post("records/lookup", body.json, as: RecordsResponse.self).records
                } catch {
                    guard error.code != .notAuthenticated, error.code != .networkFailure, error.code != .operationCancelled else { throw error }
                    // A zone-wide failure (an unknown zone, say) is each of its records' failure.
                    for id in chunk { report(id, .failure(error)) }
                    continue
                }
                for (id, entry) in zip(chunk, entries) {
                    switch entry {
                    case .failure(let failure): report(id, .failure(CKError.fromServer(failure)))
                    case .success(.record(let output)):
                        do {
                            let record = try WireRecordCoder.record(output, zoneID: zoneID, currentUser: currentUser, ciphers: recordCiphers)
                            try await downloadAssets(of: record)
                            report(id, .success(record))
                        } catch {
                            report(id, .failure(error))
                        }
                    case .success(.deleted):
                        report(id, .failure(CKError(.unknownItem, "record '\(id.recordName)' was deleted")))
                    }
                }
            }
        }
        if !failures.isEmpty { throw CKError.partialFailure(failures, what: "records to fetch") }
    }

    private func report(_ id: CKRecord.ID, _ result: Result<CKRecord, CKError>) {
        perRecordProgressBlock?(id, 1.0)
        switch result {
        case .success(let record):
            fetched[id] = record
            perRecordResultBlock?(id, .success(record))
            perRecordCompletionBlock?(record, id, nil)
        case .failure(let error):
            failures[id] = error
            perRecordResultBlock?(id, .failure(error))
            perRecordCompletionBlock?(nil, id, error)
        }
    }

    override func finish(with error: CKError?) {
        fetchRecordsResultBlock?(error.map { .failure($0) } ?? .success(()))
        fetchRecordsCompletionBlock?(fetched.isEmpty && error != nil && failures.isEmpty ? nil : fetched, error)
    }
}

extension CKFetchRecordsOperation: LongLivedJournaling {}
