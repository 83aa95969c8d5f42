import Foundation

/// Reading and writing a record's fields by key: what `CKRecord` itself and its
/// `encryptedValues` both offer, as in CloudKit. Class-bound, so
/// `record.encryptedValues["phone"] = "…"` sets the value on the record.
public protocol CKRecordKeyValueSetting: AnyObject {
    subscript(key: String) -> (any CKRecordValue)? { get set }
    func object(forKey key: String) -> (any CKRecordValue)?
    func setObject(_ object: (any CKRecordValue)?, forKey key: String)
    func allKeys() -> [String]
    func changedKeys() -> [String]
}

extension CKRecordKeyValueSetting {
    /// The value as the type asked for (`let phone: String? = record.encryptedValues["phone"]`);
    /// nil when absent or of another type.
    public subscript<T: CKRecordValue>(key: String) -> T? {
        get {
            let value = object(forKey: key)
            if let number = value as? NSNumber { return RecordValueNormalizer.number(number, as: T.self) }
            return value as? T
        }
        set { setObject(newValue, forKey: key) }
    }
}

/// A record's encrypted fields: the same record, seen through the keys it encrypts.
final class EncryptedValues: CKRecordKeyValueSetting {
    private let record: CKRecord

    init(record: CKRecord) { self.record = record }

    subscript(key: String) -> (any CKRecordValue)? {
        get { object(forKey: key) }
        set { setObject(newValue, forKey: key) }
    }

    func object(forKey key: String) -> (any CKRecordValue)? { record.object(forKey: key, encrypted: true) }
    func setObject(_ object: (any CKRecordValue)?, forKey key: String) { record.setObject(object, forKey: key, encrypted: true) }
    func allKeys() -> [String] { record.keys(encrypted: true) }
    func changedKeys() -> [String] { record.changedKeys().filter { record.isEncrypted($0) } }
}
