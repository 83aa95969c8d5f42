import Foundation
import NimbusWire

/// Creates and deletes zones (`zones/modify`). Deleting a zone deletes its records.
open class CKModifyRecordZonesOperation: CKDatabaseOperation, @unchecked Sendable {
    public var recordZonesToSave: [CKRecordZone]?
    public var recordZoneIDsToDelete: [CKRecordZone.ID]?

    public var perRecordZoneSaveBlock: (@Sendable (CKRecordZone.ID, Result<CKRecordZone, any Error>) -> Void)?
    public var perRecordZoneDeleteBlock: (@Sendable (CKRecordZone.ID, Result<Void, any Error>) -> Void)?
    public var modifyRecordZonesResultBlock: (@Sendable (Result<Void, any Error>) -> Void)?
    /// The older final callback.
    public var modifyRecordZonesCompletionBlock: (@Sendable ([CKRecordZone]?, [CKRecordZone.ID]?, (any Error)?) -> Void)?

    private var saved: [CKRecordZone] = []
    private var deleted: [CKRecordZone.ID] = []
    private var failures: [AnyHashable: any Error] = [:]

    public override init() { super.init() }

    public convenience init(recordZonesToSave: [CKRecordZone]? = nil, recordZoneIDsToDelete: [CKRecordZone.ID]? = nil) {
        self.init()
        self.recordZonesToSave = recordZonesToSave
        self.recordZoneIDsToDelete = recordZoneIDsToDelete
    }

    override func run() async throws {
        let items: [(id: CKRecordZone.ID, isSave: Bool)] =
            (recordZonesToSave ?? []).map { ($0.zoneID, true) } + (recordZoneIDsToDelete ?? []).map { ($0, false) }
        for chunk in chunked(items, size: Self.itemsPerRequest) {
            try Task.checkCancellation()
            let body = ZonesModifyRequest(
                operations: chunk.map { (type: $0.isSave ? .create : .delete, zoneID: WireRecordCoder.zoneIDInput($0.id)) })
            let entries = try await post("zones/modify", body.json, as: ZonesResponse.self).zones
            for (item, entry) in zip(chunk, entries) {
                // Resumed after a relaunch, a delete that finds no zone is the earlier launch's.
                if case .failure(let failure) = entry, !(isResumedFromJournal && !item.isSave && failure.code == .zoneNotFound) {
                    let error = CKError.fromServer(failure)
                    failures[item.id] = error
                    if item.isSave {
                        perRecordZoneSaveBlock?(item.id, .failure(error))
                    } else {
                        perRecordZoneDeleteBlock?(item.id, .failure(error))
                    }
                } else if item.isSave {
                    let zone = CKRecordZone(zoneID: item.id)
                    saved.append(zone)
                    perRecordZoneSaveBlock?(item.id, .success(zone))
                } else {
                    deleted.append(item.id)
                    perRecordZoneDeleteBlock?(item.id, .success(()))
                }
            }
        }
        if !failures.isEmpty { throw CKError.partialFailure(failures, what: "zones to save or delete") }
    }

    override func finish(with error: CKError?) {
        modifyRecordZonesResultBlock?(error.map { .failure($0) } ?? .success(()))
        modifyRecordZonesCompletionBlock?(saved, deleted, error)
    }
}

/// Fetches zones by ID (`zones/lookup`), or every zone of the database (`zones/list`).
open class CKFetchRecordZonesOperation: CKDatabaseOperation, @unchecked Sendable {
    /// The zones to fetch; nil fetches them all.
    public var recordZoneIDs: [CKRecordZone.ID]?

    public var perRecordZoneResultBlock: (@Sendable (CKRecordZone.ID, Result<CKRecordZone, any Error>) -> Void)?
    public var fetchRecordZonesResultBlock: (@Sendable (Result<Void, any Error>) -> Void)?
    /// The older final callback.
    public var fetchRecordZonesCompletionBlock: (@Sendable ([CKRecordZone.ID: CKRecordZone]?, (any Error)?) -> Void)?

    private var fetched: [CKRecordZone.ID: CKRecordZone] = [:]
    private var failures: [AnyHashable: any Error] = [:]

    public override init() { super.init() }

    public convenience init(recordZoneIDs: [CKRecordZone.ID]) {
        self.init()
        self.recordZoneIDs = recordZoneIDs
    }

    public static func fetchAllRecordZonesOperation() -> CKFetchRecordZonesOperation {
        CKFetchRecordZonesOperation()
    }

    override func run() async throws {
        guard let recordZoneIDs else {
            for case .success(let entry) in try await post("zones/list", [:], as: ZonesResponse.self).zones {
                let zone = CKRecordZone(zoneID: WireRecordCoder.zoneID(entry.zoneID, currentUser: currentUser))
                zone.share = Self.share(of: entry, in: zone.zoneID)
                fetched[zone.zoneID] = zone
                perRecordZoneResultBlock?(zone.zoneID, .success(zone))
            }
            return
        }
        for chunk in chunked(recordZoneIDs, size: Self.itemsPerRequest) {
            try Task.checkCancellation()
            let entries = try await post(
                "zones/lookup", ZonesLookupRequest(zones: chunk.map(WireRecordCoder.zoneIDInput)).json, as: ZonesResponse.self
            ).zones
            for (id, entry) in zip(chunk, entries) {
                if case .failure(let failure) = entry {
                    let error = CKError.fromServer(failure)
                    failures[id] = error
                    perRecordZoneResultBlock?(id, .failure(error))
                } else {
                    let zone = CKRecordZone(zoneID: id)
                    if case .success(let found) = entry { zone.share = Self.share(of: found, in: id) }
                    fetched[id] = zone
                    perRecordZoneResultBlock?(id, .success(zone))
                }
            }
        }
        if !failures.isEmpty { throw CKError.partialFailure(failures, what: "zones to fetch") }
    }

    override func finish(with error: CKError?) {
        fetchRecordZonesResultBlock?(error.map { .failure($0) } ?? .success(()))
        fetchRecordZonesCompletionBlock?(fetched, error)
    }
}

extension CKFetchRecordZonesOperation {
    /// A zone's zone-wide share, as the server names it.
    static func share(of entry: ZoneEntry, in zoneID: CKRecordZone.ID) -> CKRecord.Reference? {
        guard case .zone(let zone) = entry, let name = zone.share else { return nil }
        return CKRecord.Reference(recordID: CKRecord.ID(recordName: name, zoneID: zoneID), action: .none)
    }
}
