import NimbusStorage
import PostgresNIO

/// A zone's turn on PostgreSQL (`ZoneTurns`): one transaction on one connection that first
/// locks the zone's row, then runs the unit's loads and its apply, then commits.
///
/// Every apply that changes a zone's records updates that row (`PostgresApply`, the zone
/// check), so while a turn holds it, another node's apply on the zone waits at that UPDATE;
/// once the turn commits, the waiting UPDATE finds the record sequence moved on and fails its
/// check (SQLSTATE 40001), and that node's pipeline takes turns as well. Writers of a busy
/// zone then queue on the row lock in the order they asked, each deciding from rows no one can
/// change under it, instead of deciding, colliding and deciding again.
///
/// The turn costs three round trips more than an optimistic unit (BEGIN, the lock, COMMIT)
/// and holds one connection while the unit is decided, so pipelines take turns only after a
/// collision (`UnitGroupCommitter`).
extension PostgresCoarseStorage: ZoneTurns {
    public func withZoneTurn<Value: Sendable>(_ zone: ZoneOrder, _ body: @escaping @Sendable () async throws -> Value)
        async throws -> Value
    {
        // The caller hears `unavailable` at the deadline while the turn goes on (`Deadline`): a
        // turn still running then rolls back instead of committing writes its writers were told
        // had failed.
        let deadline = ContinuousClock.now + storage.deadline
        // A database not made yet has no zone to lock.
        let databaseID = try await storage.directoryIDs(of: [zone.database])[zone.database]
        let value = try await storage.unitOfWork { [storage] in
            try await storage.client.withConnection { connection in
                let turn = ZoneTurn(connection: connection)
                _ = try await storage.run("BEGIN", in: turn, named: false)
                do {
                    if let databaseID { _ = try await storage.run(Self.lock(zone.zoneName, in: databaseID), in: turn) }
                    let value = try await ZoneTurn.$held.withValue(turn) { try await body() }
                    guard ContinuousClock.now < deadline else {
                        throw StorageError.unavailable("the zone's turn outlasted its deadline (\(storage.deadline)); rolled back")
                    }
                    _ = try await storage.run("COMMIT", in: turn, named: false)
                    return value
                } catch {
                    // The connection goes back to the pool: it must not stay in the transaction.
                    _ = try? await storage.run("ROLLBACK", in: turn, named: false)
                    throw error
                }
            }
        }
        if !storage.replicas.isEmpty { await storage.replicas.noteCommit(on: storage) }
        return value
    }

    /// Locks the zone's row by its database and name (the pipeline's key); a zone not there
    /// (not made yet, or deleted) locks nothing.
    static func lock(_ zoneName: String, in databaseID: Int64) -> PostgresQuery {
        "SELECT id FROM zones WHERE database_id = \(databaseID) AND name = \(zoneName) AND NOT deleted FOR UPDATE"
    }
}

/// The zone turn a task holds: the connection whose transaction its statements join
/// (`PostgresStorage.rows` sends them there while it is set).
struct ZoneTurn: Sendable {
    let connection: PostgresConnection

    @TaskLocal static var held: ZoneTurn?
}
