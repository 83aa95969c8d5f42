import Foundation

/// The iOS 8 way to read one zone's changes, one page per operation: apps written then still
/// use it. It runs a `CKFetchRecordZoneChangesOperation` for the one zone without
/// `fetchAllChanges` and hands its results to the older blocks; `moreComing` says whether to
/// run another from the token it reports.
@available(*, deprecated, renamed: "CKFetchRecordZoneChangesOperation")
open class CKFetchRecordChangesOperation: CKDatabaseOperation, @unchecked Sendable {
    public var recordZoneID: CKRecordZone.ID?
    public var previousServerChangeToken: CKServerChangeToken?
    /// Records per page; 0 is as many as the server sends.
    public var resultsLimit: Int = 0
    public var desiredKeys: [CKRecord.FieldKey]?

    public var recordChangedBlock: (@Sendable (CKRecord) -> Void)?
    public var recordWithIDWasDeletedBlock: (@Sendable (CKRecord.ID) -> Void)?
    public var fetchRecordChangesCompletionBlock: (@Sendable (CKServerChangeToken?, Data?, (any Error)?) -> Void)?

    /// Whether the zone has changes past the token this operation reported.
    public private(set) var moreComing = false
    private var serverChangeToken: CKServerChangeToken?

    public override init() { super.init() }

    public convenience init(recordZoneID: CKRecordZone.ID, previousServerChangeToken: CKServerChangeToken?) {
        self.init()
        self.recordZoneID = recordZoneID
        self.previousServerChangeToken = previousServerChangeToken
    }

    override func run() async throws {
        guard let zoneID = recordZoneID else {
            throw CKError(.invalidArguments, "CKFetchRecordChangesOperation needs a recordZoneID")
        }
        let page = CKFetchRecordZoneChangesOperation(
            recordZoneIDs: [zoneID],
            configurationsByRecordZoneID: [
                zoneID: .init(previousServerChangeToken: previousServerChangeToken, resultsLimit: resultsLimit, desiredKeys: desiredKeys)
            ])
        page.fetchAllChanges = false
        page.database = targetDatabase
        page.configuration = configuration
        page.recordChangedBlock = recordChangedBlock
        let deleted = recordWithIDWasDeletedBlock
        page.recordWithIDWasDeletedBlock = { recordID, _ in deleted?(recordID) }
        let outcome = Outcome()
        page.recordZoneFetchResultBlock = { _, result in outcome.set(result) }
        do {
            try await page.run()
        } catch {
            // The zone's own error, not the batch's partialFailure around it.
            if case .failure(let zoneError)? = outcome.result { throw zoneError }
            throw error
        }
        if case .success(let page)? = outcome.result {
            serverChangeToken = page.serverChangeToken
            moreComing = page.moreComing
        }
    }

    override func finish(with error: CKError?) {
        fetchRecordChangesCompletionBlock?(error == nil ? serverChangeToken : nil, nil, error)
    }

    /// The one zone's result, set from the page's callback.
    private final class Outcome: @unchecked Sendable {
        private let lock = NSLock()
        private var _result: Result<(serverChangeToken: CKServerChangeToken, clientChangeTokenData: Data?, moreComing: Bool), any Error>?
        var result: Result<(serverChangeToken: CKServerChangeToken, clientChangeTokenData: Data?, moreComing: Bool), any Error>? {
            lock.withLock { _result }
        }
        func set(_ value: Result<(serverChangeToken: CKServerChangeToken, clientChangeTokenData: Data?, moreComing: Bool), any Error>) {
            lock.withLock { _result = value }
        }
    }
}
