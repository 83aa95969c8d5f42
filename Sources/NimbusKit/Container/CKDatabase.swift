import Foundation

/// One of a container's three databases. Run operations on it with `add(_:)`, or use the
/// convenience methods (completion handlers and `async`), which run the same operations.
public final class CKDatabase: NSObject, @unchecked Sendable {
    public enum Scope: Int, Sendable, Hashable, CaseIterable {
        case `public` = 1
        case `private` = 2
        case shared = 3

        var pathComponent: String {
            switch self {
            case .public: return "public"
            case .private: return "private"
            case .shared: return "shared"
            }
        }
    }

    public let databaseScope: Scope
    public let container: CKContainer

    /// The queue `add(_:)` runs operations on; several run at once, dependencies respected.
    private let queue: OperationQueue

    init(container: CKContainer, scope: Scope) {
        self.container = container
        databaseScope = scope
        queue = OperationQueue()
        queue.name = "NimbusKit.\(scope.pathComponent)"
        queue.maxConcurrentOperationCount = 8
    }

    /// Runs an operation against this database.
    public func add(_ operation: CKDatabaseOperation) {
        operation.database = self
        queue.addOperation(operation)
    }

    var transport: NimbusTransport { container.transport }
}
