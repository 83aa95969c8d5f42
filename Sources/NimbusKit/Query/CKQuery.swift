import Foundation
import NimbusWire

/// A query: a record type, a predicate in CloudKit's subset of `NSPredicate`, and sort
/// descriptors. Run it with `CKQueryOperation` or `CKDatabase.records(matching:)`.
public final class CKQuery: NSObject, NSSecureCoding, NSCopying, @unchecked Sendable {
    public let recordType: CKRecord.RecordType
    public let predicate: NSPredicate
    public var sortDescriptors: [NSSortDescriptor]?
    /// The wire form of a query restored from an archive (whose predicate is not kept).
    private var archivedQueryJSON: JSON?

    public init(recordType: CKRecord.RecordType, predicate: NSPredicate) {
        self.recordType = recordType
        self.predicate = predicate
    }

    public func copy(with zone: NSZone? = nil) -> Any {
        let copy = CKQuery(recordType: recordType, predicate: predicate)
        copy.sortDescriptors = sortDescriptors
        return copy
    }

    public override var description: String { "<CKQuery: \(recordType)>" }

    /// The wire `query` object (reference §4): filters from the predicate, sorts from the
    /// descriptors. Anything outside CloudKit's subset is `invalidArguments`.
    func queryJSON(currentUser: String? = nil) throws(CKError) -> JSON {
        if let archivedQueryJSON { return archivedQueryJSON }
        let filters = try PredicateTranslator(currentUser: currentUser).filters(for: PredicateReader.node(of: predicate))
        var sorts: [QuerySortInput] = []
        for descriptor in sortDescriptors ?? [] {
            sorts.append(try SortTranslator.sort(descriptor))
        }
        return RecordsQueryRequest.queryJSON(recordType: recordType, filters: filters, sorts: sorts)
    }

    // NSSecureCoding keeps the wire form, which is all a query needs to run again.
    public static var supportsSecureCoding: Bool { true }
    public func encode(with coder: NSCoder) {
        coder.encode(recordType as NSString, forKey: "recordType")
        if let json = try? queryJSON() { coder.encode(json.text as NSString, forKey: "query") }
    }
    public init?(coder: NSCoder) {
        // A decoded query runs as it was archived (its wire form is kept); its `predicate`
        // property reads TRUEPREDICATE, since the format string is not archived.
        guard let type = coder.decodeIfPresent(NSString.self, forKey: "recordType"),
            let text = coder.decodeIfPresent(NSString.self, forKey: "query"),
            let json = try? JSON.parse(String(text))
        else { return nil }
        recordType = String(type)
        predicate = NSPredicate(value: true)
        archivedQueryJSON = json
    }
}

extension CKQueryOperation {
    public typealias Cursor = CKQueryCursor
}

/// Where a query's results left off (`CKQueryOperation.Cursor`): pass it to
/// `CKQueryOperation(cursor:)` for the next page.
public final class CKQueryCursor: NSObject, NSSecureCoding, NSCopying, @unchecked Sendable {
    /// The `query` object exactly as first sent, which the server binds its marker to.
    let queryJSONText: String
    let continuationMarker: String
    let zoneID: CKRecordZone.ID?
    let zoneWide: Bool

    init(queryJSONText: String, continuationMarker: String, zoneID: CKRecordZone.ID?, zoneWide: Bool) {
        self.queryJSONText = queryJSONText
        self.continuationMarker = continuationMarker
        self.zoneID = zoneID
        self.zoneWide = zoneWide
    }

    public func copy(with zone: NSZone? = nil) -> Any { self }
    public override func isEqual(_ object: Any?) -> Bool {
        (object as? CKQueryCursor)?.continuationMarker == continuationMarker
    }
    public override var hash: Int { continuationMarker.hashValue }

    public static var supportsSecureCoding: Bool { true }
    public func encode(with coder: NSCoder) {
        coder.encode(queryJSONText as NSString, forKey: "query")
        coder.encode(continuationMarker as NSString, forKey: "marker")
        if let zoneID { coder.encode(zoneID, forKey: "zoneID") }
        coder.encode(zoneWide, forKey: "zoneWide")
    }
    public init?(coder: NSCoder) {
        guard let query = coder.decodeIfPresent(NSString.self, forKey: "query"),
            let marker = coder.decodeIfPresent(NSString.self, forKey: "marker")
        else { return nil }
        queryJSONText = String(query)
        continuationMarker = String(marker)
        zoneID = coder.decodeIfPresent(CKRecordZone.ID.self, forKey: "zoneID")
        zoneWide = coder.decodeBool(forKey: "zoneWide")
    }
}
