import Foundation
import NimbusWire

/// Downloads what changed in custom zones since each zone's token (`changes/zone`). With
/// `fetchAllChanges` (the default) it keeps asking while the server has more, reporting each
/// intermediate token through `recordZoneChangeTokensUpdatedBlock` so an app that fails midway
/// resumes from there, as the 2016 best-practices session describes.
open class CKFetchRecordZoneChangesOperation: CKDatabaseOperation, @unchecked Sendable {
    /// Where to start in one zone, and how much to take per request.
    public final class ZoneConfiguration: NSObject, @unchecked Sendable {
        public var previousServerChangeToken: CKServerChangeToken?
        public var resultsLimit: Int = 0
        public var desiredKeys: [CKRecord.FieldKey]?

        public override init() { super.init() }

        /// As Apple declares it: a nil `resultsLimit` is 0, as many as the server sends a page.
        public convenience init(
            previousServerChangeToken: CKServerChangeToken? = nil, resultsLimit: Int? = nil,
            desiredKeys: [CKRecord.FieldKey]? = nil
        ) {
            self.init()
            self.previousServerChangeToken = previousServerChangeToken
            self.resultsLimit = resultsLimit ?? 0
            self.desiredKeys = desiredKeys
        }
    }

    public var recordZoneIDs: [CKRecordZone.ID]?
    public var configurationsByRecordZoneID: [CKRecordZone.ID: ZoneConfiguration]?
    public var fetchAllChanges = true

    public var recordWasChangedBlock: (@Sendable (CKRecord.ID, Result<CKRecord, any Error>) -> Void)?
    /// The older per-record callback.
    public var recordChangedBlock: (@Sendable (CKRecord) -> Void)?
    public var recordWithIDWasDeletedBlock: (@Sendable (CKRecord.ID, CKRecord.RecordType) -> Void)?
    public var recordZoneChangeTokensUpdatedBlock: (@Sendable (CKRecordZone.ID, CKServerChangeToken?, Data?) -> Void)?
    public var recordZoneFetchResultBlock:
        (@Sendable (
            CKRecordZone.ID,
            Result<(serverChangeToken: CKServerChangeToken, clientChangeTokenData: Data?, moreComing: Bool), any Error>
        ) -> Void)?
    /// The older per-zone callback.
    public var recordZoneFetchCompletionBlock:
        (@Sendable (CKRecordZone.ID, CKServerChangeToken?, Data?, Bool, (any Error)?) -> Void)?
    public var fetchRecordZoneChangesResultBlock: (@Sendable (Result<Void, any Error>) -> Void)?
    /// The older final callback.
    public var fetchRecordZoneChangesCompletionBlock: (@Sendable ((any Error)?) -> Void)?

    private var failures: [AnyHashable: any Error] = [:]

    public override init() { super.init() }

    public convenience init(
        recordZoneIDs: [CKRecordZone.ID], configurationsByRecordZoneID: [CKRecordZone.ID: ZoneConfiguration]? = nil
    ) {
        self.init()
        self.recordZoneIDs = recordZoneIDs
        self.configurationsByRecordZoneID = configurationsByRecordZoneID
    }

    override func run() async throws {
        // Each pending zone with the token to continue from.
        var pending: [(zoneID: CKRecordZone.ID, token: CKServerChangeToken?)] = (recordZoneIDs ?? []).map {
            ($0, configurationsByRecordZoneID?[$0]?.previousServerChangeToken)
        }
        while !pending.isEmpty {
            try Task.checkCancellation()
            let zones = pending.map { zone in
                let configuration = configurationsByRecordZoneID?[zone.zoneID]
                let limit = configuration?.resultsLimit ?? 0
                return ZoneChangesRequest.Zone(
                    zoneID: WireRecordCoder.zoneIDInput(zone.zoneID), syncToken: zone.token?.syncToken,
                    desiredKeys: configuration?.desiredKeys, resultsLimit: limit > 0 ? limit : Limits.resultsPerPage.value)
            }
            let entries = try await post("changes/zone", ZoneChangesRequest(zones: zones).json, as: ZoneChangesResponse.self).zones
            var stillPending: [(zoneID: CKRecordZone.ID, token: CKServerChangeToken?)] = []
            for (zone, entry) in zip(pending, entries) {
                let changes: ZoneRecordChanges
                switch entry {
                case .failure(let failure):
                    let error = CKError.fromServer(failure)
                    failures[zone.zoneID] = error
                    recordZoneFetchResultBlock?(zone.zoneID, .failure(error))
                    recordZoneFetchCompletionBlock?(zone.zoneID, nil, nil, false, error)
                    continue
                case .success(let success): changes = success
                }
                for record in changes.records { try await deliver(record, zoneID: zone.zoneID) }
                let token = CKServerChangeToken(syncToken: changes.syncToken)
                let moreComing = changes.moreComing
                if moreComing, fetchAllChanges {
                    recordZoneChangeTokensUpdatedBlock?(zone.zoneID, token, nil)
                    stillPending.append((zone.zoneID, token))
                } else {
                    recordZoneFetchResultBlock?(zone.zoneID, .success((token, nil, moreComing)))
                    recordZoneFetchCompletionBlock?(zone.zoneID, token, nil, moreComing, nil)
                }
            }
            pending = stillPending
        }
        if !failures.isEmpty { throw CKError.partialFailure(failures, what: "zones to fetch changes of") }
    }

    private func deliver(_ entry: RecordEntry, zoneID: CKRecordZone.ID) async throws {
        let output: RecordOutput
        switch entry {
        case .deleted(let deleted):
            recordWithIDWasDeletedBlock?(CKRecord.ID(recordName: deleted.recordName, zoneID: zoneID), deleted.recordType ?? "")
            return
        case .record(let record): output = record
        }
        let record = try WireRecordCoder.record(output, zoneID: zoneID, currentUser: currentUser, ciphers: recordCiphers)
        try await downloadAssets(of: record)
        recordWasChangedBlock?(record.recordID, .success(record))
        recordChangedBlock?(record)
    }

    override func finish(with error: CKError?) {
        fetchRecordZoneChangesResultBlock?(error.map { .failure($0) } ?? .success(()))
        fetchRecordZoneChangesCompletionBlock?(error)
    }
}
