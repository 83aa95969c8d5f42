import Foundation

// swift-corelibs-foundation marks `NSPredicate(format:)` and `NSSortDescriptor(key:ascending:)`
// unavailable (it has no key-value coding). On Linux NimbusKit declares its own classes of the
// same names: a client that imports Foundation and NimbusKit gets these (a module's own
// declarations shadow those of modules it imports), so CloudKit code compiles unchanged.
// On Apple platforms Foundation's classes are used and read through their expression trees.
#if !canImport(Darwin)
/// A predicate in CloudKit's subset of the `NSPredicate` format language. It keeps the format
/// and its arguments; NimbusKit parses them when a query runs, and anything outside the subset
/// fails that query with `CKError.invalidArguments` naming the part it could not use.
open class NSPredicate: NSObject, @unchecked Sendable {
    public let format: String
    public let arguments: [Any]

    public init(format: String, argumentArray: [Any]?) {
        self.format = format
        arguments = argumentArray ?? []
    }

    public convenience init(format: String, _ args: Any...) {
        self.init(format: format, argumentArray: args)
    }

    /// `TRUEPREDICATE` (every record) or `FALSEPREDICATE`.
    public convenience init(value: Bool) {
        self.init(format: value ? "TRUEPREDICATE" : "FALSEPREDICATE", argumentArray: [])
    }

    public var predicateFormat: String { format }
    open override var description: String { format }
}

/// A sort key and direction, as Foundation's class of the same name.
open class NSSortDescriptor: NSObject, @unchecked Sendable {
    public let key: String?
    public let ascending: Bool

    public init(key: String?, ascending: Bool) {
        self.key = key
        self.ascending = ascending
    }
}
#endif

/// Sorts records by distance from a location, nearest first when ascending.
public final class CKLocationSortDescriptor: NSSortDescriptor, @unchecked Sendable {
    public let relativeLocation: CLLocation

    public init(key: String, relativeLocation: CLLocation) {
        self.relativeLocation = relativeLocation
        super.init(key: key, ascending: true)
    }

    #if canImport(Darwin)
    public required init?(coder: NSCoder) { nil }
    #endif
}
