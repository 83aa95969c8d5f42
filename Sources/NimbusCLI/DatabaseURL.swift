import ArgumentParser
import Foundation
import NimbusPostgres
import NimbusSQLite
import NimbusStorage

/// `--database` / `NIMBUS_DATABASE`: which storage driver, and where. The CLI is the one place
/// that names a driver.
///
/// - empty (the default): SQLite in the data directory (`nimbus.sqlite`);
/// - `sqlite:PATH` (also `sqlite://PATH`): SQLite at PATH;
/// - `postgres://…` / `postgresql://…`: PostgreSQL (`PostgresLocation`); several nodes may
///   name the same one (docs/scale-out.md).
enum DatabaseURL {
    /// `postgresConnections`: each PostgreSQL pool's size (`--postgres-connections`); SQLite has
    /// no pools and ignores it, as PostgreSQL ignores `--sync`.
    static func opener(
        _ text: String, readReplicas: [String] = [], postgresConnections: Int = PostgresStorage.defaultMaximumConnections,
        synchronous: SQLiteStorage.SynchronousMode
    ) throws -> StorageOpener {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let postgres = try postgresLocation(trimmed)
        guard readReplicas.isEmpty || postgres != nil else {
            throw ValidationError("--read-replica needs a PostgreSQL --database (postgres://…): SQLite's readers are in the process already")
        }
        if trimmed.isEmpty { return SQLiteStorage.opener(synchronous: synchronous) }
        guard let colon = trimmed.firstIndex(of: ":") else {
            throw ValidationError("--database '\(trimmed)' names no driver; write sqlite:PATH (or leave it out for nimbus.sqlite in the data directory)")
        }
        let scheme = trimmed[..<colon].lowercased()
        var rest = String(trimmed[trimmed.index(after: colon)...])
        switch scheme {
        case "sqlite":
            if rest.hasPrefix("//") { rest.removeFirst(2) }
            guard !rest.isEmpty else { throw ValidationError("--database sqlite: needs a file path, as in sqlite:/var/lib/nimbus/nimbus.sqlite") }
            return SQLiteStorage.opener(path: rest, synchronous: synchronous)
        case "postgres", "postgresql":
            guard let location = postgres else { throw ValidationError("--database '\(trimmed)' is not a postgres:// URL") }
            let replicas: [PostgresLocation]
            do {
                replicas = try readReplicas.map { try PostgresLocation(url: $0) }
            } catch {
                throw ValidationError("--read-replica: \(error)")
            }
            return PostgresStorage.opener(location, readReplicas: replicas, maximumConnections: postgresConnections)
        default:
            throw ValidationError("--database '\(scheme):' is not a driver Nimbus knows; write sqlite:PATH")
        }
    }

    /// The PostgreSQL location `--database` names; nil when it names another driver.
    static func postgresLocation(_ text: String) throws -> PostgresLocation? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard ["postgres:", "postgresql:"].contains(where: { trimmed.lowercased().hasPrefix($0) }) else { return nil }
        do {
            return try PostgresLocation(url: trimmed)
        } catch {
            throw ValidationError("--database: \(error)")
        }
    }
}
