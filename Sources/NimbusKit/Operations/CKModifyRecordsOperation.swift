import Foundation
import NimbusWire

/// Saves and deletes records (`records/modify`, one request per zone).
///
/// Save policies, as the seeds' table has them:
///
/// | policy | locked (change tag checked) | sends |
/// |---|---|---|
/// | `.ifServerRecordUnchanged` (default) | yes | changed keys |
/// | `.changedKeys` | no | changed keys |
/// | `.allKeys` | no | all keys; a server field absent locally survives unless removed locally |
///
/// With `isAtomic` (the default) a zone's batch succeeds or fails as a whole: the item that
/// failed reports its error, the others `batchRequestFailed`, and the operation `partialFailure`.
/// The default zone is never atomic, as in CloudKit.
open class CKModifyRecordsOperation: CKDatabaseOperation, @unchecked Sendable {
    public enum RecordSavePolicy: Int, Sendable {
        case ifServerRecordUnchanged = 0
        case changedKeys = 1
        case allKeys = 2
    }

    public var recordsToSave: [CKRecord]?
    public var recordIDsToDelete: [CKRecord.ID]?
    public var savePolicy: RecordSavePolicy = .ifServerRecordUnchanged
    public var isAtomic = true
    public var clientChangeTokenData: Data?

    public var perRecordProgressBlock: (@Sendable (CKRecord, Double) -> Void)?
    public var perRecordSaveBlock: (@Sendable (CKRecord.ID, Result<CKRecord, any Error>) -> Void)?
    public var perRecordDeleteBlock: (@Sendable (CKRecord.ID, Result<Void, any Error>) -> Void)?
    public var modifyRecordsResultBlock: (@Sendable (Result<Void, any Error>) -> Void)?
    /// The older per-record callback (saves only).
    public var perRecordCompletionBlock: (@Sendable (CKRecord, (any Error)?) -> Void)?
    /// The older final callback: the records saved (the server's copies), the IDs deleted.
    public var modifyRecordsCompletionBlock: (@Sendable ([CKRecord]?, [CKRecord.ID]?, (any Error)?) -> Void)?

    private var saved: [CKRecord] = []
    private var deleted: [CKRecord.ID] = []
    private var failures: [AnyHashable: any Error] = [:]
    /// Requests sent so far: each is named `<operationID>.<n>`.
    private var requestsSent = 0
    /// The user's key when records to save hold encrypted values.
    private var cipher: FieldCipher?

    public override init() { super.init() }

    public convenience init(recordsToSave: [CKRecord]? = nil, recordIDsToDelete: [CKRecord.ID]? = nil) {
        self.init()
        self.recordsToSave = recordsToSave
        self.recordIDsToDelete = recordIDsToDelete
    }

    // MARK: Long-lived

    static let journalKind = "modifyRecords"

    func longLivedJournal() throws(CKError) -> JSONObject {
        var journal = LongLivedJournal.header(self, kind: Self.journalKind)
        journal["recordsToSave"] = .array(try (recordsToSave ?? []).map { record throws(CKError) in try LongLivedJournal.record(record) })
        journal["recordIDsToDelete"] = .array((recordIDsToDelete ?? []).map(LongLivedJournal.recordID))
        journal["savePolicy"] = .int(Int64(savePolicy.rawValue))
        journal["atomic"] = .bool(isAtomic)
        return journal
    }

    /// The operation a journal describes (`LongLivedJournal.operation(from:container:)`).
    convenience init(journal: JSONObject) throws(CKError) {
        self.init()
        recordsToSave = try (journal["recordsToSave"]?.arrayValue ?? []).map { json throws(CKError) in try LongLivedJournal.record(json) }
        recordIDsToDelete = try (journal["recordIDsToDelete"]?.arrayValue ?? []).map { json throws(CKError) in
            try LongLivedJournal.recordID(json)
        }
        savePolicy = journal["savePolicy"]?.int64Value.flatMap { RecordSavePolicy(rawValue: Int($0)) } ?? .ifServerRecordUnchanged
        isAtomic = journal["atomic"]?.boolValue ?? true
    }

    /// One item of the batch: a record to save or an ID to delete.
    private enum Item {
        case save(CKRecord)
        case delete(CKRecord.ID)

        var recordID: CKRecord.ID {
            switch self {
            case .save(let record): return record.recordID
            case .delete(let id): return id
            }
        }
    }

    override func run() async throws {
        let items = (recordsToSave ?? []).map(Item.save) + (recordIDsToDelete ?? []).map(Item.delete)
        let limit = Self.itemsPerRequest
        let scope = targetDatabase.databaseScope
        for (zoneID, zoneItems) in groupedByZone(items, zoneID: \.recordID.zoneID) {
            // The zone's key, before anything is sent, when a record holds encrypted values
            // (the user's key is made on their first device's first use): only ciphertext leaves
            // the device. A share saved in the private database gets it too, so its URL carries it.
            let saves = zoneItems.compactMap { item -> CKRecord? in if case .save(let record) = item { record } else { nil } }
            cipher = nil
            if scope != .public, saves.contains(where: { !$0.keys(encrypted: true).isEmpty }) {
                cipher = try await targetDatabase.container.fieldCipher(zone: zoneID, create: true)
            } else if scope == .private, saves.contains(where: { $0 is CKShare }) {
                cipher = try? await targetDatabase.container.fieldCipher(zone: zoneID, create: true)
            }
            let atomic = isAtomic && !zoneID.isDefaultZone
            if atomic, zoneItems.count > limit {
                throw CKError(
                    .limitExceeded,
                    "an atomic batch holds at most \(limit) records per zone; zone '\(zoneID.zoneName)' has \(zoneItems.count). Split the batch or set isAtomic = false",
                    userInfo: [CKErrorLimitNameKey: Limits.operationsPerRequest.name])
            }
            for chunk in chunked(zoneItems, size: limit) {
                try Task.checkCancellation()
                requestsSent += 1
                // Named only when the request may be sent again under the same name: by a
                // discretionary operation's retries or a long-lived one's resumption. The
                // server's applied-once bookkeeping costs a quarter to a third of a single
                // save's throughput (docs/benchmarks.md); a user-initiated operation, which
                // never resends, does not pay it.
                let resendable = NimbusTransport.discretionaryDeadline != nil || effectiveConfiguration.isLongLived
                try await send(
                    Array(chunk), zoneID: zoneID, atomic: atomic, requestID: resendable ? "\(operationID).\(requestsSent)" : nil)
            }
        }
        if !failures.isEmpty { throw CKError.partialFailure(failures, what: "records to save or delete") }
    }

    /// Sends one request. `requestID` names it to the server (`operationID` on the wire): the
    /// same operation sends the same requests in the same order, so a retry, or the operation
    /// resumed after a relaunch, is answered from the first outcome (docs/sdk.md, "Operations").
    private func send(_ items: [Item], zoneID: CKRecordZone.ID, atomic: Bool, requestID: String?) async throws {
        // Asset files first: the records then carry the upload's answers (their receipts). A
        // long-lived save uploads resumably, its journal following each upload's URL and receipt.
        let longLived = effectiveConfiguration.isLongLived
        let uploads = await uploadAssets(
            of: items.compactMap { item in
                guard case .save(let record) = item else { return nil }
                return (record, savePolicy == .allKeys ? record.allKeys() : record.changedKeys())
            }, zoneID: zoneID, resumable: longLived, journal: { [self] in if longLived { try? rewriteLongLivedJournal() } },
            progress: { [perRecordProgressBlock] record, fraction in perRecordProgressBlock?(record, fraction * 0.9) })
        // Cancelled (or stopped by the app's exit) mid-upload: the operation ends as a whole.
        if Task.isCancelled || uploads.values.contains(where: { $0.code == .operationCancelled }) { throw CKError.cancelled() }
        var operations: [RecordOperationInput] = []
        for item in items {
            do {
                if let failure = uploads[item.recordID] { throw failure }
                operations.append(try operation(item))
            } catch {
                // A record that cannot be encoded fails alone, before anything is sent.
                report(item, entry: nil, error: error)
                if atomic {
                    for other in items where other.recordID != item.recordID {
                        report(other, entry: nil, error: CKError(.batchRequestFailed, "not saved: another record of this atomic batch failed"))
                    }
                    return
                }
            }
        }
        let sendable = items.filter { failures[$0.recordID] == nil }
        guard !sendable.isEmpty else { return }
        let body = RecordsModifyRequest(
            operations: operations, zoneID: WireRecordCoder.zoneIDInput(zoneID), atomic: atomic, operationID: requestID)
        let entries: [ItemResult<RecordEntry>]
        do {
            entries = try await post("records/modify", body.json, as: RecordsResponse.self).records
        } catch {
            // Whole-operation failures end the operation; a cancelled one reports no records.
            guard ![.notAuthenticated, .networkFailure, .limitExceeded, .operationCancelled].contains(error.code) else { throw error }
            for item in sendable { report(item, entry: nil, error: error) }
            return
        }
        for (item, entry) in zip(sendable, entries) {
            switch entry {
            case .failure(let failure): report(item, entry: nil, error: conflictAwareError(failure, item: item))
            case .success(let saved): report(item, entry: saved, error: nil)
            }
        }
    }

    /// The `operations` entry of one item, per the save policy.
    private func operation(_ item: Item) throws(CKError) -> RecordOperationInput {
        switch item {
        case .delete(let id):
            return RecordOperationInput(type: .forceDelete, record: RecordInput(recordName: id.recordName))
        case .save(let record):
            let operationType: RecordOperationType
            let keys: [String]
            switch savePolicy {
            case .ifServerRecordUnchanged:
                operationType = record.wasSavedOnServer ? .update : .create
                keys = record.changedKeys()
            case .changedKeys:
                operationType = .forceUpdate
                keys = record.changedKeys()
            case .allKeys:
                // Every local key, plus keys removed locally: a server field the record never
                // had stays on the server.
                operationType = .forceUpdate
                let all = record.allKeys()
                keys = all + record.changedKeys().filter { !all.contains($0) }
            }
            let input = try WireRecordCoder.recordInput(
                record, keys: keys, includeChangeTag: savePolicy == .ifServerRecordUnchanged, cipher: cipher)
            return RecordOperationInput(type: operationType, record: input)
        }
    }

    /// A per-item error; a conflict carries the server's, the client's and the ancestor record
    /// for a three-way merge.
    private func conflictAwareError(_ entry: CloudKitError, item: Item) -> CKError {
        guard case .save(let record) = item else { return CKError.fromServer(entry) }
        var extra: [String: Any] = [CKRecordChangedErrorClientRecordKey: record]
        if let ancestor = record.ancestor() { extra[CKRecordChangedErrorAncestorRecordKey] = ancestor }
        if let serverJSON = entry.serverRecord, let serverRecord = try? RecordOutput(body: serverJSON),
            let server = try? WireRecordCoder.record(serverRecord, zoneID: record.recordID.zoneID, currentUser: currentUser, ciphers: recordCiphers)
        {
            extra[CKRecordChangedErrorServerRecordKey] = server
        }
        return CKError.fromServer(entry, extra: extra)
    }

    private func report(_ item: Item, entry: RecordEntry?, error: (any Error)?) {
        switch item {
        case .save(let record):
            perRecordProgressBlock?(record, 1.0)
            if let error {
                failures[record.recordID] = error
                perRecordSaveBlock?(record.recordID, .failure(error))
                perRecordCompletionBlock?(record, error)
                return
            }
            do {
                guard case .record(let output)? = entry else {
                    throw CKError(.serverResponseLost, "the server's answer to saving record '\(record.recordID.recordName)' is not a record")
                }
                let server = try WireRecordCoder.record(output, zoneID: record.recordID.zoneID, currentUser: currentUser, ciphers: recordCiphers)
                Self.adoptLocalFiles(of: record, into: server)
                // The local record now matches the server: later saves of it send only new changes.
                record.copySystemFields(from: server)
                record.markFetchedFromServer(parent: record.parent)
                saved.append(server)
                perRecordSaveBlock?(record.recordID, .success(server))
                perRecordCompletionBlock?(server, nil)
            } catch {
                failures[record.recordID] = error
                perRecordSaveBlock?(record.recordID, .failure(error))
                perRecordCompletionBlock?(record, error)
            }
        case .delete(let id):
            if let error {
                failures[id] = error
                perRecordDeleteBlock?(id, .failure(error))
            } else {
                deleted.append(id)
                perRecordDeleteBlock?(id, .success(()))
            }
        }
    }

    /// The server's copy of a saved record points its assets at the files they were uploaded
    /// from: the same bytes, already here.
    private static func adoptLocalFiles(of local: CKRecord, into server: CKRecord) {
        func assets(_ value: Any?) -> [CKAsset] {
            switch value {
            case let asset as CKAsset: [asset]
            case let list as [CKAsset]: list
            default: []
            }
        }
        for key in server.allKeys() {
            let files = Dictionary(
                assets(local[key]).compactMap { asset in asset.serverAsset?.fileChecksum.map { ($0, asset.fileURL) } },
                uniquingKeysWith: { first, _ in first })
            for asset in assets(server[key]) {
                if let checksum = asset.serverAsset?.fileChecksum, let file = files[checksum] { asset.fileURL = file }
            }
        }
    }

    override func finish(with error: CKError?) {
        modifyRecordsResultBlock?(error.map { .failure($0) } ?? .success(()))
        modifyRecordsCompletionBlock?(saved, deleted, error)
    }
}

extension CKModifyRecordsOperation: LongLivedJournaling {}
