import Foundation
import NimbusWire

/// Runs a query (`records/query`), one page per operation; a `Cursor` continues where a page
/// ended.
open class CKQueryOperation: CKDatabaseOperation, @unchecked Sendable {
    /// `resultsLimit` meaning "as many as the server sends per page" (200 on Nimbus).
    public static let maximumResults = 0

    public var query: CKQuery?
    public var cursor: Cursor?
    /// The zone to search; nil searches the default zone.
    public var zoneID: CKRecordZone.ID?
    public var resultsLimit: Int = CKQueryOperation.maximumResults
    public var desiredKeys: [CKRecord.FieldKey]?

    public var recordMatchedBlock: (@Sendable (CKRecord.ID, Result<CKRecord, any Error>) -> Void)?
    public var queryResultBlock: (@Sendable (Result<Cursor?, any Error>) -> Void)?
    /// The older per-record callback.
    public var recordFetchedBlock: (@Sendable (CKRecord) -> Void)?
    /// The older final callback.
    public var queryCompletionBlock: (@Sendable (Cursor?, (any Error)?) -> Void)?

    private var nextCursor: Cursor?

    public override init() { super.init() }

    public convenience init(query: CKQuery) {
        self.init()
        self.query = query
    }

    public convenience init(cursor: Cursor) {
        self.init()
        self.cursor = cursor
    }

    override func run() async throws {
        let queryJSON: JSON
        var marker: String?
        let zone: CKRecordZone.ID?
        if let cursor {
            queryJSON = try JSON.parse(cursor.queryJSONText)
            marker = cursor.continuationMarker
            zone = cursor.zoneID
        } else if let query {
            queryJSON = try query.queryJSON(currentUser: currentUser)
            zone = zoneID
        } else {
            throw CKError(.invalidArguments, "a CKQueryOperation needs a query or a cursor")
        }
        if resultsLimit < 0 { throw CKError(.invalidArguments, "resultsLimit must be 0 (no limit) or more, not \(resultsLimit)") }
        let body = RecordsQueryRequest(
            queryJSON: queryJSON, zoneID: zone.map(WireRecordCoder.zoneIDInput) ?? .defaultZone,
            resultsLimit: resultsLimit > 0 ? resultsLimit : Limits.resultsPerPage.value, continuationMarker: marker,
            desiredKeys: desiredKeys)
        let answer = try await post("records/query", body.json, as: RecordsResponse.self)
        for entry in answer.records {
            try Task.checkCancellation()
            guard case .success(.record(let output)) = entry else { continue }
            let record = try WireRecordCoder.record(output, zoneID: zone, currentUser: currentUser, ciphers: recordCiphers)
            try await downloadAssets(of: record)
            recordMatchedBlock?(record.recordID, .success(record))
            recordFetchedBlock?(record)
        }
        if let marker = answer.continuationMarker {
            nextCursor = Cursor(queryJSONText: queryJSON.text, continuationMarker: marker, zoneID: zone, zoneWide: false)
        }
    }

    override func finish(with error: CKError?) {
        queryResultBlock?(error.map { .failure($0) } ?? .success(nextCursor))
        queryCompletionBlock?(error == nil ? nextCursor : nil, error)
    }
}
