/// The response bodies of `zones/list`, `zones/lookup`, `zones/modify` and `changes/database`
/// (reference §2.7, §7, §8).

/// The zone dictionary: its ID, a token for its current state, and whether it takes atomic batches.
public struct ZoneOutput: WireBody, Hashable {
    public var zoneID: WireZoneID
    public var syncToken: String?
    public var atomic: Bool
    /// The zone's zone-wide share record, when it has one (`CKRecordZone.share`; docs/sharing.md).
    public var share: String?

    public init(zoneID: WireZoneID, syncToken: String?, atomic: Bool, share: String? = nil) {
        self.zoneID = zoneID
        self.syncToken = syncToken
        self.atomic = atomic
        self.share = share
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        zoneID = try WireZoneID(json: json.requiredObject(WireKey.zoneID))
        syncToken = try json.string(WireKey.syncToken)
        atomic = try json.bool(WireKey.atomic) ?? false
        share = try json.object(WireKey.share)?.string(WireKey.recordName)
    }

    public var json: JSON {
        var object: JSONObject = [WireKey.zoneID: zoneID.json]
        if let syncToken { object[WireKey.syncToken] = .string(syncToken) }
        object[WireKey.atomic] = .bool(atomic)
        if let share { object[WireKey.share] = .object([WireKey.recordName: .string(share), WireKey.zoneID: zoneID.json]) }
        return .object(object)
    }
}

/// A zone or a deleted zone (`deleted: true`).
public enum ZoneEntry: WireBody, Hashable {
    case zone(ZoneOutput)
    case deleted(WireZoneID)

    public init(json: ObjectReader) throws(CloudKitError) {
        if try json.bool(WireKey.deleted) == true {
            self = .deleted(try WireZoneID(json: json.requiredObject(WireKey.zoneID)))
        } else {
            self = .zone(try ZoneOutput(json: json))
        }
    }

    public var json: JSON {
        switch self {
        case .zone(let zone): zone.json
        case .deleted(let zoneID): [WireKey.zoneID: zoneID.json, WireKey.deleted: true]
        }
    }

    public var zoneID: WireZoneID {
        switch self {
        case .zone(let zone): zone.zoneID
        case .deleted(let zoneID): zoneID
        }
    }
}

/// `zones/list`, `zones/lookup` and `zones/modify`: one entry per zone, in request order.
public struct ZonesResponse: WireBody {
    public var zones: [ItemResult<ZoneEntry>]

    public init(zones: [ItemResult<ZoneEntry>]) { self.zones = zones }

    public init(json: ObjectReader) throws(CloudKitError) { zones = try json.list(WireKey.zones) }

    public var json: JSON { [WireKey.zones: zones.json] }
}

/// `changes/database` (and the deprecated `zones/changes`): the zones changed after the token.
public struct DatabaseChangesResponse: WireBody {
    public var zones: [ZoneEntry]
    public var syncToken: String
    public var moreComing: Bool

    public init(zones: [ZoneEntry], syncToken: String, moreComing: Bool) {
        self.zones = zones
        self.syncToken = syncToken
        self.moreComing = moreComing
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        zones = try json.list(WireKey.zones)
        syncToken = try json.requiredString(WireKey.syncToken)
        moreComing = try json.bool(WireKey.moreComing) ?? false
    }

    public var json: JSON {
        [WireKey.zones: zones.json, WireKey.syncToken: .string(syncToken), WireKey.moreComing: .bool(moreComing)]
    }
}
