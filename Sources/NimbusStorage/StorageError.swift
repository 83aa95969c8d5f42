/// Failures a driver reports in storage terms, whatever its engine: each driver turns its own
/// errors into these, so the service and the server decide what to do without knowing which
/// engine failed. The server shows none of these details to clients: `busy`, `unavailable`
/// and `serializationFailure` become `TRY_AGAIN_LATER` with `retryAfter`, the others
/// `INTERNAL_ERROR`, and the detail goes to the log.
public enum StorageError: Error, Sendable, CustomStringConvertible {
    /// The store's contents contradict its own invariants.
    case corrupt(String)
    /// A query needed more time than its budget (`RecordQuery.budget`).
    case queryTooExpensive(budget: Duration)
    /// The store is locked or contended past what the driver waits for; the same work may
    /// succeed in a moment (SQLite: another process held the write lock past the busy timeout).
    case busy(String)
    /// The store cannot be reached or written at all for now (a full disk, an I/O error, a
    /// lost connection, a server that is down).
    case unavailable(String)
    /// The transaction collided with a concurrent one and was undone; running it again may
    /// succeed. `RetryingStorage` does, a bounded number of times.
    case serializationFailure(String)
    /// The database is being moved to another partition (its writes wait for the move's
    /// switch) or was moved (the store holds only a pointer): `PartitionedStorage` reads the
    /// placement again and goes where it leads; a client whose request meets the fence itself
    /// tries again a moment later.
    case moving(String)
    /// A key that must be unique exists already.
    case duplicate(String)
    /// The driver does not do this yet (say which, and what to use instead).
    case unsupported(String)
    /// The engine refused a statement for a reason of its own, none of the above (PostgreSQL:
    /// its SQLSTATE and message), so the log says what it was.
    case engine(String)

    /// How long a client should wait before trying again, when trying again may help.
    public var retryAfterSeconds: Int? {
        switch self {
        case .busy, .serializationFailure, .moving: return 1
        case .unavailable: return 5
        case .corrupt, .queryTooExpensive, .duplicate, .unsupported, .engine: return nil
        }
    }

    public var description: String {
        switch self {
        case .corrupt(let detail): return "storage is inconsistent: \(detail)"
        case .queryTooExpensive(let budget): return "the query needed more than \(budget) of processor time"
        case .busy(let detail): return "storage is busy: \(detail)"
        case .unavailable(let detail): return "storage is unavailable: \(detail)"
        case .serializationFailure(let detail): return "the transaction collided with another: \(detail)"
        case .moving(let detail): return "the database is moving between partitions: \(detail)"
        case .duplicate(let detail): return "duplicate key: \(detail)"
        case .unsupported(let detail): return "not supported by this storage driver: \(detail)"
        case .engine(let detail): return "the storage engine refused a statement: \(detail)"
        }
    }
}
