import Foundation
import Logging
import NimbusStorage
import PostgresNIO

/// `nimbus partitions move --user U --to P`: one user's logical databases (their private
/// databases, and their shared database) moved to another partition while the server runs
/// (docs/scale-out.md, "Moving a user"). Each database goes through four steps, recorded in
/// the home's `moves` table as each commits, so a move interrupted anywhere (`kill -9` of the
/// command included) goes on from its last step when run again:
///
/// 1. **copy**: the database's rows, ids and sequences as they are, replace what the target
///    held of it (`copyDatabase`), so change tokens and change tags carry over, while the
///    database is still written; where it stood as the copy started is recorded (`CopyMark`).
/// 2. **fence**: the source's database row names the target (`DatabaseRelocation.fenced`).
///    The statement waits for every write holding the row (each write takes it as it commits,
///    `PostgresApply`), and every later one is refused (`StorageError.moving`, which clients
///    see as TRY_AGAIN_LATER): reads go on.
/// 3. **catch-up**: what changed since the mark is copied again, fenced: the fence lasts as
///    long as that takes, not the whole copy.
/// 4. **switch**: once the target's read replicas have replayed the copy (a read sent to one
///    must find the database), the source's row becomes a pointer (`moved`) and the catalog
///    places the database on the target, moving the placements version, so nodes forget what
///    they kept.
/// 5. **clean**: after `settle` (every node has forgotten its placement by then), the
///    source's rows go, its subscriptions counted as removed; the pointer row stays.
public struct PartitionMove: Sendable {
    public enum Step: String, Sendable, CaseIterable {
        case copy, fence
        case catchUp = "catch-up"
        case switchPlacement = "switch"
        case clean

        /// Whether a database whose move runs this step next refuses its writes.
        public var fenced: Bool { self == .catchUp || self == .switchPlacement }
    }

    /// One database's move as it ended.
    public struct Moved: Sendable {
        public let database: DatabaseKey
        public let source: String
        /// Rows copied by this run: the first copy's, then the catch-up's.
        public let rows: Int
        /// From the fence to the switch, when this run made both: how long the database's
        /// writes were refused.
        public let fenced: Duration?
    }

    let home: PostgresStorage
    /// The store of a partition by name (`PartitionedStorage.home`: the home itself).
    let store: @Sendable (String) async throws -> PostgresStorage
    /// How long the clean-up waits after the switch: several `placementsRecheck`s, so every
    /// node serving has forgotten the old placement before the source's rows go.
    let settle: Duration
    /// Called as each step has committed (the tests end the process there).
    let stepped: @Sendable (Step) async -> Void
    /// How long the switch waits for the target's read replicas to replay the copy.
    let replicaWait: Duration

    public static let defaultSettle: Duration = PartitionedStorage.placementsRecheck * 5

    public init(
        home: PostgresStorage, settle: Duration = defaultSettle, replicaWait: Duration = .seconds(60),
        stepped: @escaping @Sendable (Step) async -> Void = { _ in },
        store: @escaping @Sendable (String) async throws -> PostgresStorage
    ) {
        self.home = home
        self.settle = settle
        self.replicaWait = replicaWait
        self.stepped = stepped
        self.store = store
    }

    /// Moves every private and shared database of the user to `target`, finishing first any
    /// move of theirs a crash interrupted. Refused (`PartitionRefusal`) when the target is not
    /// a partition, one of the user's databases is half-way to another, or another command is
    /// moving the user now (a session lock on the home, gone with its process however it ends).
    public func moveUser(_ userID: Int64, to target: String) async throws -> [Moved] {
        let logger = home.logger
        return try await home.client.withConnection { connection in
            let lock = "nimbus partitions move \(userID)"
            let locked = try await connection.query("SELECT pg_try_advisory_lock(hashtextextended(\(lock), 0))", logger: logger)
                .collect().first?.decode(Bool.self)
            guard locked == true else {
                throw PartitionRefusal("another `nimbus partitions move` of this user is running: let it finish (or end it, and run this again)")
            }
            do {
                let moved = try await moveUserHoldingTheLock(userID, to: target)
                _ = try? await connection.query("SELECT pg_advisory_unlock(hashtextextended(\(lock), 0))", logger: logger)
                return moved
            } catch {
                _ = try? await connection.query("SELECT pg_advisory_unlock(hashtextextended(\(lock), 0))", logger: logger)
                throw error
            }
        }
    }

    private func moveUserHoldingTheLock(_ userID: Int64, to target: String) async throws -> [Moved] {
        let catalog = home.partitionCatalog
        let known = try await catalog.partitions().map(\.name)
        guard target == PartitionedStorage.home || known.contains(target) else {
            throw PartitionRefusal("there is no partition '\(target)': `nimbus partitions list` shows them")
        }
        let underway = try await catalog.moves(ownerID: userID)
        if let other = underway.first(where: { $0.target != target }) {
            throw PartitionRefusal(
                "\(other.database) is half-way to partition '\(other.target)' (step \(other.step.rawValue)): finish that move first, with --to \(other.target)")
        }
        var moved: [Moved] = []
        // Again until a pass finds nothing to move: a database made for the user while this
        // runs goes where the move goes while one of theirs is recorded as moving
        // (`PartitionedStorage`), and anywhere in between, so the next pass moves it.
        var recorded = underway
        for _ in 0..<Self.passes {
            var movedInPass = false
            for database in try await catalog.databases(ownerID: userID) {
                if let result = try await move(database, to: target, underway: recorded.first { $0.database == database }) {
                    moved.append(result)
                    movedInPass = true
                }
            }
            guard movedInPass else { break }
            recorded = try await catalog.moves(ownerID: userID)
        }
        return moved
    }

    /// The most passes over a user's databases one command makes.
    static let passes = 5

    /// One database through its remaining steps; nil when it lives on `target` already.
    func move(_ database: DatabaseKey, to target: String, underway: PostgresPartitionCatalog.MoveState?) async throws -> Moved? {
        let catalog = home.partitionCatalog
        var state: PostgresPartitionCatalog.MoveState
        if let underway {
            state = underway
        } else {
            let source = try await catalog.placement(of: database) ?? PartitionedStorage.home
            guard source != target else { return nil }
            state = try await catalog.beginMove(database, from: source, to: target, at: Self.now())
        }
        let source = try await store(state.source)
        var rows = 0
        var fencedAt: ContinuousClock.Instant?
        var fenced: Duration?
        while true {
            switch state.step {
            case .copy:
                let mark = try await source.copyMark(database)
                try await catalog.recordMark(mark, of: database)
                rows += try await source.copyDatabase(database, to: try await store(target))
            case .fence:
                try await source.fence(database, movingTo: target)
                fencedAt = .now
            case .catchUp:
                // Without a mark (none was recorded), the whole database again.
                let mark = try await catalog.mark(of: database)
                rows += try await source.copyDatabase(database, to: try await store(target), since: mark)
            case .switchPlacement:
                try await waitForReplicas(of: target)
                try await source.markMoved(database)
                try await catalog.switchPlacement(database, to: target, at: Self.now())
                fenced = fencedAt.map { .now - $0 }
            case .clean:
                let waited = Duration.milliseconds(max(0, Self.now() - state.steppedAt))
                if waited < settle { try await Task.sleep(for: settle - waited) }
                try await source.removeMovedDatabase(database)
                try await catalog.endMove(database)
                await stepped(.clean)
                return Moved(database: database, source: state.source, rows: rows, fenced: fenced)
            }
            let done = state.step
            if done != .switchPlacement {  // the switch records its next step with the placement
                state = try await catalog.recordStep(database, after: done, at: Self.now())
            } else {
                state = try await catalog.moveState(database) ?? state
            }
            await stepped(done)
        }
    }

    static func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    /// Waits until each read replica the catalog lists for `target` has replayed everything
    /// its primary has written (the copy with it): after the switch a node may send a read of
    /// the database to one, which must find it. Past `replicaWait`, refused, saying which
    /// replica lags; the move then waits at its switch, its database fenced, until run again.
    /// (The home's replicas are each node's `--read-replica`, which the catalog does not list.)
    func waitForReplicas(of target: String) async throws {
        guard let replicas = try await home.partitionCatalog.partitions().first(where: { $0.name == target })?.replicas,
            !replicas.isEmpty
        else { return }
        let written = try await store(target).rows("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint").first?.decode(Int64.self) ?? 0
        let deadline = ContinuousClock.now + replicaWait
        for url in replicas {
            let location = try PostgresLocation(url: url)
            var said = "it has not answered"
            while true {
                do {
                    let replayed = try await Self.replayed(location, logger: home.logger)
                    if replayed >= written { break }
                    said = "it has replayed \(written - replayed) bytes less than the partition wrote"
                } catch {
                    said = "it does not answer: \(PostgresStorage.normalized(error))"
                }
                guard ContinuousClock.now < deadline else {
                    throw PartitionRefusal(
                        "partition '\(target)''s replica \(location) has not replayed the copy within \(replicaWait) (\(said)); the move waits at its switch: run it again once the replica catches up")
                }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
    }

    /// How far a standby has replayed its primary's WAL.
    static func replayed(_ location: PostgresLocation, logger: Logger) async throws -> Int64 {
        guard let endpoint = location.endpoints.first else { return 0 }
        return try await location.withConnection(to: endpoint, logger: logger) { connection in
            let rows = try await connection.query(
                "SELECT coalesce((pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint, 0)", logger: logger
            ).collect()
            return try rows.first?.decode(Int64.self) ?? 0
        }
    }
}

// MARK: The steps on a partition's store

extension PostgresStorage {
    /// The move's fence: the database's row names its target, once every write holding the
    /// row has committed (the UPDATE waits for them); writes decided meanwhile are refused as
    /// they commit (`PostgresApply`). Run again, it changes nothing.
    func fence(_ database: DatabaseKey, movingTo target: String) async throws {
        guard let id = try await directoryIDs(of: [database])[database] else { return }
        // FOR UPDATE first: writers hold the row FOR KEY SHARE (PostgresDatabaseFeed), which
        // the update alone (no key changes) would not wait for.
        try await rows(
            """
            WITH held AS (SELECT id FROM databases WHERE id = \(id) AND NOT moved FOR UPDATE)
            UPDATE databases SET moving_to = \(target) WHERE id IN (SELECT id FROM held)
            """)
    }

    /// The switch's side here: the row becomes a pointer that refuses reads too.
    func markMoved(_ database: DatabaseKey) async throws {
        guard let id = try await directoryIDs(of: [database])[database] else { return }
        try await rows("UPDATE databases SET moved = true WHERE id = \(id) AND moving_to IS NOT NULL")
    }

    /// The clean-up: every row of the moved database goes but its pointer, its subscriptions
    /// counted as removed (so every node's index drops them here). In one transaction.
    func removeMovedDatabase(_ database: DatabaseKey) async throws {
        guard let id = try await databaseID(database, moved: true) else { return }
        try await client.withTransaction(logger: logger) { connection in
            try await Self.countSubscriptionsChanged(ofDatabase: id, on: connection, logger: logger)
            // The pointer row and its key's entry stay: a node that still places the database
            // here finds it by key and is sent on.
            for table in Self.databaseTables.reversed() where table != "databases" && table != "database_directory" {
                try await connection.query("DELETE FROM \(unescaped: table) WHERE database_id = \(id)", logger: logger)
            }
        }
    }

    /// The database's id here; with `moved`, only when its row is a move's pointer.
    func databaseID(_ database: DatabaseKey, moved: Bool = false) async throws -> Int64? {
        guard let id = try await directoryIDs(of: [database])[database] else { return nil }
        return try await rows("SELECT id FROM databases WHERE id = \(id) AND (moved OR NOT \(moved))").first?.decode(Int64.self)
    }

    /// Moves the subscriptions version on past every subscription of the database, each listed
    /// as changed, so every node's subscription index reads them again (present after a copy,
    /// absent after a clean-up).
    static func countSubscriptionsChanged(ofDatabase id: Int64, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query(
            """
            WITH changed AS (
                SELECT database_id, user_id, subscription_id, row_number() OVER (ORDER BY user_id, subscription_id) AS n
                FROM subscriptions WHERE database_id = \(id)
            ), bumped AS (
                UPDATE counters SET value = value + (SELECT count(*) FROM changed) WHERE key = 'subscriptions_version'
                RETURNING value - (SELECT count(*) FROM changed) AS base
            )
            INSERT INTO subscription_changes (version, database_id, user_id, subscription_id)
            SELECT bumped.base + changed.n, changed.database_id, changed.user_id, changed.subscription_id FROM bumped, changed
            """, logger: logger)
    }
}

// MARK: The home's record of moves

extension PostgresPartitionCatalog {
    /// A database's move under way, as the home's `moves` table has it.
    public struct MoveState: Sendable {
        public let database: DatabaseKey
        public let source: String
        public let target: String
        /// The step to run next.
        public let step: PartitionMove.Step
        public let steppedAt: Int64
    }

    public func movesUnderway() async throws -> [PartitionMoveUnderway] {
        try await moves().map {
            PartitionMoveUnderway(
                database: $0.database, source: $0.source, target: $0.target, nextStep: $0.step.rawValue, fenced: $0.step.fenced)
        }
    }

    public func placementsVersion() async throws -> Int64? {
        try await storage.rows("SELECT value FROM counters WHERE key = 'placements_version'").first?.decode(Int64.self)
    }

    /// The user's private and shared databases: those placed, and those the home holds from
    /// before partitions (by the directory, which keeps a moved database's key too: such a
    /// database is placed, so listed once either way).
    func databases(ownerID: Int64) async throws -> [DatabaseKey] {
        let found = try await storage.rows(
            """
            SELECT container, environment, scope FROM placements WHERE owner_id = \(ownerID) AND scope <> 'public'
            UNION SELECT container, environment, scope FROM database_directory WHERE owner_id = \(ownerID) AND scope <> 'public'
            UNION SELECT container, environment, scope FROM moves WHERE owner_id = \(ownerID)
            ORDER BY 1, 2, 3
            """)
        return try found.compactMap { row in
            let (container, environment, scope) = try row.decode((String, String, String).self)
            guard let environment = Environment(rawValue: environment), let scope = DatabaseScope(rawValue: scope) else { return nil }
            return DatabaseKey(container: container, environment: environment, scope: scope, ownerID: ownerID)
        }
    }

    /// Moves under way: the user's (`ownerID`), or everyone's.
    public func moves(ownerID: Int64? = nil) async throws -> [MoveState] {
        try await storage.rows(
            """
            SELECT container, environment, scope, owner_id, source, target, step, stepped_at FROM moves
            WHERE \(ownerID)::bigint IS NULL OR owner_id = \(ownerID) ORDER BY owner_id, container, environment, scope
            """
        ).compactMap(Self.moveState)
    }

    func moveState(_ database: DatabaseKey) async throws -> MoveState? {
        try await storage.rows(
            """
            SELECT container, environment, scope, owner_id, source, target, step, stepped_at FROM moves
            WHERE container = \(database.container) AND environment = \(database.environment.rawValue)
                AND scope = \(database.scope.rawValue) AND owner_id = \(database.ownerID)
            """
        ).first.flatMap(Self.moveState)
    }

    private static func moveState(_ row: PostgresRow) throws -> MoveState? {
        let (container, environment, scope, owner, source, target, step, stepped) = try row.decode(
            (String, String, String, Int64, String, String, String, Int64).self)
        guard let environment = Environment(rawValue: environment), let scope = DatabaseScope(rawValue: scope),
            let step = PartitionMove.Step(rawValue: step)
        else { throw StorageError.corrupt("a move of \(container)/\(owner) names an unknown environment, scope or step") }
        return MoveState(
            database: DatabaseKey(container: container, environment: environment, scope: scope, ownerID: owner), source: source,
            target: target, step: step, steppedAt: stepped)
    }

    /// Records the move at its first step; a move of the database recorded meanwhile (another
    /// run of the command) is taken as it is.
    func beginMove(_ database: DatabaseKey, from source: String, to target: String, at time: Int64) async throws -> MoveState {
        try await storage.rows(
            """
            INSERT INTO moves (container, environment, scope, owner_id, source, target, step, started_at, stepped_at)
            VALUES (\(database.container), \(database.environment.rawValue), \(database.scope.rawValue), \(database.ownerID),
                \(source), \(target), \(PartitionMove.Step.copy.rawValue), \(time), \(time))
            ON CONFLICT DO NOTHING
            """)
        guard let state = try await moveState(database) else {
            throw StorageError.serializationFailure("the move of \(database) ended while it was being recorded")
        }
        return state
    }

    /// Records that `step` is done (the fence and the copy) and returns the state after it.
    func recordStep(_ database: DatabaseKey, after step: PartitionMove.Step, at time: Int64) async throws -> MoveState {
        let steps = PartitionMove.Step.allCases
        guard let index = steps.firstIndex(of: step), index + 1 < steps.count else {
            throw StorageError.corrupt("no step follows \(step.rawValue)")
        }
        try await storage.rows(
            """
            UPDATE moves SET step = \(steps[index + 1].rawValue), stepped_at = \(time)
            WHERE container = \(database.container) AND environment = \(database.environment.rawValue)
                AND scope = \(database.scope.rawValue) AND owner_id = \(database.ownerID)
            """)
        guard let state = try await moveState(database) else { throw StorageError.corrupt("the move of \(database) vanished") }
        return state
    }

    /// The switch: the database is placed on `target`, the placements version moves, and the
    /// move's next step is the clean-up, in one transaction.
    func switchPlacement(_ database: DatabaseKey, to target: String, at time: Int64) async throws {
        let logger = storage.logger
        try await storage.client.withTransaction(logger: logger) { connection in
            try await connection.query(
                """
                INSERT INTO placements (container, environment, scope, owner_id, partition)
                VALUES (\(database.container), \(database.environment.rawValue), \(database.scope.rawValue), \(database.ownerID), \(target))
                ON CONFLICT (container, environment, scope, owner_id) DO UPDATE SET partition = excluded.partition
                """, logger: logger)
            try await connection.query(
                "UPDATE counters SET value = value + 1 WHERE key = 'placements_version'", logger: logger)
            try await connection.query(
                """
                UPDATE moves SET step = \(PartitionMove.Step.clean.rawValue), stepped_at = \(time)
                WHERE container = \(database.container) AND environment = \(database.environment.rawValue)
                    AND scope = \(database.scope.rawValue) AND owner_id = \(database.ownerID)
                """, logger: logger)
        }
    }

    /// Records where the source stood as the first copy started (nil: it holds no row).
    func recordMark(_ mark: PostgresStorage.CopyMark?, of database: DatabaseKey) async throws {
        let text = try mark.map { String(decoding: try JSONEncoder().encode($0), as: UTF8.self) }
        try await storage.rows(
            """
            UPDATE moves SET mark = \(text) WHERE container = \(database.container) AND environment = \(database.environment.rawValue)
                AND scope = \(database.scope.rawValue) AND owner_id = \(database.ownerID)
            """)
    }

    func mark(of database: DatabaseKey) async throws -> PostgresStorage.CopyMark? {
        let text = try await storage.rows(
            """
            SELECT mark FROM moves WHERE container = \(database.container) AND environment = \(database.environment.rawValue)
                AND scope = \(database.scope.rawValue) AND owner_id = \(database.ownerID)
            """
        ).first?.decode(String?.self)
        return try text.map { try JSONDecoder().decode(PostgresStorage.CopyMark.self, from: Data($0.utf8)) }
    }

    func endMove(_ database: DatabaseKey) async throws {
        try await storage.rows(
            """
            DELETE FROM moves WHERE container = \(database.container) AND environment = \(database.environment.rawValue)
                AND scope = \(database.scope.rawValue) AND owner_id = \(database.ownerID)
            """)
    }
}
