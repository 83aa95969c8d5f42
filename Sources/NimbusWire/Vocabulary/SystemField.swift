/// A record's system fields as the schema, the indexes and queries name them (`___createTime`),
/// with the name a query's `systemFieldName` and a sort's use on the wire (`createdTimestamp`).
/// The server's indexer and query reader and NimbusKit's predicate translator all read this
/// one table.
public enum SystemField: String, Sendable, CaseIterable {
    case recordID = "___recordID"
    case createTime = "___createTime"
    case modTime = "___modTime"
    case createdBy = "___createdBy"
    case modifiedBy = "___modifiedBy"

    /// Not a field of its own: every string field's tokens, for `CONTAINS_ALL_TOKENS` and
    /// `CONTAINS_ANY_TOKENS` (`allTokens` also reads as this).
    public static let allTokens = "___allTokens"

    /// The name on the wire, in a filter's or sort's `systemFieldName`.
    public var wireName: String {
        switch self {
        case .recordID: WireKey.recordName
        case .createTime: "createdTimestamp"
        case .modTime: "modifiedTimestamp"
        case .createdBy: "createdUserRecordName"
        case .modifiedBy: "modifiedUserRecordName"
        }
    }

    /// The field a `systemFieldName` names: its wire name or its schema name.
    public init?(wireName: String) {
        guard let field = Self.allCases.first(where: { $0.wireName == wireName || $0.rawValue == wireName }) else {
            return nil
        }
        self = field
    }
}
