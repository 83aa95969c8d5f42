import Foundation

extension CKRecord {
    public typealias ID = CKRecordID
    public typealias Reference = CKReference
}

/// The top-level classes behind `CKRecord.ID` and `CKRecord.Reference` (their Objective-C
/// names in CloudKit): top-level so Foundation's keyed archiver can name them on Linux too.

/// A record's identity: its name within a zone. Made by the client; a new record with no
/// name given gets a UUID, as in CloudKit.
public final class CKRecordID: NSObject, NSSecureCoding, NSCopying, @unchecked Sendable {
    public let recordName: String
    public let zoneID: CKRecordZone.ID

    public init(recordName: String = UUID().uuidString, zoneID: CKRecordZone.ID = .default) {
        self.recordName = recordName
        self.zoneID = zoneID
    }

    public override func isEqual(_ object: Any?) -> Bool {
        guard let other = object as? CKRecordID else { return false }
        return recordName == other.recordName && zoneID == other.zoneID
    }

    public override var hash: Int { recordName.hashValue ^ (zoneID.hash &* 17) }
    public override var description: String {
        "<CKRecordID: \(recordName); zoneID=\(zoneID.zoneName):\(zoneID.ownerName)>"
    }
    public func copy(with zone: NSZone? = nil) -> Any { self }

    public static var supportsSecureCoding: Bool { true }
    public func encode(with coder: NSCoder) {
        coder.encode(recordName as NSString, forKey: "recordName")
        coder.encode(zoneID, forKey: "zoneID")
    }
    public init?(coder: NSCoder) {
        guard let name = coder.decodeIfPresent(NSString.self, forKey: "recordName"),
            let zoneID = coder.decodeIfPresent(CKRecordZone.ID.self, forKey: "zoneID")
        else { return nil }
        recordName = String(name)
        self.zoneID = zoneID
    }
}

/// A typed pointer from one record to another, with what happens when the target goes.
public final class CKReference: NSObject, NSSecureCoding, NSCopying, CKRecordValue, @unchecked Sendable {
    public enum Action: UInt, Sendable, Hashable {
        /// A plain pointer: the server still knows the relationship (back references,
        /// queries), but nothing happens on delete.
        case none = 0
        /// Delete this record when the target is deleted (cascading, "first delete wins").
        case deleteSelf = 1
    }

    public let recordID: CKRecord.ID
    public let action: Action

    public init(recordID: CKRecord.ID, action: Action) {
        self.recordID = recordID
        self.action = action
    }

    public convenience init(record: CKRecord, action: Action) {
        self.init(recordID: record.recordID, action: action)
    }

    public override func isEqual(_ object: Any?) -> Bool {
        guard let other = object as? CKReference else { return false }
        return recordID == other.recordID && action == other.action
    }
    public override var hash: Int { recordID.hash &+ Int(action.rawValue) }
    public override var description: String { "<CKReference: \(recordID.recordName) action=\(action)>" }
    public func copy(with zone: NSZone? = nil) -> Any { self }

    public static var supportsSecureCoding: Bool { true }
    public func encode(with coder: NSCoder) {
        coder.encode(recordID, forKey: "recordID")
        coder.encode(Int64(action.rawValue), forKey: "action")
    }
    public init?(coder: NSCoder) {
        guard let recordID = coder.decodeIfPresent(CKRecordID.self, forKey: "recordID") else { return nil }
        self.recordID = recordID
        action = Action(rawValue: UInt(coder.decodeInt64(forKey: "action"))) ?? .none
    }
}

/// The record type of user records, which CloudKit reserves.
public let CKRecordTypeUserRecord = "Users"
