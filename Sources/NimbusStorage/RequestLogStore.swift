/// The request log that lasts (docs/operations.md, "Logs that last"): every answered request,
/// written in batches a second apart, kept for `Limits.requestLogDays` and at most
/// `Limits.requestLogEntries`, read by the dashboard and exported as JSON lines. On PostgreSQL
/// it is one table every node writes and reads; on SQLite a file of its own beside the store,
/// so logging never takes the data's write lock.
public protocol RequestLogStore: Sendable {
    func appendRequests(_ rows: [StoredRequest]) async throws
    /// The newest first that `search` accepts, at most `search.limit`.
    func requests(_ search: RequestSearch) async throws -> [StoredRequest]
    /// Removes entries older than `time` (milliseconds since 1970), then the oldest past
    /// `keepingAtMost`; returns how many went.
    func pruneRequests(before time: Int64, keepingAtMost rows: Int) async throws -> Int
}

/// A driver with a lasting request log.
public protocol RequestLogStoring: Sendable {
    var requestLog: (any RequestLogStore)? { get }
}

/// A unit-of-work driver logs where its engine logs.
extension UnitOfWorkDriver: RequestLogStoring {
    public var requestLog: (any RequestLogStore)? { (base as? any RequestLogStoring)?.requestLog }
}

/// One answered request.
public struct StoredRequest: Sendable, Hashable {
    /// Its place in the log (newer is larger); 0 before it is stored.
    public var id: Int64
    /// Milliseconds since 1970.
    public var at: Int64
    /// The node that answered (its host name).
    public var node: String
    public var requestUUID: String
    public var method: String
    public var route: String
    public var container: String?
    public var environment: String?
    public var database: String?
    public var userRecordName: String?
    public var userName: String?
    public var status: Int
    public var serverErrorCode: String?
    /// Errors of single items inside a 200.
    public var itemErrorCodes: [String]
    public var milliseconds: Double

    public init(
        id: Int64 = 0, at: Int64, node: String, requestUUID: String, method: String, route: String, container: String?,
        environment: String?, database: String?, userRecordName: String?, userName: String?, status: Int,
        serverErrorCode: String?, itemErrorCodes: [String], milliseconds: Double
    ) {
        self.id = id
        self.at = at
        self.node = node
        self.requestUUID = requestUUID
        self.method = method
        self.route = route
        self.container = container
        self.environment = environment
        self.database = database
        self.userRecordName = userRecordName
        self.userName = userName
        self.status = status
        self.serverErrorCode = serverErrorCode
        self.itemErrorCodes = itemErrorCodes
        self.milliseconds = milliseconds
    }
}

/// What to find in the request log; every field given must match.
public struct RequestSearch: Sendable, Hashable {
    /// The containers the reader may see; nil: all (requests naming no container included).
    public var visibleContainers: Set<String>?
    public var container: String?
    public var environment: String?
    public var database: String?
    /// A user's name or record name.
    public var user: String?
    /// A part of the route.
    public var route: String?
    /// A `serverErrorCode`, of the request or of one of its items.
    public var error: String?
    /// Only entries at or after this moment (milliseconds since 1970).
    public var since: Int64?
    /// Only entries before this one (`StoredRequest.id`): the next page.
    public var beforeID: Int64?
    public var limit: Int

    public init(limit: Int) { self.limit = limit }
}
