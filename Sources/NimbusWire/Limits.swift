/// A named limit. Every limit Nimbus enforces is one of these, so the error, the docs and
/// the tests at the limit and one past it all speak of the same number.
public struct Limit: Sendable, Hashable {
    public let name: String
    public let value: Int

    public init(name: String, value: Int) {
        self.name = name
        self.value = value
    }
}

/// CloudKit's numbers (Web Services "Data Size Limits"), plus Nimbus's own where CloudKit
/// publishes none.
public enum Limits {
    /// Operations in one `records/modify`, `zones/modify` or lookup request.
    public static let operationsPerRequest = Limit(name: "operationsPerRequest", value: 200)
    /// Participants of one share, the owner included (CloudKit's `tooManyParticipants`).
    public static let participantsPerShare = Limit(name: "participantsPerShare", value: 100)
    /// How far up its `parent` chain a record is looked at for a share covering it. Nimbus's
    /// own number: a deeper chain cannot hold a shared record (docs/sharing.md).
    public static let shareDepth = Limit(name: "shareDepth", value: 64)
    /// Records (or zones) in one response page; also the default `resultsLimit`.
    public static let resultsPerPage = Limit(name: "resultsPerPage", value: 200)
    /// A record's size excluding assets: the sum over its fields of the field name's bytes
    /// and the value's bytes (see docs/limits.md for how each type counts).
    public static let recordSizeBytes = Limit(name: "recordSizeBytes", value: 1_048_576)
    /// A JSON request body, unless a route names a larger bound below. Nimbus's own number:
    /// lookups, queries, zones, subscriptions and sign-ins are a few kilobytes; 200 record
    /// names of 255 bytes are 60 KB.
    public static let requestBodyBytes = Limit(name: "requestBodyBytes", value: 1_048_576)
    /// A `records/modify` body (the app's and the console's) and a schema file imported in the
    /// console. CloudKit's own bound on a batch is 2 MB of record data; base64 for BYTES and
    /// JSON's framing make that about 2.8 MB on the wire, and one record at `recordSizeBytes`
    /// always fits.
    public static let modifyRequestBodyBytes = Limit(name: "modifyRequestBodyBytes", value: 4 * 1_048_576)
    /// Sealed keys one user keeps in one container and environment: their devices and the
    /// zones shared with them whose keys they hold (docs/encryption.md). Nimbus's own number.
    public static let sealedKeysPerUser = Limit(name: "sealedKeysPerUser", value: 1_000)
    /// Record names, zone names, record types and field names, in UTF-8 bytes.
    public static let nameBytes = Limit(name: "nameBytes", value: 255)
    /// Fields in one record.
    public static let fieldsPerRecord = Limit(name: "fieldsPerRecord", value: 1_000)
    /// Elements in one list field.
    public static let listElements = Limit(name: "listElements", value: 10_000)
    /// Records that may point at one record with a DELETE_SELF reference (CloudKit's number).
    public static let deleteSelfReferrers = Limit(name: "deleteSelfReferrers", value: 750)
    /// Work one query may do, in SQLite virtual-machine steps (about a second on this class of
    /// machine). Past it the query fails with `BAD_REQUEST` rather than run unbounded.
    /// Milliseconds of processor time one query may take (`RecordQuery.budget`).
    public static let queryMilliseconds = Limit(name: "queryMilliseconds", value: 250)
    /// Subscriptions one user may have to one database. Nimbus's own number (CloudKit
    /// publishes none); matching cost does not grow with it (docs/notifications.md).
    public static let subscriptionsPerDatabase = Limit(name: "subscriptionsPerDatabase", value: 1_000)
    /// Query subscriptions one user may have in one public database. Every user's writes to
    /// the public database are matched against every user's, so each one is a cost strangers
    /// bear: Nimbus's own number, below `subscriptionsPerDatabase`.
    public static let publicSubscriptionsPerUser = Limit(name: "publicSubscriptionsPerUser", value: 100)
    /// Of those, subscriptions to one record type.
    public static let publicSubscriptionsPerRecordType = Limit(name: "publicSubscriptionsPerRecordType", value: 20)
    /// Notifications one write (one committed request) may create. Past it, a subscription that
    /// several of the write's records fire is notified once, and past that the rest are not
    /// stored, and the log says so (docs/notifications.md). Nimbus's own number.
    public static let notificationsPerWrite = Limit(name: "notificationsPerWrite", value: 1_000)
    /// Notifications in one page of the notification collection.
    public static let notificationsPerPage = Limit(name: "notificationsPerPage", value: 200)
    /// Keys in a `desiredKeys` array.
    public static let desiredKeys = Limit(name: WireKey.desiredKeys, value: 1_000)

    /// Upload tokens in one `assets/upload` request, and sources in one `assets/rereference`.
    public static let assetTokensPerRequest = Limit(name: "assetTokensPerRequest", value: 200)
    /// One asset's bytes (CloudKit's 50 MB over Web Services); `nimbus serve --asset-max-bytes`
    /// changes it (docs/assets.md).
    public static let assetBytes = Limit(name: "assetBytes", value: 50 * 1_048_576)

    // The HTTP edge: what one client may hold of the server before a request is even read.

    /// Seconds from a request's first byte to the end of its header block.
    public static let requestHeaderSeconds = Limit(name: "requestHeaderSeconds", value: 10)
    /// Seconds from the end of a request's headers to the end of its body.
    public static let requestBodySeconds = Limit(name: "requestBodySeconds", value: 60)
    /// Seconds an asset upload's body may take in all, as long as no gap between its bytes
    /// passes `requestBodySeconds` (a 50 MB file needs about 56 KB/s).
    public static let assetUploadSeconds = Limit(name: "assetUploadSeconds", value: 900)
    /// Seconds a connection may sit with no request in progress before it is closed.
    public static let idleConnectionSeconds = Limit(name: "idleConnectionSeconds", value: 75)
    /// Connections one client address may hold open at once (WebSocket streams included).
    public static let connectionsPerClient = Limit(name: "connectionsPerClient", value: 256)
    /// Bytes of request bodies held in memory at once, over the whole node: read, parsed and
    /// being answered. With `bodyBytesPerClient` and `bodyBytesPerCaller`, this bounds what a
    /// flood of maximal bodies can make the server hold (docs/limits.md).
    public static let bodyBytesInFlight = Limit(name: "bodyBytesInFlight", value: 32 * 1_048_576)
    /// The same, for one client address.
    public static let bodyBytesPerClient = Limit(name: "bodyBytesPerClient", value: 8 * 1_048_576)
    /// The same, for one caller: a signed-in user, a server-to-server key, or an API token used
    /// without a user (every client of an app shares that one).
    public static let bodyBytesPerCaller = Limit(name: "bodyBytesPerCaller", value: 16 * 1_048_576)
    /// Bytes of a refused body read and thrown away after the answer (for at most
    /// `refusedBodyDrainSeconds`), so a client still sending hears the answer rather than a
    /// reset, which would discard it unread; then the connection closes. The largest body the
    /// server ever took (16 MiB), so a client that sends all of it before reading hears why.
    public static let refusedBodyDrainBytes = Limit(name: "refusedBodyDrainBytes", value: 16 * 1_048_576)
    /// Seconds that drain may take.
    /// Days the stored request log keeps an entry (docs/operations.md, "Logs that last").
    public static let requestLogDays = Limit(name: "requestLogDays", value: 7)
    /// Entries the stored request log keeps at most; the oldest go first.
    public static let requestLogEntries = Limit(name: "requestLogEntries", value: 1_000_000)
    /// Days the audit log keeps what operators did (docs/operations.md, "Logs that last").
    public static let auditLogDays = Limit(name: "auditLogDays", value: 365)
    /// Entries the audit log keeps at most; the oldest go first.
    public static let auditLogEntries = Limit(name: "auditLogEntries", value: 1_000_000)
    /// Days a record's earlier versions are kept for time travel (docs/operations.md, "Time
    /// travel"); `nimbus serve --record-history-days`, 0 to keep none.
    public static let recordHistoryDays = Limit(name: "recordHistoryDays", value: 7)
    public static let refusedBodyDrainSeconds = Limit(name: "refusedBodyDrainSeconds", value: 3)
}
