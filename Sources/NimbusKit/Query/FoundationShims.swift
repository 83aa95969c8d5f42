import Foundation

// swift-corelibs-foundation marks `NSPredicate(format:)` and `NSSortDescriptor(key:ascending:)`
// unavailable (it has no key-value coding). On Linux NimbusKit adds available initialisers of
// the same shape to Foundation's own classes (Swift prefers an available overload to an
// unavailable one), so CloudKit code compiles unchanged and the types are Foundation's: no
// clash for a client that imports both. What the initialisers were given is kept in a side
// table the query reads. On Apple platforms Foundation parses formats itself and NimbusKit
// reads its expression trees instead.
#if !canImport(Darwin)
extension NSPredicate {
    /// A predicate in CloudKit's subset of the format language. NimbusKit parses it when a
    /// query runs; anything outside the subset fails that query with `invalidArguments`.
    public convenience init(format: String, _ args: Any...) {
        self.init(format: format, argumentArray: args)
    }

    public convenience init(format: String, argumentArray: [Any]?) {
        // Foundation cannot evaluate it here; CloudKit never evaluates predicates locally either.
        self.init(block: { _, _ in false })
        FormatRegistry.shared.remember(self, format: format, arguments: argumentArray ?? [])
    }
}

extension NSSortDescriptor {
    public convenience init(key: String?, ascending: Bool) {
        self.init(keyPath: \NSObject.hash, ascending: ascending)
        FormatRegistry.shared.remember(self, format: key ?? "", arguments: [])
    }
}

/// What NimbusKit's initialisers were given, by object, for as long as the object lives.
final class FormatRegistry: @unchecked Sendable {
    static let shared = FormatRegistry()

    private final class Entry {
        weak var object: NSObject?
        let format: String
        let arguments: [Any]
        init(_ object: NSObject, format: String, arguments: [Any]) {
            self.object = object
            self.format = format
            self.arguments = arguments
        }
    }

    private let lock = NSLock()
    private var entries: [ObjectIdentifier: Entry] = [:]
    private var pruneAt = 1024

    func remember(_ object: NSObject, format: String, arguments: [Any]) {
        lock.withLock {
            entries[ObjectIdentifier(object)] = Entry(object, format: format, arguments: arguments)
            if entries.count >= pruneAt {
                // Drop entries of objects that are gone, so the table tracks live objects only.
                entries = entries.filter { $0.value.object != nil }
                pruneAt = max(1024, entries.count * 2)
            }
        }
    }

    /// The format and arguments of a live object; the identity check ignores a stale entry
    /// whose object died and whose address a new object reuses.
    func lookup(_ object: NSObject) -> (format: String, arguments: [Any])? {
        lock.withLock {
            guard let entry = entries[ObjectIdentifier(object)], entry.object === object else { return nil }
            return (entry.format, entry.arguments)
        }
    }
}

/// Reads `predicateFormat` (deprecated on Linux, where it only tells TRUEPREDICATE,
/// FALSEPREDICATE and BLOCKPREDICATE apart) without a deprecation warning at each use.
private protocol PredicateFormatReadable {
    var predicateFormat: String { get }
}
extension NSPredicate: PredicateFormatReadable {}

extension NSPredicate {
    /// The format and arguments this predicate was made from.
    var nimbusFormat: (format: String, arguments: [Any])? {
        if let known = FormatRegistry.shared.lookup(self) { return known }
        let format = (self as any PredicateFormatReadable).predicateFormat
        return format == "TRUEPREDICATE" || format == "FALSEPREDICATE" ? (format, []) : nil
    }
}
#endif

extension NSSortDescriptor {
    /// The key sorted by, on every platform.
    var nimbusKey: String? {
        if let location = self as? CKLocationSortDescriptor { return location.locationKey }
        #if canImport(Darwin)
        return key
        #else
        return FormatRegistry.shared.lookup(self)?.format
        #endif
    }
}

/// Sorts records by distance from a location, nearest first when ascending.
public final class CKLocationSortDescriptor: NSSortDescriptor {
    public let relativeLocation: CLLocation
    let locationKey: String

    public init(key: String, relativeLocation: CLLocation) {
        self.relativeLocation = relativeLocation
        locationKey = key
        #if canImport(Darwin)
        super.init(key: key, ascending: true)
        #else
        super.init(keyPath: \NSObject.hash, ascending: true)
        #endif
    }

    #if canImport(Darwin)
    public required init?(coder: NSCoder) { nil }
    #endif
}
