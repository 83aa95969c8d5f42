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
        subcommands: [Add.self, List.self], defaultSubcommand: List.self)

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
                    "added partition '\(name)' (number \(number)): databases made from now on go to the partition holding the fewest. "
                        + "Nodes serving partitions already open it when they first meet a database placed there; restart nodes that served none (nimbus serve), which place new databases on the home until then.")
            } catch { throw reportFailure(error) }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the partitions, how many databases each holds and whether each answers.")
        @OptionGroup var data: DataOptions

        func run() async throws {
            do {
                let (homeLocation, partitions, counts) = try await PartitionsCommand.withHome(data) { home in
                    (home.location, try await home.partitionCatalog.partitions(), try await home.partitionCatalog.placementCounts())
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
            } catch { throw reportFailure(error) }
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
