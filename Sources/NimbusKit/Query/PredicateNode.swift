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
