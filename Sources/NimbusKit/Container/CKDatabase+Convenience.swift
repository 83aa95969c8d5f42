import Foundation

/// CloudKit's convenience API: each call runs the matching operation on this database, with a
/// completion handler or `async`. A batch call reports per-item results; a single-item call
/// throws that item's own error (not `partialFailure`), as CloudKit does.
extension CKDatabase {
    // MARK: Records

    public func save(_ record: CKRecord, completionHandler: @escaping @Sendable (CKRecord?, (any Error)?) -> Void) {
        Task { deliver(await Result { try await self.save(record) }, to: completionHandler) }
    }

    public func save(_ record: CKRecord) async throws -> CKRecord {
        let (saves, _) = try await modifyRecords(saving: [record], deleting: [])
        return try single(saves[record.recordID], what: "record \(record.recordID.recordName)")
    }

    public func fetch(withRecordID recordID: CKRecord.ID, completionHandler: @escaping @Sendable (CKRecord?, (any Error)?) -> Void) {
        Task { deliver(await Result { try await self.record(for: recordID) }, to: completionHandler) }
    }

    public func record(for recordID: CKRecord.ID) async throws -> CKRecord {
        try single(try await records(for: [recordID])[recordID], what: "record \(recordID.recordName)")
    }

    public func records(for ids: [CKRecord.ID], desiredKeys: [CKRecord.FieldKey]? = nil) async throws
        -> [CKRecord.ID: Result<CKRecord, any Error>]
    {
        let operation = CKFetchRecordsOperation(recordIDs: ids)
        operation.desiredKeys = desiredKeys
        let results = Collector<[CKRecord.ID: Result<CKRecord, any Error>]>([:])
        operation.perRecordResultBlock = { id, result in results.update { $0[id] = result } }
        try await run(operation) { operation.fetchRecordsResultBlock = $0 }
        return results.value
    }

    public func fetch(
        withRecordIDs recordIDs: [CKRecord.ID], desiredKeys: [CKRecord.FieldKey]? = nil,
        completionHandler: @escaping @Sendable (Result<[CKRecord.ID: Result<CKRecord, any Error>], any Error>) -> Void
    ) {
        Task { completionHandler(await Result { try await self.records(for: recordIDs, desiredKeys: desiredKeys) }) }
    }

    public func delete(withRecordID recordID: CKRecord.ID, completionHandler: @escaping @Sendable (CKRecord.ID?, (any Error)?) -> Void) {
        Task { deliver(await Result { try await self.deleteRecord(withID: recordID) }, to: completionHandler) }
    }

    @discardableResult
    public func deleteRecord(withID recordID: CKRecord.ID) async throws -> CKRecord.ID {
        let (_, deletes) = try await modifyRecords(saving: [], deleting: [recordID])
        try single(deletes[recordID], what: "record \(recordID.recordName)")
        return recordID
    }

    public func modifyRecords(
        saving recordsToSave: [CKRecord], deleting recordIDsToDelete: [CKRecord.ID],
        savePolicy: CKModifyRecordsOperation.RecordSavePolicy = .ifServerRecordUnchanged, atomically: Bool = true
    ) async throws -> (
        saveResults: [CKRecord.ID: Result<CKRecord, any Error>], deleteResults: [CKRecord.ID: Result<Void, any Error>]
    ) {
        let operation = CKModifyRecordsOperation(recordsToSave: recordsToSave, recordIDsToDelete: recordIDsToDelete)
        operation.savePolicy = savePolicy
        operation.isAtomic = atomically
        let saves = Collector<[CKRecord.ID: Result<CKRecord, any Error>]>([:])
        let deletes = Collector<[CKRecord.ID: Result<Void, any Error>]>([:])
        operation.perRecordSaveBlock = { id, result in saves.update { $0[id] = result } }
        operation.perRecordDeleteBlock = { id, result in deletes.update { $0[id] = result } }
        try await run(operation) { operation.modifyRecordsResultBlock = $0 }
        return (saves.value, deletes.value)
    }

    public func modifyRecords(
        saving recordsToSave: [CKRecord], deleting recordIDsToDelete: [CKRecord.ID],
        savePolicy: CKModifyRecordsOperation.RecordSavePolicy = .ifServerRecordUnchanged, atomically: Bool = true,
        completionHandler: @escaping @Sendable (
            Result<
                (
                    saveResults: [CKRecord.ID: Result<CKRecord, any Error>],
                    deleteResults: [CKRecord.ID: Result<Void, any Error>]
                ), any Error
            >
        ) -> Void
    ) {
        Task {
            completionHandler(
                await Result {
                    try await self.modifyRecords(
                        saving: recordsToSave, deleting: recordIDsToDelete, savePolicy: savePolicy, atomically: atomically)
                })
        }
    }

    // MARK: Queries

    /// Every record the query matches (following cursors), as the 2014 convenience call did.
    public func perform(
        _ query: CKQuery, inZoneWith zoneID: CKRecordZone.ID?, completionHandler: @escaping @Sendable ([CKRecord]?, (any Error)?) -> Void
    ) {
        Task {
            deliver(
                await Result { () async throws -> [CKRecord] in
                    var (results, cursor) = try await self.records(matching: query, inZoneWith: zoneID)
                    var records = try results.map { try $0.1.get() }
                    while let next = cursor {
                        (results, cursor) = try await self.records(continuingMatchFrom: next)
                        records += try results.map { try $0.1.get() }
                    }
                    return records
                }, to: completionHandler)
        }
    }

    public func records(
        matching query: CKQuery, inZoneWith zoneID: CKRecordZone.ID? = nil, desiredKeys: [CKRecord.FieldKey]? = nil,
        resultsLimit: Int = CKQueryOperation.maximumResults
    ) async throws -> (matchResults: [(CKRecord.ID, Result<CKRecord, any Error>)], queryCursor: CKQueryOperation.Cursor?) {
        let operation = CKQueryOperation(query: query)
        operation.zoneID = zoneID
        return try await runQuery(operation, desiredKeys: desiredKeys, resultsLimit: resultsLimit)
    }

    public func records(
        continuingMatchFrom cursor: CKQueryOperation.Cursor, desiredKeys: [CKRecord.FieldKey]? = nil,
        resultsLimit: Int = CKQueryOperation.maximumResults
    ) async throws -> (matchResults: [(CKRecord.ID, Result<CKRecord, any Error>)], queryCursor: CKQueryOperation.Cursor?) {
        try await runQuery(CKQueryOperation(cursor: cursor), desiredKeys: desiredKeys, resultsLimit: resultsLimit)
    }

    public func fetch(
        withQuery query: CKQuery, inZoneWith zoneID: CKRecordZone.ID? = nil, desiredKeys: [CKRecord.FieldKey]? = nil,
        resultsLimit: Int = CKQueryOperation.maximumResults,
        completionHandler: @escaping @Sendable (
            Result<(matchResults: [(CKRecord.ID, Result<CKRecord, any Error>)], queryCursor: CKQueryOperation.Cursor?), any Error>
        ) -> Void
    ) {
        Task {
            completionHandler(
                await Result {
                    try await self.records(matching: query, inZoneWith: zoneID, desiredKeys: desiredKeys, resultsLimit: resultsLimit)
                })
        }
    }

    private func runQuery(_ operation: CKQueryOperation, desiredKeys: [CKRecord.FieldKey]?, resultsLimit: Int) async throws
        -> (matchResults: [(CKRecord.ID, Result<CKRecord, any Error>)], queryCursor: CKQueryOperation.Cursor?)
    {
        operation.desiredKeys = desiredKeys
        operation.resultsLimit = resultsLimit
        let matches = Collector<[(CKRecord.ID, Result<CKRecord, any Error>)]>([])
        operation.recordMatchedBlock = { id, result in matches.update { $0.append((id, result)) } }
        let cursor = try await runReturning(operation) { operation.queryResultBlock = $0 }
        return (matches.value, cursor)
    }

    // MARK: Zones

    public func save(_ zone: CKRecordZone, completionHandler: @escaping @Sendable (CKRecordZone?, (any Error)?) -> Void) {
        Task { deliver(await Result { try await self.save(zone) }, to: completionHandler) }
    }

    public func save(_ zone: CKRecordZone) async throws -> CKRecordZone {
        let (saves, _) = try await modifyRecordZones(saving: [zone], deleting: [])
        return try single(saves[zone.zoneID], what: "zone \(zone.zoneID.zoneName)")
    }

    public func fetch(withRecordZoneID zoneID: CKRecordZone.ID, completionHandler: @escaping @Sendable (CKRecordZone?, (any Error)?) -> Void) {
        Task { deliver(await Result { try await self.recordZone(for: zoneID) }, to: completionHandler) }
    }

    public func recordZone(for zoneID: CKRecordZone.ID) async throws -> CKRecordZone {
        try single(try await recordZones(for: [zoneID])[zoneID], what: "zone \(zoneID.zoneName)")
    }

    public func fetch(
        withRecordZoneIDs zoneIDs: [CKRecordZone.ID],
        completionHandler: @escaping @Sendable (Result<[CKRecordZone.ID: Result<CKRecordZone, any Error>], any Error>) -> Void
    ) {
        Task { completionHandler(await Result { try await self.recordZones(for: zoneIDs) }) }
    }

    public func recordZones(for ids: [CKRecordZone.ID]) async throws -> [CKRecordZone.ID: Result<CKRecordZone, any Error>] {
        try await fetchZones(CKFetchRecordZonesOperation(recordZoneIDs: ids))
    }

    public func fetchAllRecordZones(completionHandler: @escaping @Sendable ([CKRecordZone]?, (any Error)?) -> Void) {
        Task { deliver(await Result { try await self.allRecordZones() }, to: completionHandler) }
    }

    public func allRecordZones() async throws -> [CKRecordZone] {
        try await fetchZones(.fetchAllRecordZonesOperation()).values.map { try $0.get() }
            .sorted { $0.zoneID.zoneName < $1.zoneID.zoneName }
    }

    private func fetchZones(_ operation: CKFetchRecordZonesOperation) async throws -> [CKRecordZone.ID: Result<CKRecordZone, any Error>] {
        let results = Collector<[CKRecordZone.ID: Result<CKRecordZone, any Error>]>([:])
        operation.perRecordZoneResultBlock = { id, result in results.update { $0[id] = result } }
        try await run(operation) { operation.fetchRecordZonesResultBlock = $0 }
        return results.value
    }

    public func delete(withRecordZoneID zoneID: CKRecordZone.ID, completionHandler: @escaping @Sendable (CKRecordZone.ID?, (any Error)?) -> Void) {
        Task { deliver(await Result { try await self.deleteRecordZone(withID: zoneID) }, to: completionHandler) }
    }

    @discardableResult
    public func deleteRecordZone(withID zoneID: CKRecordZone.ID) async throws -> CKRecordZone.ID {
        let (_, deletes) = try await modifyRecordZones(saving: [], deleting: [zoneID])
        try single(deletes[zoneID], what: "zone \(zoneID.zoneName)")
        return zoneID
    }

    public func modifyRecordZones(saving zonesToSave: [CKRecordZone], deleting zoneIDsToDelete: [CKRecordZone.ID]) async throws
        -> (saveResults: [CKRecordZone.ID: Result<CKRecordZone, any Error>], deleteResults: [CKRecordZone.ID: Result<Void, any Error>])
    {
        let operation = CKModifyRecordZonesOperation(recordZonesToSave: zonesToSave, recordZoneIDsToDelete: zoneIDsToDelete)
        let saves = Collector<[CKRecordZone.ID: Result<CKRecordZone, any Error>]>([:])
        let deletes = Collector<[CKRecordZone.ID: Result<Void, any Error>]>([:])
        operation.perRecordZoneSaveBlock = { id, result in saves.update { $0[id] = result } }
        operation.perRecordZoneDeleteBlock = { id, result in deletes.update { $0[id] = result } }
        try await run(operation) { operation.modifyRecordZonesResultBlock = $0 }
        return (saves.value, deletes.value)
    }

    public func modifyRecordZones(
        saving zonesToSave: [CKRecordZone], deleting zoneIDsToDelete: [CKRecordZone.ID],
        completionHandler: @escaping @Sendable (
            Result<
                (
                    saveResults: [CKRecordZone.ID: Result<CKRecordZone, any Error>],
                    deleteResults: [CKRecordZone.ID: Result<Void, any Error>]
                ), any Error
            >
        ) -> Void
    ) {
        Task { completionHandler(await Result { try await self.modifyRecordZones(saving: zonesToSave, deleting: zoneIDsToDelete) }) }
    }

    // MARK: Changes

    /// What changed in a database's zones, as `CKDatabase.databaseChanges(since:)` reports it.
    public enum DatabaseChange {
        public struct Modification: Sendable {
            public let zoneID: CKRecordZone.ID
        }
        public struct Deletion: Sendable {
            /// Why the zone went: deleted; purged (its data removed for good, e.g. the user
            /// cleared the app's data); or its encrypted data's key was reset.
            public enum Reason: Sendable {
                case deleted
                case purged
                case encryptedDataReset
            }

            public let zoneID: CKRecordZone.ID
            public let reason: Reason

            init(zoneID: CKRecordZone.ID, reason: Reason = .deleted) {
                self.zoneID = zoneID
                self.reason = reason
            }
        }
    }

    /// What changed in a zone, as `CKDatabase.recordZoneChanges(inZoneWith:since:)` reports it.
    public enum RecordZoneChange {
        public struct Modification: Sendable {
            public let record: CKRecord
        }
        public struct Deletion: Sendable {
            public let recordID: CKRecord.ID
            public let recordType: CKRecord.RecordType
        }
    }

    /// One page of zone changes (`fetchAllChanges` off): call again with `changeToken` while
    /// `moreComing`.
    public func databaseChanges(since changeToken: CKServerChangeToken?, resultsLimit: Int? = nil) async throws -> (
        modifications: [DatabaseChange.Modification], deletions: [DatabaseChange.Deletion],
        changeToken: CKServerChangeToken, moreComing: Bool
    ) {
        let operation = CKFetchDatabaseChangesOperation(previousServerChangeToken: changeToken)
        operation.fetchAllChanges = false
        operation.resultsLimit = resultsLimit ?? 0
        let modifications = Collector<[DatabaseChange.Modification]>([])
        let deletions = Collector<[DatabaseChange.Deletion]>([])
        operation.recordZoneWithIDChangedBlock = { id in modifications.update { $0.append(.init(zoneID: id)) } }
        operation.recordZoneWithIDWasDeletedBlock = { id in deletions.update { $0.append(.init(zoneID: id)) } }
        operation.recordZoneWithIDWasPurgedBlock = { id in deletions.update { $0.append(.init(zoneID: id, reason: .purged)) } }
        let (token, moreComing) = try await runReturning(operation) { operation.fetchDatabaseChangesResultBlock = $0 }
        return (modifications.value, deletions.value, token, moreComing)
    }

    /// One page of record changes in a zone: call again with `changeToken` while `moreComing`.
    public func recordZoneChanges(
        inZoneWith zoneID: CKRecordZone.ID, since changeToken: CKServerChangeToken?,
        desiredKeys: [CKRecord.FieldKey]? = nil, resultsLimit: Int? = nil
    ) async throws -> (
        modificationResultsByID: [CKRecord.ID: Result<RecordZoneChange.Modification, any Error>],
        deletions: [RecordZoneChange.Deletion], changeToken: CKServerChangeToken, moreComing: Bool
    ) {
        let configuration = CKFetchRecordZoneChangesOperation.ZoneConfiguration(
            previousServerChangeToken: changeToken, resultsLimit: resultsLimit ?? 0, desiredKeys: desiredKeys)
        let operation = CKFetchRecordZoneChangesOperation(
            recordZoneIDs: [zoneID], configurationsByRecordZoneID: [zoneID: configuration])
        operation.fetchAllChanges = false
        let modifications = Collector<[CKRecord.ID: Result<RecordZoneChange.Modification, any Error>]>([:])
        let deletions = Collector<[RecordZoneChange.Deletion]>([])
        let zoneResult = Collector<Result<(CKServerChangeToken, Bool), any Error>?>(nil)
        operation.recordWasChangedBlock = { id, result in
            modifications.update { $0[id] = result.map { RecordZoneChange.Modification(record: $0) } }
        }
        operation.recordWithIDWasDeletedBlock = { id, type in
            deletions.update { $0.append(.init(recordID: id, recordType: type)) }
        }
        operation.recordZoneFetchResultBlock = { _, result in
            zoneResult.update { $0 = result.map { ($0.serverChangeToken, $0.moreComing) } }
        }
        try await run(operation) { operation.fetchRecordZoneChangesResultBlock = $0 }
        // One zone asked: its failure is the call's failure.
        switch zoneResult.value {
        case .success(let (token, moreComing))?: return (modifications.value, deletions.value, token, moreComing)
        case .failure(let error)?: throw error
        case nil: throw CKError(.internalError, "the zone's changes finished without a result")
        }
    }

    // MARK: Running operations

    /// Adds the operation and waits for its final result block (installed by `install`). Per-item
    /// failures reach the caller through the per-item results, so `partialFailure` is not thrown.
    func run(_ operation: CKDatabaseOperation, install: (@escaping @Sendable (Result<Void, any Error>) -> Void) -> Void)
        async throws
    {
        do {
            try await runReturning(operation, install: install)
        } catch let error as CKError where error.code == .partialFailure {
            return
        }
    }

    /// The convenience API's work is user-initiated, as CloudKit's: a busy server's error
    /// comes back at once with its `retryAfterSeconds`, for the app to decide.
    private func runReturning<Value: Sendable>(
        _ operation: CKDatabaseOperation, install: (@escaping @Sendable (Result<Value, any Error>) -> Void) -> Void
    ) async throws -> Value {
        operation.qualityOfService = .userInitiated
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Value, any Error>) in
                install { continuation.resume(with: $0) }
                add(operation)
            }
        } onCancel: {
            operation.cancel()
        }
    }

    /// A single item's result: its value, or its own error.
    @discardableResult
    func single<Value>(_ result: Result<Value, any Error>?, what: String) throws -> Value {
        guard let result else { throw CKError(.internalError, "no result for \(what)") }
        return try result.get()
    }
}

/// Hands an async result to a completion handler in CloudKit's (value, error) shape.
func deliver<Value>(_ result: Result<Value, any Error>, to handler: @Sendable (Value?, (any Error)?) -> Void) {
    switch result {
    case .success(let value): handler(value, nil)
    case .failure(let error): handler(nil, error)
    }
}

extension Result where Failure == any Error {
    init(catching body: () async throws -> Success) async {
        do {
            self = .success(try await body())
        } catch {
            self = .failure(error)
        }
    }
}

/// A value several operation callbacks add to; callbacks run one at a time, but on the
/// operation's task, not the caller's.
final class Collector<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var _value: Value

    init(_ value: Value) { _value = value }

    var value: Value { lock.withLock { _value } }

    func update(_ change: (inout Value) -> Void) { lock.withLock { change(&_value) } }
}
