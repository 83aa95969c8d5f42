import Foundation
import GRDB
import NimbusStorage

/// `OperationOutcomeStore` on SQLite: the claim is one write transaction (an upsert that takes
/// over only an expired or stale entry, then a read of what is there).
struct SQLiteOperationOutcomeStore: OperationOutcomeStore {
    let storage: SQLiteStorage

    private static let key = "container = ? AND environment = ? AND user_record_name = ? AND operation_id = ?"

    func claimOperation(_ key: OperationKey, requestHash: String, now: Int64, staleBefore: Int64, expiredBefore: Int64)
        async throws -> OperationClaim
    {
        try await storage.writeSQLite { tx in
            try tx.execute(
                """
                INSERT INTO operation_outcomes (container, environment, user_record_name, operation_id, request_hash, created_at, response)
                VALUES (?, ?, ?, ?, ?, ?, NULL)
                ON CONFLICT (container, environment, user_record_name, operation_id) DO UPDATE
                SET request_hash = excluded.request_hash, created_at = excluded.created_at, response = NULL
                WHERE operation_outcomes.created_at < ? OR (operation_outcomes.response IS NULL AND operation_outcomes.created_at < ?)
                """, StatementArguments(Self.values(key) + [requestHash, now, expiredBefore, staleBefore]))
            if tx.db.changesCount > 0 { return .claimed }
            guard let row = try tx.fetchRow("SELECT request_hash, response FROM operation_outcomes WHERE \(Self.key)", StatementArguments(Self.values(key)))
            else { return .claimed }
            guard (row["request_hash"] as String) == requestHash else { return .otherRequest }
            guard let response = row["response"] as Data? else { return .running }
            return .done(response: Array(response))
        }
    }

    func completeOperation(_ key: OperationKey, response: [UInt8]) async throws {
        try await storage.writeSQLite { tx in
            try tx.execute(
                "UPDATE operation_outcomes SET response = ? WHERE \(Self.key)", StatementArguments([Data(response)] + Self.values(key)))
        }
    }

    func releaseOperation(_ key: OperationKey) async throws {
        try await storage.writeSQLite { tx in
            try tx.execute("DELETE FROM operation_outcomes WHERE \(Self.key) AND response IS NULL", StatementArguments(Self.values(key)))
        }
    }

    func pruneOperations(createdBefore time: Int64) async throws -> Int {
        try await storage.writeSQLite { tx in
            try tx.execute("DELETE FROM operation_outcomes WHERE created_at < ?", [time])
            return tx.db.changesCount
        }
    }

    private static func values(_ key: OperationKey) -> [any DatabaseValueConvertible] {
        [key.container, key.environment.rawValue, key.userRecordName, key.operationID]
    }
}
