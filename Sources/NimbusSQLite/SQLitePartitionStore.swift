import Foundation
import GRDB
import NimbusStorage

/// `PartitionStore` on SQLite (a partition in tests, and a home whose partitions forward to it).
struct SQLitePartitionStore: PartitionStore {
    let storage: SQLiteStorage

    func startIDs(atLeast first: Int64) async throws {
        try await storage.writeSQLite { tx in
            for kind in StorageIDKind.allCases {
                // Ids come from past the largest reserved (SQLiteTransaction.reserveIDs).
                try tx.execute(
                    "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = max(value, excluded.value)",
                    [SQLiteTransaction.reservationKey(kind), first - 1])
            }
        }
    }

    func acceptForwardedOutbox(_ entries: [OutboxEntry], fromPartition partition: Int64, at time: Int64) async throws {
        guard !entries.isEmpty else { return }
        try await storage.writeSQLite { tx in
            for entry in entries.sorted(by: { $0.sequence < $1.sequence }) {
                try tx.execute(
                    "INSERT OR IGNORE INTO outbox_forwarded (partition, sequence, forwarded_at) VALUES (?, ?, ?)",
                    [partition, entry.sequence, time])
                guard tx.db.changesCount > 0 else { continue }
                try tx.appendOutbox(databaseID: entry.databaseID, body: entry.body, createdAt: entry.createdAt)
            }
            try tx.execute("DELETE FROM outbox_forwarded WHERE forwarded_at < ?", [time - Self.forwardedMemoryMilliseconds])
        }
    }

    func dropOutbox(sequences: [Int64]) async throws {
        guard !sequences.isEmpty else { return }
        try await storage.writeSQLite { tx in try tx.removeOutbox(sequences: sequences) }
    }
}
