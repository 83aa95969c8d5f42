import Logging
import PostgresNIO
import Synchronization

/// Where statements go: the primary's pools (`PostgresPrimary`) or a read replica's.
protocol PostgresPools: Sendable {
    var endpoint: PostgresLocation.Endpoint { get }
    /// The pool for statements without a time limit.
    var client: PostgresClient { get }
    /// A pool whose connections stop a statement after `milliseconds`.
    func client(timeout milliseconds: Int64) -> PostgresClient
}

/// The pools on one host: one for statements without a time limit, and one per
/// `statement_timeout` asked for (a server has one query budget, so in practice one more), made
/// when first asked for. The primary (`PostgresPrimary`) holds one of these for the host it
/// follows and makes another when it moves; each read replica holds one for good.
final class PostgresHostPools: PostgresPools {
    let endpoint: PostgresLocation.Endpoint
    private let location: PostgresLocation
    private let maximumConnections: Int
    private let logger: Logger
    private let main: (client: PostgresClient, running: Task<Void, Never>)
    private let timed = Mutex<[Int64: (client: PostgresClient, running: Task<Void, Never>)]>([:])

    init(_ location: PostgresLocation, _ endpoint: PostgresLocation.Endpoint, maximumConnections: Int, logger: Logger) {
        self.location = location
        self.endpoint = endpoint
        self.maximumConnections = maximumConnections
        self.logger = logger
        main = Self.start(location, endpoint, maximumConnections, logger, statementTimeout: nil)
    }

    var client: PostgresClient { main.client }

    func client(timeout milliseconds: Int64) -> PostgresClient {
        timed.withLock { timed in
            if let pool = timed[milliseconds] { return pool.client }
            let pool = Self.start(location, endpoint, maximumConnections, logger, statementTimeout: milliseconds)
            timed[milliseconds] = pool
            return pool.client
        }
    }

    /// Stops every pool (their connections close once the requests holding them are done);
    /// returns their tasks, for the caller to wait on.
    func stop() -> [Task<Void, Never>] {
        let tasks = [main.running] + timed.withLock { $0.values.map(\.running) }
        for task in tasks { task.cancel() }
        return tasks
    }

    private static func start(
        _ location: PostgresLocation, _ endpoint: PostgresLocation.Endpoint, _ maximumConnections: Int, _ logger: Logger,
        statementTimeout milliseconds: Int64?
    ) -> (client: PostgresClient, running: Task<Void, Never>) {
        var configuration = location.clientConfiguration(to: endpoint)
        configuration.options.maximumConnections = maximumConnections
        if let milliseconds {
            configuration.options.additionalStartupParameters.append(("statement_timeout", "\(milliseconds)"))
        }
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        return (client, Task { await client.run() })
    }
}
