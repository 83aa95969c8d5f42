// "CloudKit Best Practices" (WWDC 2016): photos and albums, and the fetch-changes flow, in
// today's Swift.
import NimbusKit

enum BestPractices2016 {
    /// One-to-many without write contention: each photo points back at its album (and has it
    /// as its parent, the unit of sharing); the album record never changes when photos arrive.
    static func addPhoto(named name: String, to album: CKRecord) -> CKRecord {
        let photo = CKRecord(recordType: "Photo", recordID: CKRecord.ID(recordName: name, zoneID: album.recordID.zoneID))
        photo["album"] = CKRecord.Reference(record: album, action: .deleteSelf)
        photo.setParent(album)
        return photo
    }

    static func photosQuery(in album: CKRecord) -> CKQuery {
        CKQuery(recordType: "Photo", predicate: NSPredicate(format: "album == %@", album.recordID))
    }

    /// What a device keeps between launches: the database token, each zone's token, and its
    /// copy of the records.
    final class LocalCache: @unchecked Sendable {
        private let lock = NSLock()
        private var _databaseToken: CKServerChangeToken?
        private var _zoneTokens: [CKRecordZone.ID: CKServerChangeToken] = [:]
        private var _records: [CKRecord.ID: CKRecord] = [:]
        private var _deletedZones: [CKRecordZone.ID] = []
        private(set) var tokenUpdates = 0

        var databaseToken: CKServerChangeToken? {
            get { lock.withLock { _databaseToken } }
            set { lock.withLock { _databaseToken = newValue; tokenUpdates += 1 } }
        }
        func zoneToken(_ zoneID: CKRecordZone.ID) -> CKServerChangeToken? { lock.withLock { _zoneTokens[zoneID] } }
        func setZoneToken(_ token: CKServerChangeToken?, for zoneID: CKRecordZone.ID) {
            lock.withLock {
                _zoneTokens[zoneID] = token
                tokenUpdates += 1
            }
        }
        func store(_ record: CKRecord) { lock.withLock { _records[record.recordID] = record } }
        func remove(_ recordID: CKRecord.ID) { lock.withLock { _records[recordID] = nil } }
        func forgetZone(_ zoneID: CKRecordZone.ID) {
            lock.withLock {
                _deletedZones.append(zoneID)
                _zoneTokens[zoneID] = nil
                _records = _records.filter { $0.key.zoneID != zoneID }
            }
        }
        var records: [CKRecord.ID: CKRecord] { lock.withLock { _records } }
        var deletedZones: [CKRecordZone.ID] { lock.withLock { _deletedZones } }
    }

    /// Step one: which zones changed since the database token. Keep each intermediate token as
    /// it arrives, so a failure later resumes from there instead of from the start.
    static func fetchChanges(in database: CKDatabase, cache: LocalCache, completion: @escaping @Sendable ((any Error)?) -> Void) {
        let changedZoneIDs = LockedList<CKRecordZone.ID>()
        let operation = CKFetchDatabaseChangesOperation(previousServerChangeToken: cache.databaseToken)
        operation.fetchAllChanges = true
        operation.recordZoneWithIDChangedBlock = { zoneID in changedZoneIDs.append(zoneID) }
        operation.recordZoneWithIDWasDeletedBlock = { zoneID in cache.forgetZone(zoneID) }
        operation.changeTokenUpdatedBlock = { token in cache.databaseToken = token }
        operation.fetchDatabaseChangesCompletionBlock = { token, moreComing, error in
            if let error {
                completion(error)
                return
            }
            fetchZoneChanges(in: database, zoneIDs: changedZoneIDs.items, cache: cache) { zoneError in
                // Only once every zone is stored does the database token move on.
                if zoneError == nil { cache.databaseToken = token }
                completion(zoneError)
            }
        }
        operation.qualityOfService = .userInitiated
        database.add(operation)
    }

    /// Step two: the records that changed in those zones, from each zone's own token.
    static func fetchZoneChanges(
        in database: CKDatabase, zoneIDs: [CKRecordZone.ID], cache: LocalCache,
        completion: @escaping @Sendable ((any Error)?) -> Void
    ) {
        guard !zoneIDs.isEmpty else {
            completion(nil)
            return
        }
        var configurations: [CKRecordZone.ID: CKFetchRecordZoneChangesOperation.ZoneConfiguration] = [:]
        for zoneID in zoneIDs {
            let configuration = CKFetchRecordZoneChangesOperation.ZoneConfiguration()
            configuration.previousServerChangeToken = cache.zoneToken(zoneID)
            configurations[zoneID] = configuration
        }
        let operation = CKFetchRecordZoneChangesOperation(recordZoneIDs: zoneIDs, configurationsByRecordZoneID: configurations)
        operation.recordChangedBlock = { record in cache.store(record) }
        operation.recordWithIDWasDeletedBlock = { recordID, _ in cache.remove(recordID) }
        operation.recordZoneChangeTokensUpdatedBlock = { zoneID, token, _ in cache.setZoneToken(token, for: zoneID) }
        operation.recordZoneFetchCompletionBlock = { zoneID, token, _, _, error in
            if error == nil { cache.setZoneToken(token, for: zoneID) }
        }
        operation.fetchRecordZoneChangesCompletionBlock = { error in completion(error) }
        database.add(operation)
    }
}
