import Foundation

/// Geodesy shared by the drivers' NEAR and the in-memory evaluation below.
public enum Geodesy {
    /// The great-circle distance in meters between two points (haversine, mean Earth radius).
    public static func greatCircleMeters(_ lat1: Double, _ lon1: Double, _ lat2: Double, _ lon2: Double) -> Double {
        let radians = Double.pi / 180
        let dLat = (lat2 - lat1) * radians
        let dLon = (lon2 - lon1) * radians
        let a = sin(dLat / 2) * sin(dLat / 2) + cos(lat1 * radians) * cos(lat2 * radians) * sin(dLon / 2) * sin(dLon / 2)
        return 6_371_008.8 * 2 * atan2(a.squareRoot(), (1 - a).squareRoot())
    }
}

/// One value of a field as a condition reads it: what an index entry would hold (a location's
/// latitude as the value, with its longitude).
public struct ConditionValue: Sendable {
    public var value: IndexValue
    public var longitude: Double?

    public init(_ value: IndexValue, longitude: Double? = nil) {
        self.value = value
        self.longitude = longitude
    }
}

/// A record as conditions read it, field by field, however its holder keeps it: NimbusCore
/// reads a record's typed fields (`QueriedRecord`), with no index layout in between.
public protocol ConditionSubject {
    /// Whether some value of `field` in `scope` passes `test`: its scalar (`.scalar`) or an
    /// element of its list (`.element`); false when the record has no such value. (A test, not
    /// a list of values: matching asks this for every candidate filter, and a list per question
    /// was an allocation per question.)
    func anyValue(of field: String, in scope: IndexScope, where test: (ConditionValue) -> Bool) -> Bool
    /// The search tokens of `field`, or of every text field when nil.
    func tokens(of field: String?) -> Set<String>
}

extension IndexCondition {
    /// Whether `record` meets the condition: the same answer a driver's query gives, computed
    /// in memory (subscription matching evaluates a record before and after a change without
    /// asking storage).
    public func matches(_ record: some ConditionSubject) -> Bool {
        switch self {
        case .not(let inner):
            return !inner.matches(record)
        case .compare(let field, let scope, let comparison, let value):
            return record.anyValue(of: field, in: scope) { $0.longitude == nil && Self.compare($0.value, comparison, value) }
        case .oneOf(let field, let scope, let values):
            return record.anyValue(of: field, in: scope) { values.contains($0.value) }
        case .allOf(let field, let values):
            return values.allSatisfy { value in record.anyValue(of: field, in: .element) { $0.value == value } }
        case .beginsWith(let field, let scope, let prefix):
            return record.anyValue(of: field, in: scope) { item in
                guard case .text(let text) = item.value else { return false }
                return text.utf8.starts(with: prefix.utf8)
            }
        case .tokens(let field, let wanted, let all):
            let present = record.tokens(of: field)
            return all ? wanted.allSatisfy(present.contains) : wanted.contains(where: present.contains)
        case .near(let field, let latitude, let longitude, let meters):
            return record.anyValue(of: field, in: .scalar) { item in
                guard let lon = item.longitude, case .number(let lat) = item.value else { return false }
                return Geodesy.greatCircleMeters(lat, lon, latitude, longitude) <= meters
            }
        }
    }

    /// Numbers with numbers, texts with texts (byte order, as SQLite's BINARY collation).
    private static func compare(_ left: IndexValue, _ comparison: IndexComparison, _ right: IndexValue) -> Bool {
        let order: Int
        switch (left, right) {
        case (.text(let a), .text(let b)):
            order = a == b ? 0 : (a.utf8.lexicographicallyPrecedes(b.utf8) ? -1 : 1)
        default:
            guard let numeric = IndexValue.numericOrder(left, right) else { return false }
            order = numeric
        }
        switch comparison {
        case .equal: return order == 0
        case .less: return order < 0
        case .lessOrEqual: return order <= 0
        case .greater: return order > 0
        case .greaterOrEqual: return order >= 0
        }
    }
}
