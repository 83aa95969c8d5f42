import Logging
import NimbusStorage
import PostgresNIO
import Synchronization

/// The connection pools a node's statements go through, on the host that serves them now.
///
/// A URL with one host and no session attributes (`PostgresLocation.followsPrimary` false) gets
/// one pool on that host for good: a server that restarts is the same server, and the pool
/// reconnects by itself. A URL naming a primary and its standbys (libpq's
/// `h1,h2,h3/db?target_session_attrs=read-write`) gets a pool on the first host that has the
/// attributes asked for; when a statement finds that host gone or no longer accepting writes
/// (`suspect()`), one search runs in the background, probing the hosts in the URL's order until
/// one qualifies, and the node's pools move there. Requests in the gap fail with
/// `StorageError.unavailable` (clients see `TRY_AGAIN_LATER` with `retryAfter`); nothing needs a
/// restart. Which writes survive a failover is the cluster's promise, not the node's: with
/// synchronous replication, every commit the node acknowledged is on the standby promoted
/// (docs/scale-out.md, "Failover").
final class PostgresPrimary: Sendable {
    let location: PostgresLocation
    private let maximumConnections: Int
    private let logger: Logger
    /// How long a moved-from host's pools live on (`retiring`).
    private let retireAfter: Duration

    private struct State {
        /// The pools on the host statements go to now.
        var host: PostgresHostPools
        var searching = false
        var lastSearch: ContinuousClock.Instant?
        var closed = false
        /// Moved-from pools waiting to stop (`retiring`); `close()` stops them at once.
        var retired: [Task<Void, Never>] = []
    }
    private let state: Mutex<State>

    /// How soon after a search another may start: deadlines missed under load also call
    /// `suspect()`, and a healthy primary should cost one probe a second at most, not a storm.
    static let searchInterval: Duration = .seconds(1)

    init(_ location: PostgresLocation, maximumConnections: Int, retireAfter: Duration, logger: Logger) async throws {
        self.location = location
        self.retireAfter = retireAfter
        self.maximumConnections = maximumConnections
        self.logger = logger
        let endpoint = location.followsPrimary ? try await Self.find(in: location, logger: logger) : location.endpoints[0]
        state = Mutex(State(host: PostgresHostPools(location, endpoint, maximumConnections: maximumConnections, logger: logger)))
    }

    private var host: PostgresHostPools { state.withLock { $0.host } }

    /// The host statements go to now.
    var endpoint: PostgresLocation.Endpoint { host.endpoint }

    var client: PostgresClient { host.client }

    func client(timeout milliseconds: Int64) -> PostgresClient { host.client(timeout: milliseconds) }

    /// A statement found the host gone or read-only: look for the primary again, unless this
    /// node does not follow one, a search is running, or one ended less than a second ago.
    func suspect() {
        guard location.followsPrimary else { return }
        let starts = state.withLock { state -> Bool in
            guard !state.closed, !state.searching else { return false }
            if let last = state.lastSearch, ContinuousClock.now - last < Self.searchInterval { return false }
            state.searching = true
            return true
        }
        if starts { Task { await search() } }
    }

    private func search() async {
        var pause: Duration = .milliseconds(100)
        while true {
            let found = try? await Self.find(in: location, logger: logger)
            let settled = state.withLock { state -> Bool in
                if state.closed {
                    state.searching = false
                    return true
                }
                guard let found else { return false }
                if found != state.host.endpoint {
                    logger.warning(
                        "PostgreSQL: following the primary to \(found) (it was \(state.host.endpoint))",
                        metadata: ["url": "\(location)"])
                    state.retired.append(retiring(state.host))
                    state.host = PostgresHostPools(location, found, maximumConnections: maximumConnections, logger: logger)
                }
                state.searching = false
                state.lastSearch = .now
                return true
            }
            if settled { return }
            try? await Task.sleep(for: pause)
            pause = min(pause * 2, .seconds(1))
        }
    }

    /// Stops a moved-from host's pools once the requests that took a connection from them
    /// before the move have had their deadline (a pool shut down under a request fails it with
    /// an error of the pool's own, not the server's).
    private func retiring(_ host: PostgresHostPools) -> Task<Void, Never> {
        let delay = retireAfter
        return Task {
            try? await Task.sleep(for: delay)
            for pool in host.stop() { await pool.value }
        }
    }

    /// Stops every pool; returns their tasks, for the caller to wait on.
    func close() -> [Task<Void, Never>] {
        state.withLock { state in
            state.closed = true
            // A retiring pool's wait ends early: its task's sleep is cancelled with it.
            for task in state.retired { task.cancel() }
            return state.host.stop() + state.retired
        }
    }

    // MARK: Finding the host

    /// The first host of the URL, in its order, with the session attributes it asks for;
    /// `StorageError.unavailable` naming what each host said when none has them.
    static func find(in location: PostgresLocation, logger: Logger) async throws -> PostgresLocation.Endpoint {
        var said: [String] = []
        for endpoint in location.endpoints {
            // Bounded: a host that accepts the connection and then says nothing must not hold
            // the search (or a node's start) past the probe's time.
            let answer = try? await Deadline.run(
                within: probeLimit, { await probe(endpoint, of: location, logger: logger) },
                timeout: { StorageError.unavailable("no answer within \(probeLimit)") })
            switch answer ?? .refused("did not answer within \(probeLimit)") {
            case .qualifies: return endpoint
            case .refused(let reason): said.append("\(endpoint) \(reason)")
            }
        }
        throw StorageError.unavailable(
            "no host of \(location) is a server this node may use (target_session_attrs=\(location.sessionAttributes.rawValue)): "
                + said.joined(separator: "; "))
    }

    private enum Probe: Sendable { case qualifies, refused(String) }

    static let probeLimit: Duration = .seconds(3)

    /// One connection to one host, asked whether it is in recovery and whether it takes writes.
    private static func probe(_ endpoint: PostgresLocation.Endpoint, of location: PostgresLocation, logger: Logger) async -> Probe {
        do {
            return try await location.withConnection(to: endpoint, logger: logger) { connection in
                await check(connection, for: location.sessionAttributes, logger: logger)
            }
        } catch {
            return .refused("does not answer (\(PostgresStorage.normalized(error)))")
        }
    }

    private static func check(
        _ connection: PostgresConnection, for attributes: PostgresLocation.SessionAttributes, logger: Logger
    ) async -> Probe {
        if attributes == .any { return .qualifies }
        do {
            let rows = try await connection.query(
                "SELECT pg_is_in_recovery(), current_setting('default_transaction_read_only')", logger: logger
            ).collect()
            guard let row = rows.first else { return .refused("gave no answer") }
            let (recovering, readOnly) = try row.decode((Bool, String).self)
            if recovering { return .refused("is a standby (in recovery)") }
            if attributes == .readWrite && readOnly == "on" { return .refused("is read-only") }
            return .qualifies
        } catch {
            return .refused("failed the check (\(PostgresStorage.normalized(error)))")
        }
    }
}
