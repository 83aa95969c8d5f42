import Foundation
import NimbusSQLite
@testable import NimbusStorage
import NimbusTestSupport

/// The text of every statement a store's connections start, in order (`SQLiteStorage`'s
/// `statementObserver`).
final class StatementLog: @unchecked Sendable {
    private let lock = NSLock()
    private var texts: [String] = []
    func add(_ sql: String) { lock.withLock { texts.append(sql) } }
    /// The statements since the last call.
    func take() -> [String] { lock.withLock { defer { texts = [] }; return texts } }

    /// A SQLite store in a directory of its own, its statements kept here, under a unit-of-work
    /// driver that is closed afterwards; `body` gets the driver, the log and the file's path.
    static func withStore(_ body: (UnitOfWorkDriver, StatementLog, String) async throws -> Void) async throws {
        try await StorageConformanceTests.directory { directory in
            let log = StatementLog()
            let path = directory + "/db.sqlite"
            let storage = try SQLiteStorage(path: path, synchronous: .normal, statementObserver: { log.add($0) })
            try await withClosing(UnitOfWorkDriver(storage), closedBy: { try await $0.close() }) { driver in
                try await body(driver, log, path)
            }
        }
    }
}
