import Foundation

/// A record: a typed dictionary of fields plus the system fields the server keeps.
///
/// The record tracks which keys were set since it came from the server (`changedKeys()`), so
/// a save sends only what changed, and it keeps the values it came with (its "ancestor"), so a
/// `serverRecordChanged` error can hand back the three records a three-way merge needs.
public class CKRecord: NSObject, NSSecureCoding, NSCopying, CKRecordKeyValueSetting, @unchecked Sendable {
    public typealias RecordType = String
    public typealias FieldKey = String

    public let recordType: RecordType
    public let recordID: CKRecord.ID

    private let lock = NSLock()
    private var values: [String: any CKRecordValue] = [:]
    /// The keys whose values are encrypted on the device before they are sent
    /// (`encryptedValues`); one namespace with the plain keys, as in CloudKit.
    private var encryptedKeys: Set<String> = []
    /// Keys in the order they were first set, for stable `allKeys()`.
    private var keyOrder: [String] = []
    private var changed: [String] = []
    /// The field values as the server last sent them (nil for a record never saved).
    private var serverValues: [String: any CKRecordValue]?
    private var _parent: Reference?
    private var parentChanged = false

    public internal(set) var recordChangeTag: String?
    public internal(set) var creationDate: Date?
    public internal(set) var modificationDate: Date?
    public internal(set) var creatorUserRecordID: CKRecord.ID?
    public internal(set) var lastModifiedUserRecordID: CKRecord.ID?
    /// The device that made the last change, as the server reports it.
    public internal(set) var modifiedByDevice: String?
    /// The share whose root this record is, as the server reports it (docs/sharing.md).
    public internal(set) var share: Reference?

    public init(recordType: RecordType, recordID: CKRecord.ID = CKRecord.ID()) {
        self.recordType = recordType
        self.recordID = recordID
    }

    public convenience init(recordType: RecordType, zoneID: CKRecordZone.ID) {
        self.init(recordType: recordType, recordID: CKRecord.ID(zoneID: zoneID))
    }

    // MARK: Fields

    public subscript(key: FieldKey) -> (any CKRecordValue)? {
        get { object(forKey: key) }
        set { setObject(newValue, forKey: key) }
    }

    /// Key-value coding's spelling of `setObject(_:forKey:)`, which older apps use; a value that
    /// is not a record value is refused when saved, as any other.
    #if canImport(ObjectiveC)
    public override func setValue(_ value: Any?, forKey key: String) { setObject(Self.recordValue(value), forKey: key) }
    public override func value(forKey key: String) -> Any? { object(forKey: key) }
    #else
    public func setValue(_ value: Any?, forKey key: String) { setObject(Self.recordValue(value), forKey: key) }
    public func value(forKey key: String) -> Any? { object(forKey: key) }
    #endif

    /// A value of a type no field holds, kept so that the save refuses it (`invalidArguments`)
    /// rather than the field silently going.
    private struct Unsupported: CKRecordValue { let value: Any }

    private static func recordValue(_ value: Any?) -> (any CKRecordValue)? {
        guard let value else { return nil }
        return value as? any CKRecordValue ?? Unsupported(value: value)
    }

    /// The field as the type the caller asks for (`let title: String? = record["title"]`,
    /// `record["count"] as Int?`), as in CloudKit's Swift overlay; nil when the field is
    /// absent or holds another type. Numbers convert as `NSNumber` does (`Int`, `Double`, …).
    public subscript<T: CKRecordValue>(key: FieldKey) -> T? {
        get {
            let value = object(forKey: key)
            if let number = value as? NSNumber { return RecordValueNormalizer.number(number, as: T.self) }
            return value as? T
        }
        set { setObject(newValue, forKey: key) }
    }

    /// A plain field's value; nil for an encrypted one (read it through `encryptedValues`).
    public func object(forKey key: FieldKey) -> (any CKRecordValue)? {
        object(forKey: key, encrypted: false)
    }

    /// Sets a field; nil removes it (and a save then removes it on the server).
    public func setObject(_ object: (any CKRecordValue)?, forKey key: FieldKey) {
        setObject(object, forKey: key, encrypted: false)
    }

    /// The values NimbusKit encrypts on this device before a save sends them, and decrypts
    /// when they come back: the server stores ciphertext only (docs/encryption.md).
    public var encryptedValues: any CKRecordKeyValueSetting { EncryptedValues(record: self) }

    func object(forKey key: FieldKey, encrypted: Bool) -> (any CKRecordValue)? {
        lock.withLock { encryptedKeys.contains(key) == encrypted ? values[key] : nil }
    }

    func setObject(_ object: (any CKRecordValue)?, forKey key: FieldKey, encrypted: Bool) {
        lock.withLock {
            if let object {
                if values[key] == nil, !keyOrder.contains(key) { keyOrder.append(key) }
                values[key] = RecordValueNormalizer.normalize(object)
                if encrypted { encryptedKeys.insert(key) } else { encryptedKeys.remove(key) }
            } else {
                values[key] = nil
                encryptedKeys.remove(key)
                keyOrder.removeAll { $0 == key }
            }
            if !changed.contains(key) { changed.append(key) }
        }
    }

    func keys(encrypted: Bool) -> [FieldKey] {
        lock.withLock { keyOrder.filter { values[$0] != nil && encryptedKeys.contains($0) == encrypted } }
    }

    func isEncrypted(_ key: FieldKey) -> Bool { lock.withLock { encryptedKeys.contains(key) } }

    /// The keys that hold a value.
    public func allKeys() -> [FieldKey] {
        lock.withLock { keyOrder.filter { values[$0] != nil } }
    }

    /// The keys set or removed since the record came from the server (or was made).
    public func changedKeys() -> [FieldKey] {
        lock.withLock { changed }
    }

    // MARK: Parent

    /// The record's parent: the unit of sharing, and what the seeds' photo/album model uses.
    public var parent: Reference? {
        get { lock.withLock { _parent } }
        set {
            lock.withLock {
                _parent = newValue.map { Reference(recordID: $0.recordID, action: .none) }
                parentChanged = true
            }
        }
    }

    public func setParent(_ parentRecord: CKRecord?) { parent = parentRecord.map { Reference(record: $0, action: .none) } }
    public func setParent(_ parentID: CKRecord.ID?) { parent = parentID.map { Reference(recordID: $0, action: .none) } }

    // MARK: Copying and equality

    public func copy(with zone: NSZone? = nil) -> Any {
        let copy = CKRecord(recordType: recordType, recordID: recordID)
        lock.withLock {
            copy.values = values
            copy.encryptedKeys = encryptedKeys
            copy.keyOrder = keyOrder
            copy.changed = changed
            copy.serverValues = serverValues
            copy._parent = _parent
            copy.parentChanged = parentChanged
        }
        copy.copySystemFields(from: self)
        return copy
    }

    public override var description: String {
        "<CKRecord: \(recordType) \(recordID.recordName); changeTag=\(recordChangeTag ?? "nil"); keys=\(allKeys())>"
    }

    // MARK: Internal state for saving and conflicts

    var wasSavedOnServer: Bool { recordChangeTag != nil }

    var isParentChanged: Bool { lock.withLock { parentChanged } }

    /// Copies system fields (change tag, dates, users) from another record.
    func copySystemFields(from other: CKRecord) {
        recordChangeTag = other.recordChangeTag
        creationDate = other.creationDate
        modificationDate = other.modificationDate
        creatorUserRecordID = other.creatorUserRecordID
        lastModifiedUserRecordID = other.lastModifiedUserRecordID
        modifiedByDevice = other.modifiedByDevice
        share = other.share
    }

    /// Marks the record as just fetched from the server: its values become the ancestor and
    /// nothing counts as changed.
    func markFetchedFromServer(parent: Reference?) {
        lock.withLock {
            serverValues = values
            changed = []
            _parent = parent
            parentChanged = false
        }
    }

    /// After a record was rebuilt from a long-lived operation's journal: the keys and parent
    /// it had changed count as changed again, so its save sends what it would have sent.
    func restoreLocalState(parent: Reference?, changedKeys: [String], parentChanged: Bool) {
        markFetchedFromServer(parent: parent)
        lock.withLock {
            changed = changedKeys
            self.parentChanged = parentChanged
        }
    }

    /// The record as it was when it last came from the server: the ancestor of a three-way merge.
    func ancestor() -> CKRecord? {
        let (known, order, encrypted) = lock.withLock { (serverValues, keyOrder, encryptedKeys) }
        guard let known else { return nil }
        let ancestor = CKRecord(recordType: recordType, recordID: recordID)
        ancestor.values = known
        ancestor.encryptedKeys = encrypted.filter { known[$0] != nil }
        ancestor.keyOrder = order.filter { known[$0] != nil } + known.keys.filter { !order.contains($0) }.sorted()
        ancestor.serverValues = known
        ancestor.copySystemFields(from: self)
        return ancestor
    }

    /// Keys and values as one snapshot (nil for removed keys), each with whether it is encrypted.
    func snapshot(keys: [String]) -> [(key: String, value: (any CKRecordValue)?, encrypted: Bool)] {
        lock.withLock { keys.map { ($0, values[$0], encryptedKeys.contains($0)) } }
    }

    // MARK: NSSecureCoding

    public static var supportsSecureCoding: Bool { true }

    /// Encodes the system fields only (identity, type, change tag, dates): what an app keeps
    /// beside its own model to save changes later without a fetch first.
    public func encodeSystemFields(with coder: NSCoder) {
        coder.encode(recordType as NSString, forKey: "recordType")
        coder.encode(recordID, forKey: "recordID")
        if let recordChangeTag { coder.encode(recordChangeTag as NSString, forKey: "recordChangeTag") }
        if let creationDate { coder.encode(creationDate.timeIntervalSince1970, forKey: "creationDate") }
        if let modificationDate { coder.encode(modificationDate.timeIntervalSince1970, forKey: "modificationDate") }
        if let creatorUserRecordID { coder.encode(creatorUserRecordID, forKey: "creatorUserRecordID") }
        if let lastModifiedUserRecordID { coder.encode(lastModifiedUserRecordID, forKey: "lastModifiedUserRecordID") }
        if let parent { coder.encode(parent, forKey: "parent") }
    }

    /// Encodes the system fields and every field (as its wire JSON, which keeps the type).
    public func encode(with coder: NSCoder) {
        encodeSystemFields(with: coder)
        if let fields = try? WireRecordCoder.fieldsJSONText(of: self) {
            coder.encode(fields as NSString, forKey: "fields")
        }
        // Encrypted values are archived as they are held: in the clear, on this device only.
        let encrypted = keys(encrypted: true)
        if !encrypted.isEmpty { coder.encode(encrypted.joined(separator: "\n") as NSString, forKey: "encryptedKeys") }
    }

    public required init?(coder: NSCoder) {
        guard let type = coder.decodeIfPresent(NSString.self, forKey: "recordType"),
            let recordID = coder.decodeIfPresent(CKRecord.ID.self, forKey: "recordID")
        else { return nil }
        recordType = String(type)
        self.recordID = recordID
        super.init()
        recordChangeTag = coder.decodeIfPresent(NSString.self, forKey: "recordChangeTag").map(String.init)
        if coder.containsValue(forKey: "creationDate") {
            creationDate = Date(timeIntervalSince1970: coder.decodeDouble(forKey: "creationDate"))
        }
        if coder.containsValue(forKey: "modificationDate") {
            modificationDate = Date(timeIntervalSince1970: coder.decodeDouble(forKey: "modificationDate"))
        }
        creatorUserRecordID = coder.decodeIfPresent(CKRecord.ID.self, forKey: "creatorUserRecordID")
        lastModifiedUserRecordID = coder.decodeIfPresent(CKRecord.ID.self, forKey: "lastModifiedUserRecordID")
        let parent = coder.decodeIfPresent(Reference.self, forKey: "parent")
        if let text = coder.decodeIfPresent(NSString.self, forKey: "fields") {
            for (key, value) in (try? WireRecordCoder.fields(fromJSONText: String(text), zoneID: recordID.zoneID)) ?? [] {
                values[key] = value
                keyOrder.append(key)
            }
            if let encrypted = coder.decodeIfPresent(NSString.self, forKey: "encryptedKeys") {
                encryptedKeys = Set(String(encrypted).split(separator: "\n").map(String.init))
            }
        }
        // A record restored from its system fields is as the server last sent it.
        markFetchedFromServer(parent: parent)
    }
}
