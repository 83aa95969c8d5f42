/// The response bodies of `records/modify`, `records/lookup`, `records/query`, `changes/zone`
/// and `records/changes` (reference §2.2, §3–§6), and the record dictionary inside them.

/// Who changed a record, when, from which device (`created`, `modified`).
public struct RecordStamp: StreamedWireBody, Hashable {
    /// Milliseconds since 1970.
    public var timestamp: Int64
    public var userRecordName: String?
    public var deviceID: String?

    public init(timestamp: Int64, userRecordName: String?, deviceID: String?) {
        self.timestamp = timestamp
        self.userRecordName = userRecordName
        self.deviceID = deviceID
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        timestamp = try json.int(WireKey.timestamp) ?? 0
        userRecordName = try json.string(WireKey.userRecordName)
        deviceID = try json.string(WireKey.deviceID)
    }

    public func writeText(to writer: inout JSONWriter) {
        writer.openObject()
        writer.member(.timestamp, timestamp)
        writer.member(.userRecordName, userRecordName)
        writer.member(.deviceID, deviceID)
        writer.closeObject()
    }
}

/// A record's `fields` dictionary in a response: `{name: {"value": …, "type": …}}`. The server
/// writes its stored JSON text straight into the response (`stored`, no re-typing per record);
/// a reader gets typed values from `values()`.
public struct RecordFields: Sendable {
    public let json: JSON

    public init(_ object: JSONObject) { json = .object(object) }

    public init(_ values: [(name: String, value: FieldValue)], numbersAsStrings: Bool = false) {
        self.init(JSONObject(values.map { ($0.name, $0.value.fieldJSON(numbersAsStrings: numbersAsStrings)) }))
    }

    /// The fields dictionary of `values` as text, written without a tree: a record's stored form.
    public static func text(of values: [(name: String, value: FieldValue)]) -> [UInt8] {
        var writer = JSONWriter(reservingCapacity: 64 * values.count)
        writer.openObject()
        for (name, value) in values {
            writer.key(name)
            value.writeField(to: &writer)
        }
        writer.closeObject()
        return writer.bytes
    }

    /// Text that is already a valid fields dictionary (the stored form of a record's fields).
    public static func stored(_ text: SerializedJSON) -> RecordFields { RecordFields(json: .serialized(text)) }

    private init(json: JSON) { self.json = json }

    /// Each field's typed value, in order; a field without a known type or with a value its type
    /// does not allow is `BAD_REQUEST` naming it.
    public func values() throws(CloudKitError) -> [(name: String, value: FieldValue)] {
        guard case .object(let object) = json.parsed else {
            throw .badRequest("fields: expected an object, got \(json.kindName)")
        }
        var values: [(name: String, value: FieldValue)] = []
        values.reserveCapacity(object.pairs.count)
        for (name, field) in object.pairs {
            guard let typeName = field[WireKey.type]?.stringValue, let type = FieldType(wireName: typeName) else {
                throw .badRequest("fields.\(name): no field type this version knows")
            }
            values.append((name, try FieldValue.decode(field[WireKey.value] ?? .null, as: type, path: "fields.\(name)")))
        }
        return values
    }
}

/// The record dictionary of reference §2.2.
public struct RecordOutput: StreamedWireBody {
    public var recordName: String
    public var recordType: String
    public var recordChangeTag: String?
    public var fields: RecordFields
    public var created: RecordStamp?
    public var modified: RecordStamp?
    /// The parent record's name (same zone).
    public var parent: String?
    public var zoneID: WireZoneID?
    /// A shared root's share record (same zone).
    public var share: String?
    /// A share record's participants, short GUID and URL.
    public var sharing: ShareFacts?

    public init(
        recordName: String, recordType: String, recordChangeTag: String?, fields: RecordFields, created: RecordStamp?,
        modified: RecordStamp?, parent: String?, zoneID: WireZoneID?, share: String? = nil, sharing: ShareFacts? = nil
    ) {
        self.share = share
        self.sharing = sharing
        self.recordName = recordName
        self.recordType = recordType
        self.recordChangeTag = recordChangeTag
        self.fields = fields
        self.created = created
        self.modified = modified
        self.parent = parent
        self.zoneID = zoneID
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        recordName = try json.requiredString(WireKey.recordName)
        recordType = try json.requiredString(WireKey.recordType)
        recordChangeTag = try json.string(WireKey.recordChangeTag)
        fields = RecordFields(try json.object(WireKey.fields)?.object ?? [:])
        created = try json.object(WireKey.created).map { stamp throws(CloudKitError) in try RecordStamp(json: stamp) }
        modified = try json.object(WireKey.modified).map { stamp throws(CloudKitError) in try RecordStamp(json: stamp) }
        parent = try json.object(WireKey.parent)?.requiredString(WireKey.recordName)
        zoneID = try json.object(WireKey.zoneID).map { zone throws(CloudKitError) in try WireZoneID(json: zone) }
        share = try json.object(WireKey.share)?.string(WireKey.recordName)
        sharing = try ShareFacts(json: json)
    }

    public func writeText(to writer: inout JSONWriter) {
        writer.openObject()
        writer.member(.recordName, recordName)
        writer.member(.recordType, recordType)
        writer.member(.recordChangeTag, recordChangeTag)
        writer.key(.fields)
        writer.json(fields.json)
        writer.member(.created, created)
        writer.member(.modified, modified)
        writer.member(.deleted, false)
        writer.key(.pluginFields)
        writer.openObject()
        writer.closeObject()
        writer.member(.zoneID, zoneID)
        if let parent {
            writer.key(.parent)
            writeReference(to: parent, zoneID: nil, into: &writer)
        }
        if let share {
            writer.key(.share)
            writeReference(to: share, zoneID: zoneID, into: &writer)
        }
        sharing?.write(to: &writer, besides: has)
        writer.closeObject()
    }

    /// `{"recordName": …, "zoneID": …}`: a record this one points at (its parent, its share).
    private func writeReference(to recordName: String, zoneID: WireZoneID?, into writer: inout JSONWriter) {
        writer.openObject()
        writer.member(.recordName, recordName)
        writer.member(.zoneID, zoneID)
        writer.closeObject()
    }

    /// Whether the record's dictionary holds `key` (a share's kept keys go only where it holds none).
    private func has(_ key: String) -> Bool {
        switch key {
        case WireKey.recordName, WireKey.recordType, WireKey.fields, WireKey.deleted, WireKey.pluginFields: true
        case WireKey.recordChangeTag: recordChangeTag != nil
        case WireKey.created: created != nil
        case WireKey.modified: modified != nil
        case WireKey.zoneID: zoneID != nil
        case WireKey.parent: parent != nil
        case WireKey.share: share != nil
        default: false
        }
    }
}

/// A deleted record, as modify results and change feeds show it.
public struct DeletedRecord: StreamedWireBody, Hashable {
    public var recordName: String
    public var recordType: String?
    public var zoneID: WireZoneID?

    public init(recordName: String, recordType: String?, zoneID: WireZoneID?) {
        self.recordName = recordName
        self.recordType = recordType
        self.zoneID = zoneID
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        recordName = try json.requiredString(WireKey.recordName)
        recordType = try json.string(WireKey.recordType)
        zoneID = try json.object(WireKey.zoneID).map { zone throws(CloudKitError) in try WireZoneID(json: zone) }
    }

    public func writeText(to writer: inout JSONWriter) {
        writer.openObject()
        writer.member(.recordName, recordName)
        writer.member(.recordType, recordType)
        writer.member(.deleted, true)
        writer.member(.zoneID, zoneID)
        writer.closeObject()
    }
}

/// A record or a deletion: the entries of modify results and change feeds (`deleted: true`
/// tells them apart).
public enum RecordEntry: StreamedWireBody {
    /// Boxed: a record's output holds a dozen strings, and writing a page copied each entry out
    /// of its list (a retain and a release per string); a box is one of each.
    indirect case record(RecordOutput)
    case deleted(DeletedRecord)

    public init(json: ObjectReader) throws(CloudKitError) {
        if try json.bool(WireKey.deleted) == true {
            self = .deleted(try DeletedRecord(json: json))
        } else {
            self = .record(try RecordOutput(json: json))
        }
    }

    public func writeText(to writer: inout JSONWriter) {
        switch self {
        case .record(let record): record.writeText(to: &writer)
        case .deleted(let deleted): deleted.writeText(to: &writer)
        }
    }
}

/// `records/modify` and `records/lookup` (one entry per requested record, in order), and
/// `records/query` (the page, and where the next one starts).
public struct RecordsResponse: StreamedWireBody {
    public var records: [ItemResult<RecordEntry>]
    public var continuationMarker: String?

    public init(records: [ItemResult<RecordEntry>], continuationMarker: String? = nil) {
        self.records = records
        self.continuationMarker = continuationMarker
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        records = try json.list(WireKey.records)
        continuationMarker = try json.string(WireKey.continuationMarker)
    }

    public func writeText(to writer: inout JSONWriter) {
        writer.openObject()
        writer.member(.records, records)
        writer.member(.continuationMarker, continuationMarker)
        writer.closeObject()
    }
}

/// One zone's entry in `changes/zone`: the records changed after the token, oldest first.
public struct ZoneRecordChanges: StreamedWireBody {
    public var zoneID: WireZoneID
    public var syncToken: String
    public var records: [RecordEntry]
    public var moreComing: Bool

    public init(zoneID: WireZoneID, syncToken: String, records: [RecordEntry], moreComing: Bool) {
        self.zoneID = zoneID
        self.syncToken = syncToken
        self.records = records
        self.moreComing = moreComing
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        zoneID = try WireZoneID(json: json.requiredObject(WireKey.zoneID))
        syncToken = try json.requiredString(WireKey.syncToken)
        records = try json.list(WireKey.records)
        moreComing = try json.bool(WireKey.moreComing) ?? false
    }

    public func writeText(to writer: inout JSONWriter) {
        writer.openObject()
        writer.member(.zoneID, zoneID)
        writer.member(.syncToken, syncToken)
        writer.member(.records, records)
        writer.member(.moreComing, moreComing)
        writer.closeObject()
    }
}

/// `changes/zone`: one entry per requested zone, a zone's failure its own entry.
public struct ZoneChangesResponse: StreamedWireBody {
    public var zones: [ItemResult<ZoneRecordChanges>]

    public init(zones: [ItemResult<ZoneRecordChanges>]) { self.zones = zones }

    public init(json: ObjectReader) throws(CloudKitError) { zones = try json.list(WireKey.zones) }

    public func writeText(to writer: inout JSONWriter) {
        writer.openObject()
        writer.member(.zones, zones)
        writer.closeObject()
    }
}

/// The deprecated `records/changes`: one zone's changes at the top level.
public struct RecordChangesResponse: StreamedWireBody {
    public var records: [RecordEntry]
    public var syncToken: String?
    public var moreComing: Bool

    public init(_ changes: ZoneRecordChanges?) {
        records = changes?.records ?? []
        syncToken = changes?.syncToken
        moreComing = changes?.moreComing ?? false
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        records = try json.list(WireKey.records)
        syncToken = try json.string(WireKey.syncToken)
        moreComing = try json.bool(WireKey.moreComing) ?? false
    }

    public func writeText(to writer: inout JSONWriter) {
        writer.openObject()
        writer.member(.records, records)
        writer.key(.syncToken)
        if let syncToken { writer.string(syncToken) } else { writer.json(.null) }
        writer.member(.moreComing, moreComing)
        writer.key("reverse")
        writer.bool(false)
        writer.closeObject()
    }
}

/// The keys of the record path's bodies, each written into its text once.
extension JSONWriter.Key {
    static let recordName = Self(WireKey.recordName)
    static let recordType = Self(WireKey.recordType)
    static let recordChangeTag = Self(WireKey.recordChangeTag)
    static let fields = Self(WireKey.fields)
    static let created = Self(WireKey.created)
    static let modified = Self(WireKey.modified)
    static let deleted = Self(WireKey.deleted)
    static let pluginFields = Self(WireKey.pluginFields)
    static let zoneID = Self(WireKey.zoneID)
    static let parent = Self(WireKey.parent)
    static let share = Self(WireKey.share)
    static let timestamp = Self(WireKey.timestamp)
    static let userRecordName = Self(WireKey.userRecordName)
    static let deviceID = Self(WireKey.deviceID)
    static let records = Self(WireKey.records)
    static let syncToken = Self(WireKey.syncToken)
    static let moreComing = Self(WireKey.moreComing)
    static let zones = Self(WireKey.zones)
    static let continuationMarker = Self(WireKey.continuationMarker)
    static let zoneName = Self(WireKey.zoneName)
    static let ownerRecordName = Self(WireKey.ownerRecordName)
    static let zoneType = Self(WireKey.zoneType)
    // A field's dictionary (`FieldValue.writeField`).
    static let value = Self(WireKey.value)
    static let type = Self(WireKey.type)
}
