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

extension IndexCondition {
    /// Whether a record with these index and token entries meets the condition: the same
    /// answer a driver's query gives, computed in memory (subscription matching evaluates a
    /// record before and after a change without asking storage).
    public func matches(entries: [IndexEntry], tokens: [TokenEntry]) -> Bool {
        switch self {
        case .not(let inner):
            return !inner.matches(entries: entries, tokens: tokens)
        case .compare(let field, let scope, let comparison, let value):
            return entries.contains { $0.isIn(field, scope) && $0.longitude == nil && Self.compare($0.value, comparison, value) }
        case .oneOf(let field, let scope, let values):
            return entries.contains { entry in entry.isIn(field, scope) && values.contains(entry.value) }
        case .allOf(let field, let values):
            return values.allSatisfy { value in entries.contains { $0.isIn(field, .element) && $0.value == value } }
        case .beginsWith(let field, let scope, let prefix):
            return entries.contains { entry in
                guard entry.isIn(field, scope), case .text(let text) = entry.value else { return false }
                return text.utf8.starts(with: prefix.utf8)
            }
        case .tokens(let field, let wanted, let all):
            let present = Set(tokens.lazy.filter { field == nil || $0.field == field }.map(\.token))
            return all ? wanted.allSatisfy(present.contains) : wanted.contains(where: present.contains)
        case .near(let field, let latitude, let longitude, let meters):
            return entries.contains { entry in
                guard entry.isIn(field, .scalar), let lon = entry.longitude, case .number(let lat) = entry.value else { return false }
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

extension IndexEntry {
    fileprivate func isIn(_ field: String, _ scope: IndexScope) -> Bool {
        self.field == field && (scope == .scalar ? position == -1 : position >= 0)
    }
}
