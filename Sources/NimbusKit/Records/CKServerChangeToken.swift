import Foundation

/// An opaque position in a change feed (a database's zones or a zone's records). Keep the
/// latest one the server hands back, archived with `NSKeyedArchiver`, and send it next time
/// to get only what changed since.
public final class CKServerChangeToken: NSObject, NSSecureCoding, NSCopying, @unchecked Sendable {
    /// The server's `syncToken`.
    let syncToken: String

    init(syncToken: String) { self.syncToken = syncToken }

    public override func isEqual(_ object: Any?) -> Bool { (object as? CKServerChangeToken)?.syncToken == syncToken }
    public override var hash: Int { syncToken.hashValue }
    public override var description: String { "<CKServerChangeToken: \(syncToken.prefix(12))…>" }
    public func copy(with zone: NSZone? = nil) -> Any { self }

    public static var supportsSecureCoding: Bool { true }
    public func encode(with coder: NSCoder) { coder.encode(syncToken as NSString, forKey: "syncToken") }
    public init?(coder: NSCoder) {
        guard let token = coder.decodeIfPresent(NSString.self, forKey: "syncToken") else { return nil }
        syncToken = String(token)
    }
}

extension NSCoder {
    /// An optional object: swift-corelibs-foundation treats decoding a missing key as a fatal
    /// decoding error, so check for the key first.
    func decodeIfPresent<Object: NSObject & NSCoding>(_ type: Object.Type, forKey key: String) -> Object? {
        containsValue(forKey: key) ? decodeObject(of: type, forKey: key) : nil
    }
}
