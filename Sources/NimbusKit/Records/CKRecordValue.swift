import Foundation

/// A value a record field can hold: strings, numbers, dates, data, references, assets,
/// locations, and arrays of one of those. Conforming another type compiles, but saving a
/// record holding it fails with `invalidArguments`, as CloudKit refuses unsupported values.
public protocol CKRecordValue {}

/// Today's name of the same protocol in CloudKit's Swift API.
public typealias CKRecordValueProtocol = CKRecordValue

extension String: CKRecordValue {}
extension NSString: CKRecordValue {}
extension Int: CKRecordValue {}
extension Int8: CKRecordValue {}
extension Int16: CKRecordValue {}
extension Int32: CKRecordValue {}
extension Int64: CKRecordValue {}
extension UInt: CKRecordValue {}
extension UInt8: CKRecordValue {}
extension UInt16: CKRecordValue {}
extension UInt32: CKRecordValue {}
extension UInt64: CKRecordValue {}
extension Double: CKRecordValue {}
extension Float: CKRecordValue {}
extension Bool: CKRecordValue {}
extension NSNumber: CKRecordValue {}
extension Date: CKRecordValue {}
extension NSDate: CKRecordValue {}
extension Data: CKRecordValue {}
extension NSData: CKRecordValue {}
extension CLLocation: CKRecordValue {}
extension Array: CKRecordValue where Element: CKRecordValue {}
extension NSArray: CKRecordValue {}

/// Values as CloudKit hands them back: numbers as `NSNumber` (so `as? Int`, `as? Double`
/// and `as? Int64` all work), `NSString`s as `String`, `NSDate` as `Date`, `NSData` as `Data`,
/// lists as typed arrays (`[String]`, `[NSNumber]`, `[CKRecord.Reference]`, …).
enum RecordValueNormalizer {
    static func normalize(_ value: any CKRecordValue) -> any CKRecordValue {
        switch value {
        case let bool as Bool where type(of: value) == Bool.self: return NSNumber(value: bool)
        case let number as any BinaryInteger where !(value is NSNumber): return NSNumber(value: Int64(truncatingIfNeeded: number))
        case let number as Double where type(of: value) == Double.self: return NSNumber(value: number)
        case let number as Float where type(of: value) == Float.self: return NSNumber(value: Double(number))
        case let string as NSString where type(of: value) != String.self: return String(string)
        case let date as NSDate where type(of: value) != Date.self: return date as Date
        case let data as NSData where type(of: value) != Data.self: return data as Data
        case let list as [any CKRecordValue]: return normalizeList(list)
        default: return value
        }
    }

    /// A stored number as the numeric type asked for, when it is exactly that (as bridging
    /// `NSNumber` does on Apple platforms; Linux's dynamic cast misses some, such as an
    /// integer read as `Double`).
    static func number<T>(_ number: NSNumber, as type: T.Type) -> T? {
        switch type {
        case is Int.Type: return Int(exactly: number) as? T
        case is Int64.Type: return Int64(exactly: number) as? T
        case is Int32.Type: return Int32(exactly: number) as? T
        case is Int16.Type: return Int16(exactly: number) as? T
        case is Int8.Type: return Int8(exactly: number) as? T
        case is UInt.Type: return UInt(exactly: number) as? T
        case is UInt64.Type: return UInt64(exactly: number) as? T
        case is UInt32.Type: return UInt32(exactly: number) as? T
        case is UInt16.Type: return UInt16(exactly: number) as? T
        case is UInt8.Type: return UInt8(exactly: number) as? T
        case is Double.Type: return Double(exactly: number) as? T
        case is Float.Type: return Float(exactly: number) as? T
        case is Bool.Type: return Bool(exactly: number) as? T
        default: return number as? T
        }
    }

    static func normalizeList(_ elements: [any CKRecordValue]) -> any CKRecordValue {
        let normalized = elements.map(normalize)
        func all<T>(_ type: T.Type) -> [T]? {
            let typed = normalized.compactMap { $0 as? T }
            return typed.count == normalized.count ? typed : nil
        }
        if let list = all(String.self) { return list }
        if let list = all(NSNumber.self) { return list }
        if let list = all(Date.self) { return list }
        if let list = all(Data.self) { return list }
        if let list = all(CKRecord.Reference.self) { return list }
        if let list = all(CLLocation.self) { return list }
        if let list = all(CKAsset.self) { return list }
        // Mixed elements: kept as given, and refused when saved.
        return NSArray(array: normalized)
    }
}
