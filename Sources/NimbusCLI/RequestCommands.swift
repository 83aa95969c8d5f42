import ArgumentParser
import Foundation
import NimbusServer
import NimbusStorage

/// `nimbus requests`: the lasting request log (docs/operations.md, "Logs that last").
struct RequestsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "requests", abstract: "The stored request log: search it, or export it as JSON lines.",
        subcommands: [Export.self])

    struct Export: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the request log's entries, newest first, one JSON object a line.")
        @OptionGroup var data: DataOptions
        @Option(help: "A user's name or record name.") var user: String?
        @Option(help: "Only this container's requests.") var container: String?
        @Option(help: "development or production.") var environment: String?
        // Not --database: that names where the data is (DataOptions).
        @Option(help: "The CloudKit database: public, private or shared.") var scope: String?
        @Option(help: "A part of the route, as in records/modify.") var route: String?
        @Option(help: "A serverErrorCode, of the request or of one of its items, as in CONFLICT.") var error: String?
        @Option(help: "Only entries of the last so long: 30m, 6h, 7d.") var since: String?
        @Option(help: "At most this many entries.") var limit: Int = 100_000

        func run() async throws {
            do {
                guard limit >= 1 else { throw ValidationError("--limit must be at least 1") }
                var search = RequestSearch(limit: limit)
                search.user = user
                search.container = container
                search.environment = environment
                search.database = scope
                search.route = route
                search.error = error?.uppercased()
                if let since {
                    guard let window = IntervalText.parse(since) else {
                        throw ValidationError("--since '\(since)' is not a length of time; write a number and s, m, h or d, as in 6h")
                    }
                    search.since = Int64(Date().timeIntervalSince1970 * 1_000) - window.components.seconds * 1_000
                }
                let directory = try await data.open()
                guard let store = (directory.storage as? any RequestLogStoring)?.requestLog else {
                    throw ValidationError("this storage driver keeps no request log")
                }
                let rows = try await store.requests(search)
                try await directory.storage.close()
                var output: [UInt8] = []
                for row in rows { output += row.logEntry.line }
                FileHandle.standardOutput.write(Data(output))
            } catch let error as ValidationError {
                throw error
            } catch { throw reportFailure(error) }
        }
    }
}
