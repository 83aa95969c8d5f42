import Logging
import NimbusStorage
import PostgresNIO
import Synchronization

extension PostgresPrimary: PostgresPools {}

/// The node's read replicas (`nimbus serve --read-replica`): hot standbys fed by PostgreSQL's
/// streaming replication, which answer the reads a client makes (`ReadKind.replicaMayServe`)
/// once they have replayed every write this node committed (docs/scale-out.md, "Read replicas").
///
/// After each apply the node reads the primary's WAL position (`noteCommit`): a commit the node
/// acknowledged lies before it. A read goes to a replica whose replay position has reached that
/// floor, the reads spread over those that have; when none has, the node asks the replicas
/// once more (one short statement each, the bounded wait) and otherwise reads from the primary.
/// So a client reads its own writes through any replica, on the node it wrote through. Each
/// replica's position is also polled every `pollInterval`, which is what `/metrics` shows as
/// its lag.
final class PostgresReplicas: Sendable {
    let replicas: [PostgresReplica]
    /// The primary's WAL position after this node's latest commit, in bytes from 0/0, and
    /// whether a commit's position could not be read since (reads then go to the primary until
    /// a position read after that failure raises the floor).
    private struct Floor {
        var position: Int64 = 0
        var failures = 0
        var unsureSince: Int?
    }
    private let floor = Mutex(Floor())
    private let turn = Atomic<Int>(0)
    private let poller: Mutex<Task<Void, Never>?> = Mutex(nil)

    static let pollInterval: Duration = .milliseconds(100)

    var isEmpty: Bool { replicas.isEmpty }

    init(_ replicas: [PostgresReplica]) {
        self.replicas = replicas
    }

    /// Checks that each location is a standby of `primary`'s cluster, and opens its pools.
    static func open(
        _ locations: [PostgresLocation], primary: PostgresPrimary, maximumConnections: Int, logger: Logger
    ) async throws -> PostgresReplicas {
        guard !locations.isEmpty else { return PostgresReplicas([]) }
        let cluster: Int64
        do {
            cluster = try await identity(primary.location, primary.endpoint, logger: logger).cluster
        } catch {
            throw PostgresStorage.normalized(error)
        }
        var replicas: [PostgresReplica] = []
        // A later replica refused: the pools of those checked before it stop too.
        func refuse(_ reason: String) -> StorageError {
            for replica in replicas { _ = replica.close() }
            return StorageError.unavailable(reason)
        }
        for (index, location) in locations.enumerated() {
            guard location.endpoints.count == 1 else {
                throw refuse("read replica \(location): name one host per --read-replica")
            }
            let endpoint = location.endpoints[0]
            let identifier: Int64
            let recovering: Bool
            do {
                (identifier, _, recovering) = try await identity(location, endpoint, logger: logger)
            } catch {
                throw refuse("read replica \(location) does not answer (\(PostgresStorage.normalized(error)))")
            }
            guard recovering else {
                throw refuse(
                    "read replica \(location) is not a standby (it is not in recovery): a replica must be a hot standby of the primary")
            }
            guard identifier == cluster else {
                throw refuse(
                    "read replica \(location) belongs to another cluster (system identifier \(identifier), the primary's \(cluster))")
            }
            replicas.append(PostgresReplica(index: index, location: location, maximumConnections: maximumConnections, logger: logger))
        }
        let set = PostgresReplicas(replicas)
        set.poller.withLock { $0 = Task { [weak set] in await set?.poll(primary: primary) } }
        return set
    }

    /// A server's cluster (`system_identifier`, the same on a primary and its standbys), the
    /// database the location names, and whether the server is a standby (replicas here,
    /// partitions in `PostgresPartitionCatalog`).
    static func identity(
        _ location: PostgresLocation, _ endpoint: PostgresLocation.Endpoint, logger: Logger
    ) async throws -> (cluster: Int64, database: String, recovering: Bool) {
        try await location.withConnection(to: endpoint, logger: logger) { connection in
            let rows = try await connection.query(
                "SELECT system_identifier, current_database()::text, pg_is_in_recovery() FROM pg_control_system()", logger: logger
            ).collect()
            guard let row = rows.first else { throw StorageError.unavailable("no answer") }
            return try row.decode((Int64, String, Bool).self)
        }
    }

    // MARK: Routing

    /// After a commit of this node: the primary's position now lies past it. One statement, on
    /// a node with replicas only.
    func noteCommit(on storage: PostgresStorage) async {
        let started = floor.withLock { $0.failures }
        do {
            let rows = try await storage.rows("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint")
            let position = try rows.first?.decode(Int64.self) ?? 0
            floor.withLock { floor in
                floor.position = max(floor.position, position)
                if let since = floor.unsureSince, started >= since { floor.unsureSince = nil }
            }
        } catch {
            // The write committed; only where its commit lies is unknown.
            floor.withLock { floor in
                floor.failures += 1
                floor.unsureSince = floor.failures
            }
        }
    }

    /// The replica a read from `source` goes to, or nil for the primary.
    func route(_ source: LoadSource) async -> PostgresReplica? {
        guard !replicas.isEmpty else { return nil }
        switch source {
        case .primary: return nil
        case .server(let index): return replicas.indices.contains(index) && replicas[index].isUp ? replicas[index] : nil
        case .caughtUpReplica:
            let (needed, unsure) = floor.withLock { ($0.position, $0.unsureSince != nil) }
            if unsure { return nil }
            if let replica = pick(needed) { return replica }
            // Behind as last seen: ask them now, once, before settling for the primary (a replica
            // asked within the last few milliseconds is not asked again: on a node writing
            // all the time, every read would otherwise cost a statement per replica).
            for replica in replicas where replica.isUp && replica.mayAskAgain { await replica.refresh() }
            return pick(needed)
        }
    }

    /// One of the replicas that have replayed `position`, in turn.
    private func pick(_ position: Int64) -> PostgresReplica? {
        let ready = replicas.filter { $0.isUp && $0.replayed >= position }
        guard !ready.isEmpty else { return nil }
        return ready[turn.add(1, ordering: .relaxed).newValue % ready.count]
    }

    private func poll(primary: PostgresPrimary) async {
        while !Task.isCancelled {
            let position = try? await PostgresReplica.position(
                "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint", on: primary.client)
            for replica in replicas { await replica.refresh(primaryPosition: position) }
            try? await Task.sleep(for: Self.pollInterval)
        }
    }

    func close() -> [Task<Void, Never>] {
        let poller = poller.withLock { task -> Task<Void, Never>? in
            defer { task = nil }
            return task
        }
        poller?.cancel()
        return (poller.map { [$0] } ?? []) + replicas.flatMap { $0.close() }
    }

    var figures: [ReplicaFigures] {
        replicas.map { replica in
            ReplicaFigures(
                name: replica.endpoint.description, isUp: replica.isUp, lagBytes: replica.lagBytes, lagSeconds: replica.lagSeconds,
                reads: replica.reads)
        }
    }
}

/// One read replica: its pools and what it has replayed.
final class PostgresReplica: PostgresPools {
    let index: Int
    private let pools: PostgresHostPools
    private let logger: Logger

    private struct State {
        var replayed: Int64 = -1
        var lagBytes: Int64 = 0
        var lagSeconds: Double = 0
        var isUp = true
        var askedAt: ContinuousClock.Instant?
    }
    private let state: Mutex<State>

    /// How soon a read may ask the replica's position again (`PostgresReplicas.route`).
    static let askInterval: Duration = .milliseconds(5)

    var mayAskAgain: Bool {
        state.withLock { state in
            guard let asked = state.askedAt else { return true }
            return ContinuousClock.now - asked >= Self.askInterval
        }
    }
    private let readCount = Atomic<Int>(0)

    init(index: Int, location: PostgresLocation, maximumConnections: Int, logger: Logger) {
        self.index = index
        self.logger = logger
        pools = PostgresHostPools(location, location.endpoints[0], maximumConnections: maximumConnections, logger: logger)
        state = Mutex(State())
    }

    var endpoint: PostgresLocation.Endpoint { pools.endpoint }
    var client: PostgresClient { pools.client }
    func client(timeout milliseconds: Int64) -> PostgresClient { pools.client(timeout: milliseconds) }

    var replayed: Int64 { state.withLock { $0.replayed } }
    var isUp: Bool { state.withLock { $0.isUp } }
    var lagBytes: Int64 { state.withLock { $0.lagBytes } }
    var lagSeconds: Double { state.withLock { $0.lagSeconds } }
    var reads: Int { readCount.load(ordering: .relaxed) }

    /// Counts a load this replica answered.
    func served() { readCount.add(1, ordering: .relaxed) }

    /// A statement here failed for want of the server: reads go to the primary until the next
    /// poll finds it answering.
    func markDown() { state.withLock { $0.isUp = false } }

    /// Reads its replay position (and, given the primary's, its lag).
    func refresh(primaryPosition: Int64? = nil) async {
        state.withLock { $0.askedAt = .now }
        do {
            let rows = try await client.query(
                """
                SELECT (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint,
                       CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0
                            ELSE COALESCE(extract(epoch FROM now() - pg_last_xact_replay_timestamp()), 0) END::float8
                """, logger: logger)
            var replayed: Int64?
            var seconds = 0.0
            for try await (position, lag) in rows.decode((Int64?, Double).self) {
                replayed = position
                seconds = lag
            }
            state.withLock { state in
                // A replica promoted since (no longer replaying) keeps its last position: reads
                // it could serve are the primary's now.
                state.replayed = max(state.replayed, replayed ?? -1)
                state.lagSeconds = seconds
                if let primaryPosition { state.lagBytes = max(0, primaryPosition - state.replayed) }
                state.isUp = true
            }
        } catch {
            state.withLock { $0.isUp = false }
        }
    }

    static func position(_ sql: PostgresQuery, on client: PostgresClient) async throws -> Int64 {
        var value: Int64 = 0
        for try await position in try await client.query(sql).decode(Int64.self) { value = position }
        return value
    }

    func close() -> [Task<Void, Never>] { pools.stop() }
}
