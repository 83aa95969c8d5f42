/// Failures a driver reports in storage terms. The server shows none of these details to
/// clients: they become `INTERNAL_ERROR` with the detail in the log.
public enum StorageError: Error, Sendable, CustomStringConvertible {
    /// The store's contents contradict its own invariants.
    case corrupt(String)
    /// A query needed more time than its budget (`RecordQuery.budget`).
    case queryTooExpensive(budget: Duration)

    public var description: String {
        switch self {
        case .corrupt(let detail): return "storage is inconsistent: \(detail)"
        case .queryTooExpensive(let budget): return "the query needed more than \(budget) of processor time"
        }
    }
}
