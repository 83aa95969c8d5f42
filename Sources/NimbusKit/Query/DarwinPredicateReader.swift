import Foundation

// Apple platforms only: Foundation parses `NSPredicate(format:)` itself there, so NimbusKit reads
// the tree it built. Linux has no such tree (NimbusKit parses the format, PredicateParser.swift).
// scripts/apple-api-check.sh type-checks this file on Linux against Foundation's declarations
// as Apple has them (swift-corelibs-foundation marks these classes unavailable).
#if canImport(Darwin) || NIMBUS_APPLE_API_CHECK
#if !canImport(Darwin)
import class FoundationPredicates.NSComparisonPredicate
import class FoundationPredicates.NSExpression
#endif

/// Foundation parsed the format already: walk its comparison and compound predicates.
enum DarwinPredicateReader {
    static func node(of predicate: NSPredicate) throws(CKError) -> PredicateNode {
        if predicate.predicateFormat == "TRUEPREDICATE" { return .truePredicate }
        if predicate.predicateFormat == "FALSEPREDICATE" { return .falsePredicate }
        if let compound = predicate as? NSCompoundPredicate {
            var children: [PredicateNode] = []
            for case let child as NSPredicate in compound.subpredicates { children.append(try node(of: child)) }
            switch compound.compoundPredicateType {
            case .and: return .and(children)
            case .or: return .or(children)
            case .not: return .not(children.count == 1 ? children[0] : .and(children))
            @unknown default: break
            }
        }
        guard let comparison = predicate as? NSComparisonPredicate else {
            throw CKError(.invalidArguments, "unsupported predicate '\(predicate.predicateFormat)': CloudKit accepts comparisons joined by AND")
        }
        let modifier: PredicateComparison.Modifier
        switch comparison.comparisonPredicateModifier {
        case .any: modifier = .any
        case .all: modifier = .all
        default: modifier = .direct
        }
        let op: PredicateComparison.Operator
        switch comparison.predicateOperatorType {
        case .equalTo: op = .equal
        case .notEqualTo: op = .notEqual
        case .lessThan: op = .less
        case .lessThanOrEqualTo: op = .lessOrEqual
        case .greaterThan: op = .greater
        case .greaterThanOrEqualTo: op = .greaterOrEqual
        case .in: op = .in
        case .beginsWith: op = .beginsWith
        case .contains: op = .contains
        case .between: op = .between
        case .endsWith: op = .endsWith
        case .like: op = .like
        case .matches: op = .matches
        default: op = .unsupported
        }
        return .comparison(
            PredicateComparison(
                modifier: modifier, left: expression(comparison.leftExpression), op: op,
                right: expression(comparison.rightExpression), text: comparison.predicateFormat))
    }

    private static func expression(_ expression: NSExpression) -> PredicateExpression {
        switch expression.expressionType {
        case .keyPath: return .key(expression.keyPath)
        case .constantValue: return .constant(expression.constantValue as Any)
        case .evaluatedObject: return .evaluatedObject
        case .function:
            let name = expression.function.hasPrefix("tokenize") ? "tokenize" : expression.function
            return .function(name, (expression.arguments ?? []).map(Self.expression))
        case .aggregate:
            let members = (expression.collection as? [NSExpression]) ?? []
            return .aggregate(members.map(Self.expression))
        default: return .constant(expression.description)
        }
    }
}
#endif
