import ArgumentParser
import Foundation
import Logging
import NimbusPostgres
import NimbusStorage

/// `nimbus partitions add|list` (docs/scale-out.md, "Partitions"): the partitions a PostgreSQL
/// home (`--database`) places logical databases on.
struct PartitionsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "partitions",
        abstract: "Add or list the PostgreSQL partitions that users' databases are spread over (docs/scale-out.md).",
        subcommands: [Add.self, List.self, Move.self], defaultSubcommand: List.self)

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add an empty PostgreSQL primary as a partition: new databases go to the partition holding the fewest.")
        @OptionGroup var data: DataOptions
        @Argument(help: "The partition's name: lower-case letters, digits, '-' and '_'.") var name: String
        @Argument(help: "Where it is: postgres://USER@HOST:PORT[,HOST:PORT…]/DATABASE[?target_session_attrs=read-write].") var url: String
        @Option(
            name: .customLong("read-replica"),
            help: "A hot standby of the partition that answers its clients' reads, as serve --read-replica does the home's (repeatable).")
        var readReplicas: [String] = []

        func run() async throws {
            do {
                let number = try await PartitionsCommand.withHome(data) { home in
                    try await home.partitionCatalog.addChecked(
                        name: name, url: url, replicas: readReplicas, at: Int64(Date().timeIntervalSince1970 * 1000))
                }
                print(
                    "added partition '\(name)' (number \(number)): running nodes learn of it within a second, without a restart, "
                        + "and from \(PartitionedStorage.newPartitionSettle.components.seconds) s on, databases made go to the partition holding the fewest.")
            } catch { throw reportFailure(error) }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the partitions, how many databases each holds and whether each answers.")
        @OptionGroup var data: DataOptions

        func run() async throws {
            do {
                let (homeLocation, partitions, counts, moves) = try await PartitionsCommand.withHome(data) { home in
                    let catalog = home.partitionCatalog
                    return (home.location, try await catalog.partitions(), try await catalog.placementCounts(), try await catalog.moves())
                }
                var rows = [["NAME", "NUMBER", "DATABASES", "URL", "STATE"]]
                rows.append([PartitionedStorage.home, "0", "\(counts[PartitionedStorage.home, default: 0])", "\(homeLocation) (--database)", "answers"])
                for partition in partitions {
                    let problem = await PostgresPartitionCatalog.problem(reaching: partition.url, logger: Logger(label: "nimbus.partitions"))
                    var shown = (try? PostgresLocation(url: partition.url)).map { "\($0)" } ?? partition.url
                    let replicas = partition.replicas.map { url in (try? PostgresLocation(url: url)).map { "\($0)" } ?? url }
                    if !replicas.isEmpty { shown += " (replicas " + replicas.joined(separator: ", ") + ")" }
                    rows.append([partition.name, "\(partition.number)", "\(counts[partition.name, default: 0])", shown, problem.map { "does not answer: \($0)" } ?? "answers"])
                }
                let widths = (0..<rows[0].count - 1).map { column in rows.map { $0[column].count }.max() ?? 0 }
                for row in rows {
                    print(row.enumerated().map { $0.offset < widths.count ? $0.element.padding(toLength: widths[$0.offset], withPad: " ", startingAt: 0) : $0.element }.joined(separator: "  "))
                }
                if partitions.isEmpty { print("no partitions: every database is the home's (add one with: nimbus partitions add NAME postgres://…)") }
                for move in moves {
                    let database = move.database
                    print(
                        "move under way: user \(database.ownerID)'s \(database.container) \(database.environment.rawValue) \(database.scope.rawValue) database from '\(move.source)' to '\(move.target)', next step \(move.step.rawValue)"
                            + (move.step.fenced ? " (its writes are fenced: run the move again to finish it)" : ""))
                }
            } catch { throw reportFailure(error) }
        }
    }

    struct Move: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Move one user's private and shared databases to another partition while the server runs.",
            discussion: """
                Each database is copied, fenced (its writes answer TRY_AGAIN_LATER while what changed during the \
                copy is copied again), switched to the new partition, and cleaned off the old one a few seconds \
                later. Interrupted at any step, the same command goes on from there.
                """)
        @OptionGroup var data: DataOptions
        @Option(help: "The user: the account's name, or its number.") var user: String
        @Option(help: "The partition to move to ('home' for the --database store).") var to: String

        func run() async throws {
            do {
                let moved = try await PartitionsCommand.withHome(data) { home in
                    guard let userID = try await PartitionsCommand.userID(user, in: home) else {
                        throw ValidationError("no account is named '\(user)' (nor numbered so): `nimbus users list` shows them")
                    }
                    let opened = OpenedPartitions(home: home)
                    do {
                        let move = PartitionMove(home: home, stepped: PartitionsCommand.crashesAfter) { try await opened.store($0) }
                        let moved = try await move.moveUser(userID, to: to)
                        await opened.close()
                        return moved
                    } catch {
                        await opened.close()
                        throw error
                    }
                }
                if moved.isEmpty { print("every database of '\(user)' is on partition '\(to)' already") }
                for database in moved {
                    let fenced = database.fenced.map { String(format: "; its writes waited %.3f s", Double($0.wholeNanoseconds) / 1e9) } ?? ""
                    print("moved \(database.database.container) \(database.database.environment.rawValue) \(database.database.scope.rawValue) database from '\(database.source)' to '\(to)' (\(database.rows) rows\(fenced))")
                }
            } catch { throw reportFailure(error) }
        }
    }

    /// The account named `user`, or numbered so.
    static func userID(_ user: String, in home: PostgresStorage) async throws -> Int64? {
        if let account = try await home.accounts.user(name: user) { return account.id }
        guard let number = Int64(user) else { return nil }
        return try await home.accounts.profile(userID: number) == nil ? nil : number
    }

    /// The tests' way to end a move at a step as `kill -9` would: NIMBUS_TEST_MOVE_CRASH_AFTER
    /// names the step after which the process kills itself.
    static let crashesAfter: @Sendable (PartitionMove.Step) async -> Void = { step in
        guard ProcessInfo.processInfo.environment["NIMBUS_TEST_MOVE_CRASH_AFTER"] == step.rawValue else { return }
        kill(getpid(), SIGKILL)
    }

    /// The partitions' stores a move opens, each once, closed together.
    actor OpenedPartitions {
        let home: PostgresStorage
        private var opened: [String: PostgresStorage] = [:]

        init(home: PostgresStorage) { self.home = home }

        func store(_ name: String) async throws -> PostgresStorage {
            if name == PartitionedStorage.home { return home }
            if let store = opened[name] { return store }
            guard let partition = try await home.partitionCatalog.partitions().first(where: { $0.name == name }) else {
                throw PartitionRefusal("there is no partition '\(name)'")
            }
            let store = try await PostgresStorage(try PostgresLocation(url: partition.url), maximumConnections: 2)
            opened[name] = store
            return store
        }

        func close() async {
            for store in opened.values { await store.close() }
            opened = [:]
        }
    }

    /// `body` over the home store `--database` names (partitions need PostgreSQL), closed
    /// afterwards whatever happens.
    static func withHome<Value>(_ data: DataOptions, _ body: (PostgresStorage) async throws -> Value) async throws -> Value {
        guard let location = try DatabaseURL.postgresLocation(data.database) else {
            throw ValidationError("partitions need a PostgreSQL home: pass --database postgres://… (or NIMBUS_DATABASE); SQLite is one store on one machine")
        }
        let home = try await PostgresStorage(location, maximumConnections: 2)
        do {
            let value = try await body(home)
            await home.close()
            return value
        } catch {
            await home.close()
            throw error
        }
    }
}
