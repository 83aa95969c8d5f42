/// Failures a driver reports in storage terms. The server shows none of these details to
/// clients: they become `INTERNAL_ERROR` with the detail in the log.
public enum StorageError: Error, Sendable, CustomStringConvertible {
    /// The store's contents contradict its own invariants.
    case corrupt(String)
    /// A query needed more work than its budget (`RecordQuery.maximumScanSteps`).
    case queryTooExpensive(maximumSteps: Int)

    public var description: String {
        switch self {
        case .corrupt(let detail): return "storage is inconsistent: \(detail)"
        case .queryTooExpensive(let steps): return "the query needed more than \(steps) steps"
        }
    }
}
