/// The request log that lasts (docs/operations.md, "Logs that last"): every answered request,
/// written in batches a second apart, kept for `Limits.requestLogDays` and at most
/// `Limits.requestLogEntries`, read by the dashboard and exported as JSON lines. On PostgreSQL
/// it is one table every node writes and reads; on SQLite a file of its own beside the store,
/// so logging never takes the data's write lock.
public protocol RequestLogStore: Sendable {
    /// Stores answered requests and the per-minute figures one node made of them, in one
    /// transaction: a reader that sees an entry sees the figures that count it. The dashboard's
    /// charts are the sum of every node's figure rows, so they survive restarts and show the
    /// whole installation.
    func appendRequests(_ rows: [StoredRequest], minuteFigures: [StoredMinuteFigures]) async throws
    /// The newest first that `search` accepts, at most `search.limit`.
    func requests(_ search: RequestSearch) async throws -> [StoredRequest]
    /// Removes entries (and minute figures) older than `time` (milliseconds since 1970), then
    /// the oldest entries past `keepingAtMost`; returns how many entries went.
    func pruneRequests(before time: Int64, keepingAtMost rows: Int) async throws -> Int
    /// The rows of minutes that start at or after `time`, in no particular order.
    func minuteFigures(since time: Int64) async throws -> [StoredMinuteFigures]
}

/// Requests, errors and latency of one node's requests of one minute and container, as stored.
public struct StoredMinuteFigures: Sendable, Hashable {
    /// The minute's start, milliseconds since 1970.
    public var minute: Int64
    public var node: String
    /// "" for requests that named no container.
    public var container: String
    public var requests: Int
    /// Requests answered with a 5xx status.
    public var serverErrors: Int
    /// Errors by `serverErrorCode`, those of single items inside a 200 included.
    public var errors: [String: Int]
    /// Requests per latency bucket (the server's bucket bounds, by index), buckets with any.
    public var latency: [Int: Int]

    public init(
        minute: Int64, node: String, container: String, requests: Int, serverErrors: Int, errors: [String: Int], latency: [Int: Int]
    ) {
        self.minute = minute
        self.node = node
        self.container = container
        self.requests = requests
        self.serverErrors = serverErrors
        self.errors = errors
        self.latency = latency
    }

    /// `errors` as one column: `CODE=n,CODE=n` (codes are upper-case letters and underscores).
    public var errorsText: String { errors.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",") }
    /// `latency` as one column: `index:count,index:count`.
    public var latencyText: String { latency.sorted { $0.key < $1.key }.map { "\($0.key):\($0.value)" }.joined(separator: ",") }

    /// A row read back from its columns.
    public init(
        minute: Int64, node: String, container: String, requests: Int, serverErrors: Int, errorsText: String, latencyText: String
    ) {
        func pairs(_ text: String, _ separator: Character) -> [(String, Int)] {
            text.split(separator: ",").compactMap { pair in
                let parts = pair.split(separator: separator, maxSplits: 1)
                guard parts.count == 2, let count = Int(parts[1]) else { return nil }
                return (String(parts[0]), count)
            }
        }
        self.init(
            minute: minute, node: node, container: container, requests: requests, serverErrors: serverErrors,
            errors: Dictionary(pairs(errorsText, "="), uniquingKeysWith: +),
            latency: Dictionary(pairs(latencyText, ":").compactMap { key, count in Int(key).map { ($0, count) } }, uniquingKeysWith: +))
    }
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
