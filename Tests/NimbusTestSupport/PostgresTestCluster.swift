import Foundation
import Logging
import NimbusPostgres
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

    /// Runs `body` with a new, empty database on the cluster, then drops it.
    public static func withDatabase<Value>(_ body: (PostgresLocation) async throws -> Value) async throws -> Value {
        guard let url else { throw Missing() }
        let admin = try PostgresLocation(url: url)
        let name = "nimbus_test_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        try await execute("CREATE DATABASE \(name)", on: admin)
        var location = admin
        location.database = name
        do {
            let value = try await body(location)
            try await execute("DROP DATABASE \(name) WITH (FORCE)", on: admin)
            return value
        } catch {
            try? await execute("DROP DATABASE \(name) WITH (FORCE)", on: admin)
            throw error
        }
    }

    /// Runs one statement on its own connection (CREATE DATABASE cannot run in a transaction
    /// block, and a pool is more than this needs).
    public static func execute(_ sql: String, on location: PostgresLocation) async throws {
        let configuration = PostgresConnection.Configuration(
            host: location.host, port: location.port, username: location.user, password: location.password,
            database: location.database, tls: .disable)
        let connection = try await PostgresConnection.connect(
            configuration: configuration, id: 1, logger: Logger(label: "nimbus.test.postgres"))
        do {
            try await connection.query(PostgresQuery(unsafeSQL: sql), logger: Logger(label: "nimbus.test.postgres"))
            try await connection.close()
        } catch {
            try? await connection.close()
            throw error
        }
    }

    public struct Missing: Error, CustomStringConvertible {
        public var description: String { "NIMBUS_TEST_POSTGRES is not set: run the suite through scripts/test.sh" }
    }
}
