import Foundation
import NimbusWire

/// Turns a predicate tree into `records/query` filters (reference §4.1), accepting exactly
/// CloudKit's subset: comparisons joined by AND, with NOT only where a negated comparator
/// exists. Anything else is `invalidArguments` naming the part that cannot be used.
struct PredicateTranslator {
    /// The signed-in user's record name, for `creatorUserRecordID == %@` with the current user.
    var currentUser: String?

    func filters(for node: PredicateNode) throws(CKError) -> [QueryFilterInput] {
        switch node {
        case .truePredicate:
            return []
        case .falsePredicate:
            throw CKError(.invalidArguments, "FALSEPREDICATE is not supported in CloudKit queries; use TRUEPREDICATE or a comparison")
        case .and(let children):
            var result: [QueryFilterInput] = []
            for child in children { result += try filters(for: child) }
            return result
        case .or:
            throw CKError(.invalidArguments, "OR is not supported in CloudKit queries; run one query per alternative, or use IN with a list of values")
        case .not(let child):
            guard case .comparison(let comparison) = child else {
                throw CKError(.invalidArguments, "NOT applies only to a single comparison in CloudKit queries")
            }
            let positive = try filters(for: comparison)
            guard positive.count == 1, let negated = positive[0].comparator.negation else {
                throw CKError(.invalidArguments, "'NOT \(comparison.text)' is not supported: CloudKit has no negation of that comparison")
            }
            var filter = positive[0]
            filter.comparator = negated
            return [filter]
        case .comparison(let comparison):
            return try filters(for: comparison)
        }
    }

    private static let comparators: [PredicateComparison.Operator: QueryComparator] = [
        .equal: .equals, .notEqual: .notEquals, .less: .lessThan, .lessOrEqual: .lessThanOrEquals,
        .greater: .greaterThan, .greaterOrEqual: .greaterThanOrEquals,
    ]

    private func filters(for comparison: PredicateComparison) throws(CKError) -> [QueryFilterInput] {
        let unsupported = CKError(
            .invalidArguments,
            "'\(comparison.text)' is not supported in CloudKit queries; use key <op> value with ==, !=, <, <=, >, >=, IN, BEGINSWITH, CONTAINS, BETWEEN, distanceToLocation:fromLocation: or tokenize")
        switch (comparison.left, comparison.op, comparison.right) {
        // distanceToLocation:fromLocation:(key, location) < radius
        case (.function(let name, let arguments), let op, .constant(let radius)) where name.hasPrefix("distanceToLocation"):
            guard op == .less || op == .lessOrEqual, arguments.count == 2, case .key(let key) = arguments[0],
                case .constant(let center) = arguments[1], let location = center as? CLLocation,
                let meters = (radius as? NSNumber)?.doubleValue
            else { throw unsupported }
            let value = try WireRecordCoder.fieldValue(location, key: key)
            return [filter(.near, key: key, value: value.rawField, distance: meters)]

        // ALL/ANY tokenize(text, 'Cdl') IN allTokens (or a string field)
        case (.function(let name, let arguments), .in, .key(let key)) where name == "tokenize":
            guard comparison.modifier != .direct, let first = arguments.first, case .constant(let text) = first,
                let string = text as? String
            else { throw unsupported }
            let comparator: QueryComparator = comparison.modifier == .all ? .containsAllTokens : .containsAnyTokens
            return [filter(comparator, key: key, value: FieldValue.string(string).rawField)]

        // self CONTAINS 'text': every token, in any string field
        case (.evaluatedObject, .contains, .constant(let text)):
            guard let string = text as? String else { throw unsupported }
            return [filter(.containsAllTokens, key: SystemField.allTokens, value: FieldValue.string(string).rawField)]

        // value IN listField
        case (.constant(let value), .in, .key(let key)):
            return [filter(.listContains, key: key, value: try scalarJSON(value, key: key))]

        // value <op> key: swap sides
        case (.constant, let op, .key):
            guard let flipped = op.flipped else { throw unsupported }
            var swapped = comparison
            swapped.left = comparison.right
            swapped.right = comparison.left
            swapped.op = flipped
            return try filters(for: swapped)

        case (.key(let key), let op, .constant(let value)):
            return try keyFilters(key: key, op: op, value: value, modifier: comparison.modifier, unsupported: unsupported)
        case (.key(let key), let op, .aggregate(let members)):
            var values: [Any] = []
            for member in members {
                guard case .constant(let value) = member else { throw unsupported }
                values.append(value)
            }
            return try keyFilters(key: key, op: op, value: values, modifier: comparison.modifier, unsupported: unsupported)
        default:
            throw unsupported
        }
    }

    private func keyFilters(
        key: String, op: PredicateComparison.Operator, value: Any, modifier: PredicateComparison.Modifier,
        unsupported: CKError
    ) throws(CKError) -> [QueryFilterInput] {
        switch (modifier, op) {
        case (.direct, .equal), (.direct, .notEqual), (.direct, .less), (.direct, .lessOrEqual), (.direct, .greater),
            (.direct, .greaterOrEqual):
            return [filter(Self.comparators[op]!, key: key, value: try scalarJSON(value, key: key))]
        case (.direct, .in):
            return [filter(.in, key: key, value: try listJSON(value, key: key, unsupported: unsupported))]
        case (.direct, .beginsWith):
            return [filter(.beginsWith, key: key, value: try scalarJSON(value, key: key))]
        case (.direct, .contains), (.any, .equal):
            return [filter(.listContains, key: key, value: try scalarJSON(value, key: key))]
        case (.any, .in):
            return [filter(.listContainsAny, key: key, value: try listJSON(value, key: key, unsupported: unsupported))]
        case (.any, .beginsWith):
            return [filter(.listMemberBeginsWith, key: key, value: try scalarJSON(value, key: key))]
        case (.direct, .between):
            guard let bounds = value as? [Any], bounds.count == 2 else {
                throw CKError(.invalidArguments, "BETWEEN on '\(key)' needs two bounds, as in {low, high}")
            }
            return [
                filter(.greaterThanOrEquals, key: key, value: try scalarJSON(bounds[0], key: key)),
                filter(.lessThanOrEquals, key: key, value: try scalarJSON(bounds[1], key: key)),
            ]
        default:
            throw unsupported
        }
    }

    // MARK: Keys and values

    /// System keys as CloudKit apps write them (`CKRecord`'s property names).
    static let systemKeys: [String: SystemField] = [
        "recordID": .recordID, "creationDate": .createTime, "modificationDate": .modTime,
        "creatorUserRecordID": .createdBy, "lastModifiedUserRecordID": .modifiedBy,
    ]

    /// A filter on a key as apps write it: a `CKRecord` system property, `allTokens` (every
    /// string field's tokens), or a field.
    private func filter(_ comparator: QueryComparator, key: String, value: RawField, distance: Double? = nil) -> QueryFilterInput {
        let fieldName = Self.systemKeys[key]?.rawValue ?? (key == "allTokens" || key == SystemField.allTokens ? nil : key)
        return QueryFilterInput(comparator: comparator, fieldName: fieldName, field: value, distance: distance)
    }

    private func scalarJSON(_ value: Any, key: String) throws(CKError) -> RawField {
        try fieldValue(value, key: key).rawField
    }

    private func listJSON(_ value: Any, key: String, unsupported: CKError) throws(CKError) -> RawField {
        guard let values = value as? [Any] else {
            throw CKError(.invalidArguments, "IN on '\(key)' needs a list of values, not \(type(of: value))")
        }
        let elements = try values.map { element throws(CKError) in try fieldValue(element, key: key) }
        guard let scalar = elements.first?.type.scalar else {
            throw CKError(.invalidArguments, "IN on '\(key)' needs at least one value")
        }
        return FieldValue.list(scalar, elements).rawField
    }

    /// A predicate argument as a field value: record values as saved, and records or record
    /// IDs as references to them (the seeds' `owner == %@` with a record).
    private func fieldValue(_ value: Any, key: String) throws(CKError) -> FieldValue {
        switch value {
        case let record as CKRecord:
            return try WireRecordCoder.fieldValue(CKRecord.Reference(record: record, action: .none), key: key)
        case let recordID as CKRecord.ID:
            let named =
                recordID.recordName == CKCurrentUserDefaultName && currentUser != nil
                ? CKRecord.ID(recordName: currentUser!, zoneID: recordID.zoneID) : recordID
            return try WireRecordCoder.fieldValue(CKRecord.Reference(recordID: named, action: .none), key: key)
        case let recordValue as any CKRecordValue:
            return try WireRecordCoder.fieldValue(RecordValueNormalizer.normalize(recordValue), key: key)
        default:
            throw CKError(.invalidArguments, "'\(key)' is compared with a \(type(of: value)), which is not a CloudKit value")
        }
    }
}

/// Sort descriptors as the wire's `sortBy` entries.
enum SortTranslator {
    static func sort(_ descriptor: NSSortDescriptor) throws(CKError) -> QuerySortInput {
        guard let key = descriptor.nimbusKey, !key.isEmpty else {
            throw CKError(.invalidArguments, "a sort descriptor needs a key; CloudKit sorts by record fields only")
        }
        var location: Location?
        if let sortLocation = descriptor as? CKLocationSortDescriptor,
            case .location(let wire) = try WireRecordCoder.fieldValue(sortLocation.relativeLocation, key: key)
        {
            location = wire
        }
        return QuerySortInput(
            fieldName: PredicateTranslator.systemKeys[key]?.rawValue ?? key, ascending: descriptor.ascending,
            relativeLocation: location)
    }
}
