import Foundation
import NimbusStorage
import PostgresNIO

/// `PartitionStore` on PostgreSQL: each call one statement, so each is atomic on its own.
struct PostgresPartitionStore: PartitionStore {
    let storage: PostgresStorage

    func startIDs(atLeast first: Int64) async throws {
        try await storage.rows("UPDATE id_blocks SET next_id = greatest(next_id, \(first))")
    }

    func acceptForwardedOutbox(_ entries: [OutboxEntry], fromPartition partition: Int64, at time: Int64) async throws {
        guard !entries.isEmpty else { return }
        let sorted = entries.sorted { $0.sequence < $1.sequence }
        let sequences = sorted.map(\.sequence), databases = sorted.map(\.databaseID), created = sorted.map(\.createdAt)
        let bodies = sorted.map { Data($0.body).base64EncodedString() }
        let cutoff = time - Self.forwardedMemoryMilliseconds
        // The entries this store never saw are those the insert into outbox_forwarded adds;
        // only they reach the outbox, in their partition's order, and the nodes hear of them.
        try await storage.rows(
            """
            WITH fresh AS (
                INSERT INTO outbox_forwarded (partition, sequence, forwarded_at)
                SELECT \(partition), s, \(time) FROM unnest(\(sequences)::bigint[]) AS s
                ON CONFLICT DO NOTHING RETURNING sequence
            ), forgotten AS (
                DELETE FROM outbox_forwarded WHERE forwarded_at < \(cutoff)
            ), added AS (
                INSERT INTO change_outbox (database_id, body, created_at)
                SELECT e.database_id, decode(e.body, 'base64'), e.created_at
                FROM unnest(\(sequences)::bigint[], \(databases)::bigint[], \(bodies)::text[], \(created)::bigint[])
                    AS e(sequence, database_id, body, created_at)
                JOIN fresh USING (sequence)
                ORDER BY e.sequence
                RETURNING 1
            )
            SELECT CASE WHEN EXISTS (SELECT 1 FROM added) THEN pg_notify('nimbus', 'outbox') END
            """)
    }

    func dropOutbox(sequences: [Int64]) async throws {
        guard !sequences.isEmpty else { return }
        try await storage.rows("DELETE FROM change_outbox WHERE sequence = ANY(\(sequences)::bigint[])")
    }
}
