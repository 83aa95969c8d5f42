import ArgumentParser
import CNimbusAllocator
import Foundation
import Logging
import NimbusCore
import NimbusPostgres
import NimbusServer
import NimbusSQLite
import NimbusStorage
import NimbusWire

@main
struct Nimbus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "nimbus",
        abstract: "CloudKit as self-hostable software: the server and its admin verbs.",
        version: NimbusVersion.current,
        subcommands: [
            Serve.self, Admin.self, Containers.self, Tokens.self, Keys.self, Users.self, Operators.self, Providers.self, Roles.self, LimitsCommand.self,
            QuotasCommand.self, AssetsCommand.self, Schema.self, APNs.self, BackupCommand.self, RestoreCommand.self, RestoreZoneCommand.self,
            RestoreUserCommand.self, RequestsCommand.self, PartitionsCommand.self,
        ])

    /// ArgumentParser's `main`, with the allocator's arenas capped before any thread starts
    /// (`MemoryReturnService.limitAllocatorArenas`), SQLite's process-wide settings made before
    /// its first connection (`SQLiteProcessSettings`), and the threads that run tasks chosen
    /// between parsing and running: the choice depends on the storage a server is given
    /// (`TaskThreads`), and must be made before any task runs.
    static func main() async {
        // Keeps jemalloc's settings in the binary (it read them before `main`).
        _ = nimbus_allocator_settings()
        MemoryReturnService.limitAllocatorArenas()
        SQLiteProcessSettings.apply()
        do {
            var command = try parseAsRoot(nil)
            try TaskThreads.install(serving: (command as? Serve)?.data.database)
            if var command = command as? any AsyncParsableCommand {
                try await command.run()
            } else {
                try command.run()
            }
        } catch {
            exit(withError: error)
        }
    }
}

/// Options every verb shares: where the data lives.
struct DataOptions: ParsableArguments {
    @Option(name: .long, help: "The data directory (env NIMBUS_DATA_DIR).")
    var dataDir: String = ProcessInfo.processInfo.environment["NIMBUS_DATA_DIR"] ?? "nimbus-data"

    @Option(
        name: .long,
        help: "Where the data is: sqlite:PATH, postgres://USER@HOST:PORT[,HOST:PORT…]/DATABASE[?target_session_attrs=read-write], or nothing for nimbus.sqlite in the data directory (env NIMBUS_DATABASE).")
    var database: String = ProcessInfo.processInfo.environment["NIMBUS_DATABASE"] ?? ""

    @Option(name: .long, help: "SQLite commit durability: full (survives power loss) or normal (survives crashes).")
    var sync: String = ProcessInfo.processInfo.environment["NIMBUS_SYNC"] ?? "full"

    @Option(
        name: .long,
        help: "On PostgreSQL, the connections each of this process's pools may open: one pool for requests and one for queries, on the primary and on each read replica (env NIMBUS_POSTGRES_CONNECTIONS).")
    var postgresConnections: Int = Int(ProcessInfo.processInfo.environment["NIMBUS_POSTGRES_CONNECTIONS"] ?? "")
        ?? PostgresStorage.defaultMaximumConnections

    @Option(name: .long, help: ArgumentHelp("PBKDF2 rounds for new passwords.", visibility: .hidden))
    var passwordRounds: Int = Int(ProcessInfo.processInfo.environment["NIMBUS_PASSWORD_ROUNDS"] ?? "")
        ?? Credentials.defaultPasswordRounds

    @Option(
        name: .long,
        help: "Where asset bytes go: files (under the data directory) or s3://ACCESS_KEY:SECRET@HOST:PORT/BUCKET[/PREFIX]?region=REGION[&tls=false] (env NIMBUS_ASSET_STORE).")
    var assetStore: String = ProcessInfo.processInfo.environment["NIMBUS_ASSET_STORE"] ?? "files"

    /// `readReplicas`: `serve --read-replica`, for a PostgreSQL store only.
    func configuration(readReplicas: [String] = []) throws -> ServerConfiguration {
        guard let mode = SQLiteStorage.SynchronousMode(rawValue: sync.uppercased()) else {
            throw ValidationError("--sync must be full or normal")
        }
        guard postgresConnections >= 2 else {
            throw ValidationError("--postgres-connections must be at least 2: a zone's writer holds one for its transaction while others wait")
        }
        var configuration = ServerConfiguration(
            storage: try DatabaseURL.opener(
                database, readReplicas: readReplicas, postgresConnections: postgresConnections, synchronous: mode))
        configuration.dataDirectory = dataDir
        guard passwordRounds >= 1 else { throw ValidationError("--password-rounds must be positive") }
        configuration.service.passwordRounds = passwordRounds
        // Keeping record versions is the server's setting (serve --record-history-days): a
        // verb that opens the store leaves it as it is.
        configuration.service.recordHistoryDays = nil
        do {
            configuration.assetStore = try AssetStoreChoice(parsing: assetStore)
        } catch let error as CloudKitError {
            throw ValidationError(error.reason)
        }
        return configuration
    }

    @Flag(help: "Make a new store when the data directory holds none (serve makes one by itself).")
    var create = false

    func open() async throws -> DataDirectory {
        let configuration = try configuration()
        try requireStore(configuration)
        return try await DataDirectory.open(configuration)
    }

    /// Refuses a data directory that holds no store, saying where it looked: a mistyped or
    /// forgotten `--data-dir` would otherwise make a new, empty store and answer from it as if
    /// all were well. Only `serve` and `--create` make one.
    func requireStore(_ configuration: ServerConfiguration) throws {
        guard !create, let file = configuration.storage.storeFile?(configuration.dataDirectory),
            !FileManager.default.fileExists(atPath: file)
        else { return }
        FileHandle.standardError.write(
            Data(
                "nimbus: no Nimbus store at \(file); name the data directory the server uses with --data-dir (or NIMBUS_DATA_DIR), or add --create to make a new store there\n"
                    .utf8))
        throw ExitCode.failure
    }
}

func parseEnvironment(_ text: String) throws -> NimbusStorage.Environment {
    guard let environment = NimbusStorage.Environment(rawValue: text) else {
        throw ValidationError("--environment must be development or production")
    }
    return environment
}

/// Prints a Nimbus error as a person reads it, and exits non-zero.
func reportFailure(_ error: any Error) -> ExitCode {
    if let exit = error as? ExitCode { return exit }  // said already
    if let error = error as? CloudKitError {
        FileHandle.standardError.write(Data("nimbus: \(error.reason)\n".utf8))
    } else {
        FileHandle.standardError.write(Data("nimbus: \(error)\n".utf8))
    }
    return ExitCode.failure
}
