import Foundation

/// A predicate as a tree, whichever way it was written: parsed from a format string (Linux) or
/// read from Foundation's `NSPredicate` objects (Apple platforms). `PredicateTranslator` turns
/// it into the wire's filters.
indirect enum PredicateNode {
    case truePredicate
    case falsePredicate
    case and([PredicateNode])
    case or([PredicateNode])
    case not(PredicateNode)
    case comparison(PredicateComparison)
}

struct PredicateComparison {
    enum Modifier { case direct, any, all }

    enum Operator: String {
        case equal = "==", notEqual = "!=", less = "<", lessOrEqual = "<=", greater = ">", greaterOrEqual = ">="
        case `in` = "IN", beginsWith = "BEGINSWITH", contains = "CONTAINS", between = "BETWEEN"
        case endsWith = "ENDSWITH", like = "LIKE", matches = "MATCHES", unsupported = "?"

        /// The operator with its sides swapped (`5 < x` is `x > 5`).
        var flipped: Operator? {
            switch self {
            case .equal, .notEqual: return self
            case .less: return .greater
            case .lessOrEqual: return .greaterOrEqual
            case .greater: return .less
            case .greaterOrEqual: return .lessOrEqual
            default: return nil
            }
        }
    }

    var modifier: Modifier
    var left: PredicateExpression
    var op: Operator
    var right: PredicateExpression
    /// The comparison as written, for error messages.
    var text: String
}

indirect enum PredicateExpression {
    case key(String)
    case constant(Any)
    case evaluatedObject
    case function(String, [PredicateExpression])
    case aggregate([PredicateExpression])
}

/// Reads an `NSPredicate` into a `PredicateNode`.
enum PredicateReader {
    static func node(of predicate: NSPredicate) throws(CKError) -> PredicateNode {
        #if canImport(Darwin)
        return try DarwinPredicateReader.node(of: predicate)
        #else
        guard let (format, arguments) = predicate.nimbusFormat else {
            throw CKError(
                .invalidArguments,
                "this NSPredicate was not made from a format string (a block predicate?); CloudKit queries need NSPredicate(format:)")
        }
        var parser = PredicateParser(format: format, arguments: arguments)
        return try parser.parse()
        #endif
    }
}

#if canImport(Darwin)
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
