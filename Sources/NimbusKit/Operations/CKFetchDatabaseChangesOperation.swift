import Foundation
import NimbusWire

/// Lists the zones that changed or went away in a database since a token (`changes/database`).
/// With `fetchAllChanges` (the default) it keeps asking while the server has more, calling
/// `changeTokenUpdatedBlock` with each intermediate token.
open class CKFetchDatabaseChangesOperation: CKDatabaseOperation, @unchecked Sendable {
    public var previousServerChangeToken: CKServerChangeToken?
    public var resultsLimit: Int = 0
    public var fetchAllChanges = true

    public var recordZoneWithIDChangedBlock: (@Sendable (CKRecordZone.ID) -> Void)?
    public var recordZoneWithIDWasDeletedBlock: (@Sendable (CKRecordZone.ID) -> Void)?
    /// Zones the user purged (deleted with their data) from another device.
    public var recordZoneWithIDWasPurgedBlock: (@Sendable (CKRecordZone.ID) -> Void)?
    public var changeTokenUpdatedBlock: (@Sendable (CKServerChangeToken) -> Void)?
    public var fetchDatabaseChangesResultBlock:
        (@Sendable (Result<(serverChangeToken: CKServerChangeToken, moreComing: Bool), any Error>) -> Void)?
    /// The older final callback.
    public var fetchDatabaseChangesCompletionBlock: (@Sendable (CKServerChangeToken?, Bool, (any Error)?) -> Void)?

    private var finalToken: CKServerChangeToken?
    private var finalMoreComing = false

    public override init() { super.init() }

    public convenience init(previousServerChangeToken: CKServerChangeToken?) {
        self.init()
        self.previousServerChangeToken = previousServerChangeToken
    }

    override func run() async throws {
        var token = previousServerChangeToken
        while true {
            try Task.checkCancellation()
            let body = DatabaseChangesRequest(
                syncToken: token?.syncToken, resultsLimit: resultsLimit > 0 ? resultsLimit : Limits.resultsPerPage.value)
            let answer = try await post("changes/database", body.json, as: DatabaseChangesResponse.self)
            for entry in answer.zones {
                let zoneID = WireRecordCoder.zoneID(entry.zoneID, currentUser: currentUser)
                switch entry {
                case .deleted: recordZoneWithIDWasDeletedBlock?(zoneID)
                case .zone: recordZoneWithIDChangedBlock?(zoneID)
                }
            }
            let next = CKServerChangeToken(syncToken: answer.syncToken)
            let moreComing = answer.moreComing
            if moreComing, fetchAllChanges {
                changeTokenUpdatedBlock?(next)
                token = next
                continue
            }
            finalToken = next
            finalMoreComing = moreComing
            return
        }
    }

    override func finish(with error: CKError?) {
        if let error {
            fetchDatabaseChangesResultBlock?(.failure(error))
            fetchDatabaseChangesCompletionBlock?(nil, false, error)
        } else if let finalToken {
            fetchDatabaseChangesResultBlock?(.success((finalToken, finalMoreComing)))
            fetchDatabaseChangesCompletionBlock?(finalToken, finalMoreComing, nil)
        }
    }
}
