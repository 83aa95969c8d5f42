import Foundation
import Logging
import NimbusPostgres
import NimbusStorage
import PostgresNIO

/// The private PostgreSQL cluster `scripts/test.sh` starts on loopback (`scripts/postgres.sh`),
/// named by `NIMBUS_TEST_POSTGRES` (a `postgres://` URL of its admin database). Each test that
/// runs on it gets a database of its own, dropped afterwards, so tests run in parallel.
public enum PostgresTestCluster {
    /// The cluster's admin URL; nil when the suite runs without one (a bare `swift test`):
    /// the PostgreSQL cases are then left out, and `scripts/test.sh` refuses to run that way.
    public static var url: String? {
        guard let url = ProcessInfo.processInfo.environment["NIMBUS_TEST_POSTGRES"], !url.isEmpty else { return nil }
        return url
    }

    /// How long a test's storage waits for the cluster before calling it unavailable: far past
    /// a server's five seconds, because beside the whole suite on two cores one statement that
    /// writes ten thousand rows can take that long, and a test's question is whether the
    /// answer is right.
    public static let deadline: Duration = .seconds(60)

    /// Runs `body` with a new, empty database on the cluster, then drops it.
    public static func withDatabase<Value>(_ body: (PostgresLocation) async throws -> Value) async throws -> Value {
        let admin = try adminLocation()
        let location = try await create(uniquelyNamed: "nimbus_test_", on: admin)
        do {
            let value = try await body(location)
            try await execute("DROP DATABASE \(location.database) WITH (FORCE)", on: admin)
            return value
        } catch {
            try? await execute("DROP DATABASE \(location.database) WITH (FORCE)", on: admin)
            throw error
        }
    }

    /// The cluster's admin database.
    public static func adminLocation() throws -> PostgresLocation {
        guard let url else { throw Missing() }
        return try PostgresLocation(url: url)
    }

    /// A new, empty database named `prefix` and a random suffix, on the cluster of `admin`.
    static func create(uniquelyNamed prefix: String, on admin: PostgresLocation) async throws -> PostgresLocation {
        var location = admin
        location.database = prefix + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        try await execute("CREATE DATABASE \(location.database)", on: admin)
        return location
    }

    /// Runs one statement on its own connection (CREATE DATABASE cannot run in a transaction
    /// block, and a pool is more than this needs).
    public static func execute(_ sql: String, on location: PostgresLocation) async throws {
        _ = try await rows(sql, on: location)
    }

    /// A connection of its own to `location`, outside any pool: to hold a lock or a
    /// transaction open while the code under test runs. The caller closes it.
    public static func connect(to location: PostgresLocation, id: Int = 1, logger: Logger) async throws -> PostgresConnection {
        let configuration = PostgresConnection.Configuration(
            host: location.host, port: location.port, username: location.user, password: location.password,
            database: location.database, tls: .disable)
        return try await PostgresConnection.connect(configuration: configuration, id: id, logger: logger)
    }

    /// Runs one query on its own connection and returns its rows as text (NULL as nil).
    public static func rows(_ sql: String, on location: PostgresLocation) async throws -> [[String?]] {
        let logger = Logger(label: "nimbus.test.postgres")
        do {
            let connection = try await connect(to: location, logger: logger)
            do {
                var rows: [[String?]] = []
                for try await row in try await connection.query(PostgresQuery(unsafeSQL: sql), logger: logger) {
                    rows.append(try row.map { try $0.decode(String?.self) })
                }
                try await connection.close()
                return rows
            } catch {
                try? await connection.close()
                throw error
            }
        } catch let error as PSQLError {
            throw StatementFailed(sql: sql, error: error)
        }
    }

    /// The zones at `location` still pending in their databases' change feeds, by name.
    public static func zonesPendingInTheFeed(on location: PostgresLocation) async throws -> [String] {
        try await rows("SELECT name FROM zones WHERE feed_pending ORDER BY name", on: location).compactMap { $0.first ?? nil }
    }

    /// Waits up to 10 s for every zone at `location` to be stamped in its database's change
    /// feed (the stamper runs about half a second after writes commit); false if one is not.
    /// A test that compares zone rows waits here first, or a stamp may land between its reads.
    public static func feedStamped(on location: PostgresLocation) async throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(10)
        while try await !zonesPendingInTheFeed(on: location).isEmpty {
            guard ContinuousClock.now < deadline else { return false }
            try await Task.sleep(for: .milliseconds(20))
        }
        return true
    }

    /// A statement the cluster refused, with what postgres-nio's own description hides (its
    /// SQLSTATE and message: a failed test that said only "PSQLError" left a run unexplained).
    public struct StatementFailed: Error, CustomStringConvertible {
        public let sql: String
        public let sqlState: String?
        public let details: String
        init(sql: String, error: PSQLError) {
            self.sql = sql
            sqlState = error.serverInfo?[.sqlState]
            details = String(reflecting: error)
        }
        public var description: String { "the test cluster refused \(sql.prefix(80)): \(details)" }
    }

    /// Storage on the cluster for a test server: the database named after the data directory,
    /// made on first use. Every write's unit is decided twice (`checksPurity`), so a closure
    /// that reads the clock or a random source fails the suite it runs in.
    public static func opener() -> StorageOpener {
        StorageOpener(
            description: { "PostgreSQL test database " + databaseName(forDataDirectory: $0) },
            open: { directory in
                let location = try await location(forDataDirectory: directory, migrated: true)
                let home = try await PostgresStorage(location, deadline: deadline, maximumConnections: 4)
                // As `nimbus serve` composes it: the home behind `PartitionedStorage`, which
                // serves it alone until its catalog names a partition.
                return try await PostgresStorage.withPartitions(
                    home: UnitOfWorkDriver(PostgresCoarseStorage(home), checksPurity: true), catalog: home.partitionCatalog
                ) { location, replicas in
                    UnitOfWorkDriver(
                        PostgresCoarseStorage(try await PostgresStorage(location, readReplicas: replicas, deadline: deadline, maximumConnections: 4)),
                        checksPurity: true)
                }
            })
    }

    /// The database of a data directory on the cluster, made if it is not there yet: what a
    /// test server opens, and what a test gives `nimbus serve --database` or `nimbus restore`.
    /// `migrated` (a test server's): a copy of a database this process migrated once
    /// (`migratedTemplate`), so it opens already migrated. Otherwise empty, as a restore
    /// requires and as a first `nimbus serve` finds it.
    public static func location(forDataDirectory directory: String, migrated: Bool = false) async throws -> PostgresLocation {
        let admin = try adminLocation()
        var location = admin
        location.database = databaseName(forDataDirectory: directory)
        let template = migrated ? " TEMPLATE " + (try await migratedTemplate.value) : ""
        do {
            try await execute("CREATE DATABASE \(location.database)\(template)", on: admin)
        } catch let error as StatementFailed where error.sqlState == "42P04" {
            // It exists: a restart, or a second node on the same data.
        }
        return location
    }

    /// A database migrated to this build's schema, made once per test process, that every test
    /// server's database is copied from. Migrating costs a test server about 2 s on an idle
    /// machine (about a hundred statements of DDL, each a round trip and catalog writes) and several
    /// times that beside the suite, where it was most of a PostgreSQL test's time; a copy is one
    /// CREATE DATABASE (0.4 s). The copy is what a node finds after another node migrated: the
    /// migrations themselves are the driver suite's (PostgresDriverTests, on empty databases).
    /// The installation secret is taken out of the template, so each copy makes its own.
    static let migratedTemplate = Task<String, any Error> {
        let location = try await create(uniquelyNamed: "nimbus_template_", on: try adminLocation())
        let storage = try await PostgresStorage(location, deadline: deadline, maximumConnections: 1)
        await storage.close()
        try await execute("DELETE FROM meta WHERE key = 'installation_secret'", on: location)
        return location.database
    }

    /// `nimbus_dir_` and a digest of the directory's path (database names are at most 63 bytes).
    static func databaseName(forDataDirectory directory: String) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325  // FNV-1a: stable across processes, unlike Hasher
        for byte in directory.utf8 {
            hash ^= UInt64(byte)
            hash &*= 0x100_0000_01b3
        }
        return "nimbus_dir_" + String(hash, radix: 16)
    }

    public struct Missing: Error, CustomStringConvertible {
        public var description: String { "NIMBUS_TEST_POSTGRES is not set: run the suite through scripts/test.sh" }
    }
}
