import NIOCore
import NimbusStorage
import PostgresNIO

/// `OperationOutcomeStore` on PostgreSQL: the claim is one upsert that takes over only an
/// expired or stale entry (atomic under concurrent claims), then a read when it took nothing.
struct PostgresOperationOutcomeStore: OperationOutcomeStore {
    let storage: PostgresStorage

    func claimOperation(_ key: OperationKey, requestHash: String, now: Int64, staleBefore: Int64, expiredBefore: Int64)
        async throws -> OperationClaim
    {
        let taken = try await storage.rows(
            """
            INSERT INTO operation_outcomes (container, environment, user_record_name, operation_id, request_hash, created_at, response)
            VALUES (\(key.container), \(key.environment.rawValue), \(key.userRecordName), \(key.operationID), \(requestHash), \(now), NULL)
            ON CONFLICT (container, environment, user_record_name, operation_id) DO UPDATE
            SET request_hash = excluded.request_hash, created_at = excluded.created_at, response = NULL
            WHERE operation_outcomes.created_at < \(expiredBefore)
               OR (operation_outcomes.response IS NULL AND operation_outcomes.created_at < \(staleBefore))
            RETURNING created_at
            """)
        if !taken.isEmpty { return .claimed }
        guard
            let row = try await storage.rows(
                """
                SELECT request_hash, response FROM operation_outcomes WHERE container = \(key.container)
                AND environment = \(key.environment.rawValue) AND user_record_name = \(key.userRecordName) AND operation_id = \(key.operationID)
                """
            ).first
        else { return .claimed }
        let (hash, response) = try row.decode((String, ByteBuffer?).self)
        guard hash == requestHash else { return .otherRequest }
        guard let response else { return .running }
        return .done(response: Array(response.readableBytesView))
    }

    func completeOperation(_ key: OperationKey, response: [UInt8]) async throws {
        try await storage.rows(
            """
            UPDATE operation_outcomes SET response = \(ByteBuffer(bytes: response)) WHERE container = \(key.container)
            AND environment = \(key.environment.rawValue) AND user_record_name = \(key.userRecordName) AND operation_id = \(key.operationID)
            """)
    }

    func releaseOperation(_ key: OperationKey) async throws {
        try await storage.rows(
            """
            DELETE FROM operation_outcomes WHERE container = \(key.container) AND environment = \(key.environment.rawValue)
            AND user_record_name = \(key.userRecordName) AND operation_id = \(key.operationID) AND response IS NULL
            """)
    }

    func pruneOperations(createdBefore time: Int64) async throws -> Int {
        try await storage.rows("DELETE FROM operation_outcomes WHERE created_at < \(time) RETURNING 1").count
    }
}
