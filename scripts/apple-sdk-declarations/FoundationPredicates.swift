// Declarations of Foundation's predicate tree as Apple platforms have it (NSComparisonPredicate,
// NSExpression), written from Apple's documentation. swift-corelibs-foundation marks these
// unavailable, so NimbusKit's reader of Foundation-parsed predicates
// (Sources/NimbusKit/Query/DarwinPredicateReader.swift) imports these by name when
// scripts/apple-api-check.sh type-checks it on Linux. Never linked, never run.
import Foundation

open class NSExpression: NSObject, NSCopying, NSSecureCoding {
    public enum ExpressionType: UInt, Sendable {
        case constantValue = 0, evaluatedObject, variable, keyPath, function, unionSet, intersectSet, minusSet
        case subquery = 13, aggregate, anyKey = 15, block = 19, conditional = 20
    }

    public init(expressionType type: NSExpression.ExpressionType) { fatalError() }
    public init(format expressionFormat: String, argumentArray arguments: [Any]) { fatalError() }
    public init(forConstantValue obj: Any?) { fatalError() }
    public init(forKeyPath keyPath: String) { fatalError() }
    public required init?(coder: NSCoder) { fatalError() }

    open var expressionType: NSExpression.ExpressionType { fatalError() }
    open var constantValue: Any? { fatalError() }
    open var keyPath: String { fatalError() }
    open var function: String { fatalError() }
    open var variable: String { fatalError() }
    open var operand: NSExpression { fatalError() }
    open var arguments: [NSExpression]? { fatalError() }
    open var collection: Any { fatalError() }
    open var predicate: NSPredicate { fatalError() }
    open var left: NSExpression { fatalError() }
    open var right: NSExpression { fatalError() }

    public func copy(with zone: NSZone? = nil) -> Any { fatalError() }
    public static var supportsSecureCoding: Bool { true }
    public func encode(with coder: NSCoder) { fatalError() }
}

open class NSComparisonPredicate: NSPredicate {
    public enum Modifier: UInt, Sendable {
        case direct = 0, all, any
    }

    public enum Operator: UInt, Sendable {
        case lessThan = 0, lessThanOrEqualTo, greaterThan, greaterThanOrEqualTo, equalTo, notEqualTo
        case matches, like, beginsWith, endsWith, `in`, customSelector
        case contains = 99, between
    }

    public struct Options: OptionSet, Sendable {
        public let rawValue: UInt
        public init(rawValue: UInt) { self.rawValue = rawValue }
        public static let caseInsensitive = Options(rawValue: 1)
        public static let diacriticInsensitive = Options(rawValue: 2)
        public static let normalized = Options(rawValue: 4)
    }

    public init(
        leftExpression lhs: NSExpression, rightExpression rhs: NSExpression, modifier: NSComparisonPredicate.Modifier,
        type: NSComparisonPredicate.Operator, options: NSComparisonPredicate.Options = []
    ) { fatalError() }
    public required init?(coder: NSCoder) { fatalError() }

    open var predicateOperatorType: NSComparisonPredicate.Operator { fatalError() }
    open var comparisonPredicateModifier: NSComparisonPredicate.Modifier { fatalError() }
    open var leftExpression: NSExpression { fatalError() }
    open var rightExpression: NSExpression { fatalError() }
    open var options: NSComparisonPredicate.Options { fatalError() }
}
