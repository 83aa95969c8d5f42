import Foundation

/// The owner name that means "the signed-in user", as CloudKit spells it.
public let CKCurrentUserDefaultName = "__defaultOwner__"

/// A zone: the unit of atomic commits and of change tracking (custom zones only).
public final class CKRecordZone: NSObject, NSSecureCoding, @unchecked Sendable {
    /// What a zone supports. Custom zones in Nimbus have all three, as in CloudKit's private
    /// database; the default zone has none.
    public struct Capabilities: OptionSet, Sendable, Hashable {
        public let rawValue: UInt
        public init(rawValue: UInt) { self.rawValue = rawValue }
        public static let fetchChanges = Capabilities(rawValue: 1 << 0)
        public static let atomic = Capabilities(rawValue: 1 << 1)
        public static let sharing = Capabilities(rawValue: 1 << 2)
    }

    /// A zone's identity: its name and its owner. (A top-level class, `CKRecordZoneID`, so
    /// Foundation's keyed archiver can name it on every platform.)
    public typealias ID = CKRecordZoneID

    public let zoneID: ID
    public internal(set) var capabilities: Capabilities
    /// The zone's zone-wide share, when it has one (`CKShare(recordZoneID:)`), as fetched.
    public internal(set) var share: CKRecord.Reference?

    public init(zoneID: ID) {
        self.zoneID = zoneID
        capabilities = zoneID.isDefaultZone ? [] : [.fetchChanges, .atomic, .sharing]
    }

    public convenience init(zoneName: String) {
        self.init(zoneID: ID(zoneName: zoneName))
    }

    public static func `default`() -> CKRecordZone { CKRecordZone(zoneID: .default) }

    public override func isEqual(_ object: Any?) -> Bool {
        (object as? CKRecordZone)?.zoneID == zoneID
    }
    public override var hash: Int { zoneID.hash }
    public override var description: String { "<CKRecordZone: \(zoneID.zoneName)>" }

    public static var supportsSecureCoding: Bool { true }
    public func encode(with coder: NSCoder) {
        coder.encode(zoneID, forKey: "zoneID")
        coder.encode(Int64(capabilities.rawValue), forKey: "capabilities")
    }
    public init?(coder: NSCoder) {
        guard let zoneID = coder.decodeIfPresent(ID.self, forKey: "zoneID") else { return nil }
        self.zoneID = zoneID
        capabilities = Capabilities(rawValue: UInt(coder.decodeInt64(forKey: "capabilities")))
    }
}

/// A zone's identity: its name and its owner (`CKRecordZone.ID`).
public final class CKRecordZoneID: NSObject, NSSecureCoding, NSCopying, @unchecked Sendable {
    public static let defaultZoneName = "_defaultZone"
    public static let `default` = CKRecordZoneID(zoneName: defaultZoneName, ownerName: CKCurrentUserDefaultName)

    public let zoneName: String
    public let ownerName: String

    public init(zoneName: String = CKRecordZoneID.defaultZoneName, ownerName: String = CKCurrentUserDefaultName) {
        self.zoneName = zoneName
        self.ownerName = ownerName
    }

    public override func isEqual(_ object: Any?) -> Bool {
        guard let other = object as? CKRecordZoneID else { return false }
        return zoneName == other.zoneName && ownerName == other.ownerName
    }

    public override var hash: Int { zoneName.hashValue ^ (ownerName.hashValue &* 31) }
    public override var description: String { "<CKRecordZoneID: \(zoneName):\(ownerName)>" }
    public func copy(with zone: NSZone? = nil) -> Any { self }

    public static var supportsSecureCoding: Bool { true }
    public func encode(with coder: NSCoder) {
        coder.encode(zoneName as NSString, forKey: "zoneName")
        coder.encode(ownerName as NSString, forKey: "ownerName")
    }
    public init?(coder: NSCoder) {
        guard let name = coder.decodeIfPresent(NSString.self, forKey: "zoneName"),
            let owner = coder.decodeIfPresent(NSString.self, forKey: "ownerName")
        else { return nil }
        zoneName = String(name)
        ownerName = String(owner)
    }

    var isDefaultZone: Bool { zoneName == CKRecordZoneID.defaultZoneName }
}

