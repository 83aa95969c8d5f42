import Foundation
import Logging
import NimbusStorage
import PostgresNIO

/// Backups of one Nimbus database on PostgreSQL (docs/operations.md), with the engine's own
/// tools: `pg_dump` in its custom format, run on a snapshot this driver exports, so the asset
/// blobs and migrations it reads match the dump exactly; `pg_restore` into an empty database,
/// in one transaction. A whole cluster is the job of a physical backup tool (pg_basebackup,
/// pgBackRest), not of Nimbus.
extension PostgresStorage: StoreCopying {
    /// The dump's name inside a backup.
    static let copyFileName = "nimbus.pgdump"

    public func copyStore(into directory: String) async throws -> StoreCopy {
        let target = (directory as NSString).appendingPathComponent(Self.copyFileName)
        let connection = try await connect()
        do {
            // The snapshot lives as long as this transaction: pg_dump reads through it.
            try await connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", logger: logger)
            var snapshot = ""
            for try await id in try await connection.query("SELECT pg_export_snapshot()", logger: logger).decode(String.self) {
                snapshot = id
            }
            var migrations: [String] = []
            for try await name in try await connection.query(
                "SELECT name FROM nimbus_migrations ORDER BY applied_at, name", logger: logger
            ).decode(String.self) {
                migrations.append(name)
            }
            var blobKeys: [String] = []
            for try await key in try await connection.query("SELECT blob_key FROM asset_blobs ORDER BY blob_key", logger: logger)
                .decode(String.self)
            {
                blobKeys.append(key)
            }
            try await PostgresTools.run(
                "pg_dump",
                ["--format=custom", "--no-owner", "--no-privileges", "--snapshot=\(snapshot)", "--file=\(target)", location.description],
                location: location)
            try await connection.query("COMMIT", logger: logger)
            try await connection.close()
            return StoreCopy(engine: "postgres", files: [Self.copyFileName], migrations: Self.ordered(migrations), blobKeys: blobKeys)
        } catch {
            try? await connection.close()
            throw Self.normalized(error)
        }
    }

    /// Migrations applied in one transaction share its timestamp: this build's order, then any
    /// it does not know.
    static func ordered(_ applied: [String]) -> [String] {
        let known = PostgresMigrations.all.map(\.name)
        return known.filter(applied.contains) + applied.filter { !known.contains($0) }
    }

    private func connect() async throws -> PostgresConnection {
        do {
            return try await PostgresConnection.connect(
                configuration: try location.connectionConfiguration(to: primary.endpoint), id: 1, logger: logger)
        } catch {
            throw Self.normalized(error)
        }
    }

    /// Restores a dump into the database `location` names, which must exist and hold no tables.
    static func restore(_ copy: StoreCopy, from backupDirectory: String, to location: PostgresLocation) async throws {
        guard copy.files == [copyFileName] else {
            throw StoreCopyRefusal("the backup's PostgreSQL copy should be one file, \(copyFileName); it lists \(copy.files)")
        }
        var logger = Logger(label: "nimbus.postgres.restore")
        logger.logLevel = .warning
        let connection: PostgresConnection
        do {
            let endpoint = location.followsPrimary ? try await PostgresPrimary.find(in: location, logger: logger) : location.endpoints[0]
            connection = try await PostgresConnection.connect(
                configuration: try location.connectionConfiguration(to: endpoint), id: 1, logger: logger)
        } catch {
            throw StoreCopyRefusal(
                "cannot connect to \(location) (\(normalized(error))); a restore goes into an existing, empty database: create it first (createdb)")
        }
        var tables = 0
        do {
            for try await count in try await connection.query(
                "SELECT count(*)::int FROM pg_tables WHERE schemaname = 'public'", logger: logger
            ).decode(Int.self) {
                tables = count
            }
            try await connection.close()
        } catch {
            try? await connection.close()
            throw normalized(error)
        }
        guard tables == 0 else {
            throw StoreCopyRefusal(
                "the database \(location.database) already holds \(tables) tables: a restore never overwrites; name a new, empty database")
        }
        try await PostgresTools.run(
            "pg_restore",
            [
                "--no-owner", "--no-privileges", "--single-transaction", "--exit-on-error", "--dbname=\(location.description)",
                (backupDirectory as NSString).appendingPathComponent(copyFileName),
            ],
            location: location)
        // Opening migrates forward.
        let storage = try await PostgresStorage(location)
        do {
            try await storage.client.withTransaction(logger: logger) { connection in
                // `restoreSequenceJump` for every sequence a change or notification token counts
                // in; zones' positions in their database's feed stay (see SQLite's).
                try await connection.query("UPDATE databases SET sequence = sequence + \(restoreSequenceJump)", logger: logger)
                try await connection.query("UPDATE zones SET record_sequence = record_sequence + \(restoreSequenceJump)", logger: logger)
                try await connection.query(
                    """
                    SELECT setval(s, nextval(s) + \(restoreSequenceJump))
                    FROM pg_get_serial_sequence('notifications', 'sequence') AS s
                    """, logger: logger)
            }
        } catch {
            await storage.close()
            throw normalized(error)
        }
        await storage.close()
    }

    static func restorer(_ location: PostgresLocation) -> StoreRestorer {
        StoreRestorer(engine: "postgres", migrations: PostgresMigrations.all.map(\.name)) { copy, backupDirectory, _ in
            try await restore(copy, from: backupDirectory, to: location)
        }
    }
}

extension PostgresCoarseStorage: StoreCopying {
    public func copyStore(into directory: String) async throws -> StoreCopy { try await storage.copyStore(into: directory) }
}

/// PostgreSQL's client programs (pg_dump, pg_restore), found on PATH or in Debian's
/// /usr/lib/postgresql/VERSION/bin, run to completion.
enum PostgresTools {
    static func run(_ tool: String, _ arguments: [String], location: PostgresLocation) async throws {
        let executable = try find(tool)
        var settings = ProcessInfo.processInfo.environment
        if let password = location.password { settings["PGPASSWORD"] = password }
        let environment = settings
        let error: String = try await BlockingWork.run {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = arguments
            process.environment = environment
            let pipe = Pipe()
            process.standardError = pipe
            process.standardOutput = FileHandle.nullDevice
            try process.run()
            let data = pipe.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            guard process.terminationStatus == 0 else { return String(decoding: data, as: UTF8.self) }
            return ""
        }
        guard error.isEmpty else {
            throw StoreCopyRefusal("\(tool) failed: \(error.trimmingCharacters(in: .whitespacesAndNewlines))")
        }
    }

    static func find(_ tool: String) throws -> String {
        let path = (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":").map(String.init)
        let debian = ((try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? [])
            .sorted { (Int($0) ?? 0) > (Int($1) ?? 0) }.map { "/usr/lib/postgresql/\($0)/bin" }
        for directory in path + debian {
            let candidate = (directory as NSString).appendingPathComponent(tool)
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        throw StoreCopyRefusal("\(tool) is not installed (PostgreSQL's client programs: apt install postgresql-client)")
    }
}

extension PostgresStorage: StoreFigures {
    public func storeBytes() async throws -> Int64 {
        var bytes: Int64 = 0
        for row in try await rows("SELECT pg_database_size(current_database())") { bytes = try row.decode(Int64.self) }
        return bytes
    }

    public var poolUse: PoolUse? {
        let pending = pending.load(ordering: .relaxed)
        let holding = holding.load(ordering: .relaxed)
        return PoolUse(inUse: holding, waiting: max(0, pending - holding), maximum: maximumConnections)
    }
}

extension PostgresCoarseStorage: StoreFigures {
    public func storeBytes() async throws -> Int64 { try await storage.storeBytes() }
    public var poolUse: PoolUse? { storage.poolUse }
    public var replicas: [ReplicaFigures] { storage.replicaFigures }
}
