import Foundation
import NimbusPostgres

/// A PostgreSQL primary with a synchronous streaming standby of its own, on loopback
/// (`scripts/postgres-standby.sh`), for the tests that kill, promote, pause and read from
/// standbys. Each suite takes its own ports, so suites run side by side.
public struct PostgresStandbyPair: Sendable {
    public let primaryPort: Int
    public var standbyPort: Int { primaryPort + 1 }
    /// Both hosts, `target_session_attrs=read-write`: what a node following the primary uses.
    public let url: String

    public var location: PostgresLocation { get throws { try PostgresLocation(url: url) } }
    public var primary: PostgresLocation { get throws { try Self.single(primaryPort) } }
    public var standby: PostgresLocation { get throws { try Self.single(standbyPort) } }

    static func single(_ port: Int) throws -> PostgresLocation {
        try PostgresLocation(url: "postgres://postgres@127.0.0.1:\(port)/postgres?sslmode=disable")
    }

    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("scripts/postgres-standby.sh").path

    /// Runs a verb of the script (start, kill-primary, promote, stop) for this pair's ports.
    @discardableResult
    public static func run(_ verb: String, primaryPort: Int) async throws -> String {
        let (status, output) = try await ExternalProcess.run(["env", "NIMBUS_PG_PRIMARY_PORT=\(primaryPort)", "bash", script, verb])
        let text = String(decoding: output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard status == 0 else { throw TestFailure("postgres-standby.sh \(verb) exited \(status): \(text)") }
        return text
    }

    @discardableResult
    public func run(_ verb: String) async throws -> String { try await Self.run(verb, primaryPort: primaryPort) }

    /// A location on `server` (the primary's or the standby's) naming `database`.
    public func on(_ server: PostgresLocation, database: String) -> PostgresLocation {
        var location = server
        location.database = database
        return location
    }

    /// Starts a pair on `primaryPort` and the next port, runs `body`, and stops both.
    public static func with<T>(primaryPort: Int, _ body: (PostgresStandbyPair) async throws -> T) async throws -> T {
        let pair = PostgresStandbyPair(primaryPort: primaryPort, url: try await run("start", primaryPort: primaryPort))
        do {
            let value = try await body(pair)
            try await pair.run("stop")
            return value
        } catch {
            _ = try? await pair.run("stop")
            throw error
        }
    }
}
