import Foundation
import NIOCore
import NimbusTestSupport
@testable import NimbusServer
import NimbusWire
import Testing

/// Kills a real `nimbus serve` process with SIGKILL in the middle of concurrent writes,
/// restarts it on the same data directory, and checks that every acknowledged write is
/// there and no atomic batch is there in part.
@Suite struct CrashRecoveryTests {
    @Test func acknowledgedWritesSurviveKillNineAndNoAtomicBatchIsPartial() async throws {
        let (dataDirectory, container, apiToken) = try await Self.prepareDataDirectory()
        defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
        let (first, client) = try await Self.serveSignedIn(dataDirectory, container: container, apiToken: apiToken)
        try await expectEqual(client.createZone("Crash").status, 200)

        let (acknowledged, attempted) = await Self.writeUntilKilled(client, zone: "Crash", server: first)
        #expect(acknowledged.count > 10, "too few writes before the kill to tell anything")

        let second = try await NimbusProcess.serve(dataDirectory: dataDirectory)
        defer { second.stop() }
        var reader = client
        reader = APIClient(
            baseURL: second.baseURL, container: container, environment: .development, apiToken: apiToken,
            webAuthToken: client.webAuthToken, userRecordName: nil)
        var present = Set<String>()
        let allNames = attempted.flatMap { $0 }
        for start in stride(from: 0, to: allNames.count, by: 200) {
            let chunk = Array(allNames[start..<min(start + 200, allNames.count)])
            let lookup = try await reader.lookup(zone: "Crash", chunk)
            expectEqual(lookup.status, 200, "\(lookup.text)")
            for record in lookup.records where record.errorCode == nil {
                if let name = record["recordName"]?.stringValue { present.insert(name) }
            }
        }
        for batch in acknowledged {
            #expect(batch.allSatisfy(present.contains), "acknowledged batch lost: \(batch)")
        }
        for batch in attempted {
            let count = batch.filter(present.contains).count
            #expect(count == 0 || count == batch.count, "partial atomic batch: \(batch) has \(count) of 5")
        }
    }

    /// A data directory with a container, an API token and the user "crash", made by the CLI.
    /// On the suite's PostgreSQL pass (`TestStorage`), the data is in the directory's database
    /// on the test cluster, named to every `nimbus` verb with `--database`.
    static func prepareDataDirectory() async throws -> (dataDirectory: String, container: String, apiToken: String) {
        let dataDirectory = NSTemporaryDirectory() + "nimbus-crash-" + UUID().uuidString
        let container = "iCloud.test.crash"
        let data = try await NimbusProcess.dataArguments(dataDirectory)
        _ = try NimbusProcess.run(["containers", "create", container, "--create"] + data)
        let apiToken = try NimbusProcess.run(["tokens", "create", "--container", container] + data)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        expectEqual(apiToken.count, 64)
        _ = try NimbusProcess.run(["users", "create", "crash", "--password", "crash-test-pw"] + data)
        return (dataDirectory, container, apiToken)
    }

    /// A `nimbus serve` process on the directory, and a client signed in as "crash".
    static func serveSignedIn(
        _ dataDirectory: String, container: String, apiToken: String, _ extra: [String] = []
    ) async throws -> (NimbusProcess.Server, APIClient) {
        let server = try await NimbusProcess.serve(dataDirectory: dataDirectory, extra)
        var client = APIClient(
            baseURL: server.baseURL, container: container, environment: .development, apiToken: apiToken,
            webAuthToken: nil, userRecordName: nil)
        client.webAuthToken = try #require(try await client.signIn("crash", password: "crash-test-pw").json["ckWebAuthToken"]?.stringValue)
        return (server, client)
    }

    /// Sixteen tasks write atomic batches of five records into `zone` until the server, killed
    /// with SIGKILL after 1.5 s, stops answering; the batches it acknowledged and all attempted.
    static func writeUntilKilled(
        _ client: APIClient, zone: String, server: NimbusProcess.Server
    ) async -> (acknowledged: [[String]], attempted: [[String]]) {
        var writer = client
        writer.timeoutSeconds = 5
        // At least 1.5 s of writes and 20 acknowledged batches before the kill (at most 20 s):
        // on PostgreSQL beside the rest of the suite, 1.5 s once held only 4.
        let deadline = Date().addingTimeInterval(1.5)
        let latest = Date().addingTimeInterval(20)
        let acknowledgedCount = LockedCounter()
        return await withTaskGroup(of: ([[String]], [[String]]).self) { [writer] group in
            for task in 0..<16 {
                group.addTask {
                    var acknowledged: [[String]] = []
                    var attempted: [[String]] = []
                    var batch = 0
                    while true {
                        let names = (0..<5).map { "t\(task)-b\(batch)-r\($0)" }
                        attempted.append(names)
                        batch += 1
                        guard let response = try? await writer.modify(zone: zone, names.map { Op.create($0, ["n": Op.field(.int(Int64(batch)))]) }) else {
                            break  // the server is gone
                        }
                        if response.status == 200, response.records.allSatisfy({ $0.errorCode == nil }) {
                            acknowledged.append(names)
                            acknowledgedCount.increment()
                        }
                    }
                    return (acknowledged, attempted)
                }
            }
            group.addTask {
                while Date() < deadline || (acknowledgedCount.value < 20 && Date() < latest) {
                    try? await Task.sleep(for: .milliseconds(20))
                }
                server.kill()
                return ([], [])
            }
            var all: ([[String]], [[String]]) = ([], [])
            for await outcome in group {
                all.0 += outcome.0
                all.1 += outcome.1
            }
            return all
        }
    }

    /// The same kill during writes, with a query subscription watching them: after the
    /// restart, the subscriber's collection holds a notification for every acknowledged
    /// record (changes committed but not yet matched when the process died were in the
    /// outbox, written with the records).
    @Test func everyAcknowledgedWriteIsNotifiedAfterKillNine() async throws {
        let (dataDirectory, container, apiToken) = try await Self.prepareDataDirectory()
        defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
        let (first, client) = try await Self.serveSignedIn(dataDirectory, container: container, apiToken: apiToken)
        try await expectEqual(client.createZone("Watched").status, 200)
        // The record type exists once a record of it is saved (development's just-in-time schema).
        #expect(try await client.modify(zone: "Watched", [Op.create("first")]).records.first?.errorCode == nil)
        let subscribed = try await client.post(
            "private", "subscriptions/modify",
            ["operations": [["operationType": "create", "subscription": SubscriptionTests.querySubscription(
                "every-create", type: "Note", firesOn: ["create"], zone: "Watched")]]])
        #expect(subscribed.status == 200 && !subscribed.text.contains("serverErrorCode"), "\(subscribed.text)")

        let (acknowledged, _) = await Self.writeUntilKilled(client.onDevice("writer"), zone: "Watched", server: first)
        #expect(acknowledged.count > 10, "too few writes before the kill to tell anything")

        let second = try await NimbusProcess.serve(dataDirectory: dataDirectory)
        defer { second.stop() }
        let reader = APIClient(
            baseURL: second.baseURL, container: container, environment: .development, apiToken: apiToken,
            webAuthToken: client.webAuthToken, userRecordName: nil
        ).onDevice("reader")
        let expected = Set(acknowledged.flatMap { $0 })
        var notified = Set<String>()
        let deadline = Date().addingTimeInterval(20)
        while !expected.isSubset(of: notified) && Date() < deadline {
            notified = []
            var token: JSON?
            while true {
                var body: JSONObject = ["resultsLimit": 200]
                if let token { body["syncToken"] = token }
                let page = try await reader.device("notifications/changes", .object(body))
                expectEqual(page.status, 200, "\(page.text)")
                for entry in page.json["notifications"]?.arrayValue ?? [] {
                    if let name = entry["payload"]?["ck"]?["qry"]?["rid"]?.stringValue { notified.insert(name) }
                }
                token = page.json["syncToken"]
                guard page.json["moreComing"] == true else { break }
            }
            if !expected.isSubset(of: notified) { try await Task.sleep(for: .milliseconds(200)) }
        }
        let missing = expected.subtracting(notified).sorted()
        let firstPage = try await reader.device("notifications/changes", ["resultsLimit": 2]).text
        expectEqual(missing.count, 0, "\(missing.count) of \(expected.count) acknowledged records have no notification, such as \(missing.prefix(5)); \(firstPage)")
    }
}

@Suite struct ServeCommandTests {
    @Test func serveWithDefaultsCreatesDataDirectoryPrintsTokenAndStopsOnSIGTERM() async throws {
        let directory = NSTemporaryDirectory() + "nimbus-serve-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // Only the port is set (tests run side by side); the data directory is the default.
        let server = try await NimbusProcess.serve(arguments: ["serve", "--port", "0"], workingDirectory: directory)
        #expect(FileManager.default.fileExists(atPath: directory + "/nimbus-data/nimbus.sqlite"))
        let token = try #require(server.output.split(separator: "\n").first { $0.hasPrefix("development API token: ") })
            .split(separator: " ").last.map(String.init)
        let client = APIClient(
            baseURL: server.baseURL, container: "iCloud.nimbus.default", environment: .development, apiToken: token,
            webAuthToken: nil, userRecordName: nil)
        try await expectEqual(client.get("public", "zones/list").status, 200)
        server.stop()
        #expect(server.process.exitedNormally)
        expectEqual(server.process.terminationStatus, 0)
        // The first hour (issue 38): where the dashboard is, and how to get an operator.
        #expect(server.output.contains("dashboard: \(server.baseURL)/dashboard"), "\(server.output)")
        #expect(server.output.contains("first operator: open http://127.0.0.1:") && server.output.contains("/dashboard#setup="), "\(server.output)")
        // A second start reuses the directory and prints the same token.
        let again = try await NimbusProcess.serve(arguments: ["serve", "--port", "0"], workingDirectory: directory)
        #expect(again.output.contains(token ?? "missing"))
        again.stop()
        // Once there is an operator the hint goes; a revoked token is never printed.
        let data = ["--data-dir", directory + "/nimbus-data"]
        _ = try await Task.detached { try NimbusProcess.run(["operators", "create", "olga"] + data) }.value
        _ = try await Task.detached { try NimbusProcess.run(["tokens", "revoke", "--container", "iCloud.nimbus.default"] + data) }.value
        let third = try await NimbusProcess.serve(arguments: ["serve", "--port", "0"], workingDirectory: directory)
        defer { third.stop() }
        #expect(!third.output.contains("first operator:") && !third.output.contains(token ?? "missing"), "\(third.output)")
        #expect(third.output.contains("development API token: revoked; make one with: nimbus tokens create"), "\(third.output)")
    }
}

@Suite struct DatabaseOptionTests {
    /// Runs a verb that should fail; its exit status and what it wrote to standard error.
    static func failing(_ arguments: [String], environment variables: [String: String] = [:]) throws -> (status: Int32, error: String) {
        let process = try ChildProcess(
            NimbusProcess.binary, arguments, environment: NimbusProcess.environment.merging(variables) { $1 }, output: .discard,
            error: .pipe)
        let data = process.standardError!.readDataToEndOfFile()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    /// A mistyped or forgotten `--data-dir` must not make a new, empty store and answer from it:
    /// every verb but `serve` refuses a directory without one, naming where it looked, unless
    /// told `--create`; `backup` and `assets` verbs too.
    @Test func aDataDirectoryWithoutAStoreIsRefusedUnlessCreated() throws {
        let directory = NSTemporaryDirectory() + "nimbus-no-store-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for verb in [["containers", "list"], ["operators", "list"], ["schema", "show", "--container", "iCloud.x"],
                     ["backup", "--to", directory + "-backup"]] {
            let (status, error) = try Self.failing(verb + ["--data-dir", directory])
            expectEqual(status, 1, "\(verb)")
            #expect(error.contains("no Nimbus store at \(directory)/nimbus.sqlite") && error.contains("--create"), "\(verb): \(error)")
            expectEqual(error.split(separator: "\n").count, 1, "\(error)")
        }
        #expect(!FileManager.default.fileExists(atPath: directory + "/nimbus.sqlite"))
        let elsewhere = directory + "/custom.sqlite"
        let (status, error) = try Self.failing(["containers", "list", "--data-dir", directory, "--database", "sqlite:" + elsewhere])
        #expect(status == 1 && error.contains("no Nimbus store at \(elsewhere)"), "\(error)")
        // Asked for, it is made; then the same verb finds it without being told.
        _ = try NimbusProcess.run(["containers", "create", "iCloud.x", "--create", "--data-dir", directory])
        #expect(try NimbusProcess.run(["containers", "list", "--data-dir", directory]).contains("iCloud.x"))
    }

    @Test func aSQLitePathPutsTheDatabaseThereAndTheServerSaysSo() async throws {
        let directory = NSTemporaryDirectory() + "nimbus-database-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/elsewhere/custom.sqlite"
        let server = try await NimbusProcess.serve(
            arguments: ["serve", "--port", "0", "--data-dir", directory + "/data", "--database", "sqlite:" + file], workingDirectory: nil)
        defer { server.stop() }
        #expect(FileManager.default.fileExists(atPath: file))
        #expect(!FileManager.default.fileExists(atPath: directory + "/data/nimbus.sqlite"))
        #expect(server.output.contains("storage: SQLite WAL at \(file), synchronous=FULL"), "\(server.output)")
    }

    /// The process's tasks run on NIO's event loops on SQLite and on Swift's pool on PostgreSQL
    /// unless `NIMBUS_TASK_THREADS` says which (docs/operations.md); the server's first lines say
    /// which and why, and a value it does not know stops it at once, naming the two it takes.
    @Test func theServerSaysWhichThreadsRunItsTasks() async throws {
        let directory = NSTemporaryDirectory() + "nimbus-threads-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let loops = "tasks: on NIO's \(NIOSingletons.groupLoopCountSuggestion) event loops, beside the sockets"
        let byDefault =
            TestStorage.isSQLiteFile
            ? loops + " (the default on SQLite; NIMBUS_TASK_THREADS=pool for Swift's pool)"
            : "tasks: on Swift's cooperative pool (the default on PostgreSQL; NIMBUS_TASK_THREADS=loops for NIO's event loops)"
        for (value, line) in [
            (nil, byDefault),
            ("pool", "tasks: on Swift's cooperative pool (NIMBUS_TASK_THREADS=pool)"),
            ("loops", loops + " (NIMBUS_TASK_THREADS=loops)"),
        ] {
            let server = try await NimbusProcess.serve(
                dataDirectory: directory, environment: value.map { ["NIMBUS_TASK_THREADS": $0] } ?? [:])
            defer { server.stop() }
            #expect(server.output.contains(line), "\(value ?? "unset"): \(server.output)")
            // It serves either way.
            let connection = try RawConnection(port: server.port)
            try connection.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            let health = await connection.receive(waitingUpTo: 10, until: RawConnection.oneAnswer)
            #expect(health.status == 200 && health.body.contains("ok"), "\(health.text)")
        }
        let (status, error) = try Self.failing(
            ["serve", "--port", "0", "--data-dir", directory], environment: ["NIMBUS_TASK_THREADS": "fast"])
        #expect(status != 0 && error.contains("NIMBUS_TASK_THREADS must be 'pool' or 'loops', not 'fast'"), "\(status): \(error)")
    }

    /// The server's allocator (docs/operations.md, "The memory allocator"): on Linux the built
    /// `nimbus` is linked against jemalloc, whose `malloc` then serves the whole process with the
    /// two arenas the binary asks for, and its first lines say so. `scripts/test.sh` installs
    /// libjemalloc-dev for the build; a build without it keeps glibc's malloc, which this test
    /// reports as a failure. An operator's `MALLOC_CONF` overrides the binary's settings.
    @Test func theServerSaysWhichAllocatorServesIt() async throws {
        let directory = NSTemporaryDirectory() + "nimbus-allocator-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        #if os(Linux)
            for (environment, arenas) in [([:], 2), (["MALLOC_CONF": "narenas:3"], 3)] {
                let server = try await NimbusProcess.serve(dataDirectory: directory, environment: environment)
                defer { server.stop() }
                let line = server.output.split(separator: "\n").first { $0.hasPrefix("allocator: ") }.map(String.init)
                #expect(line?.hasPrefix("allocator: jemalloc 5.") == true, "built without libjemalloc-dev? \(server.output)")
                #expect(line?.hasSuffix(", \(arenas) arenas") == true, "\(environment): \(server.output)")
            }
        #else
            let server = try await NimbusProcess.serve(dataDirectory: directory)
            defer { server.stop() }
            #expect(server.output.contains("allocator: the system's malloc"), "\(server.output)")
        #endif
        // The test process links what the server links (it imports NimbusCLI).
        #if os(Linux)
            let allocator = MemoryReturnService.allocator.description
            #expect(allocator.hasPrefix("jemalloc 5.") && allocator.hasSuffix(", 2 arenas"), "\(allocator)")
            #expect(MemoryReturnService.Allocator.glibc.description.hasPrefix("glibc's malloc, at most "))
        #endif
    }

    @Test(arguments: [
        ("mysql://db/nimbus", "'mysql:' is not a driver Nimbus knows"),
        ("nimbus.sqlite", "names no driver"),
        ("sqlite:", "needs a file path"),
        ("postgres://127.0.0.1:1/nimbus", "PostgreSQL at 127.0.0.1:1 did not answer"),
        ("postgres://127.0.0.1/nimbus?sslmode=sometimes", "sslmode 'sometimes' is not one of disable, prefer, require"),
        ("postgres://user:secret@/nimbus", "names no host"),
    ])
    func aWrongDatabaseIsOneLineNamingWhatIsWrong(url: String, says: String) throws {
        let directory = NSTemporaryDirectory() + "nimbus-database-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (status, error) = try Self.failing(["containers", "create", "iCloud.x", "--data-dir", directory, "--database", url])
        #expect(status != 0)
        #expect(error.contains(says), "\(error)")
        #expect(error.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "\n").count <= 2, "\(error)")
        #expect(!FileManager.default.fileExists(atPath: directory + "/nimbus.sqlite"))
    }

    @Test func aReadReplicaNeedsPostgreSQLAndAURLItCanUse() throws {
        let directory = NSTemporaryDirectory() + "nimbus-database-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for (arguments, says) in [
            (["--read-replica", "postgres://127.0.0.1:5433/nimbus"], "--read-replica needs a PostgreSQL --database"),
            (["--database", "postgres://127.0.0.1:1/nimbus", "--read-replica", "postgres://h/db?pool=2"], "--read-replica: URL parameter 'pool'"),
        ] {
            let (status, error) = try Self.failing(["serve", "--port", "0", "--data-dir", directory] + arguments)
            #expect(status != 0)
            #expect(error.contains(says), "\(error)")
        }
        #expect(!FileManager.default.fileExists(atPath: directory + "/nimbus.sqlite"))
    }

    /// Each PostgreSQL pool is the size the operator gives (`--postgres-connections`), so several
    /// nodes fit in the server's `max_connections` (docs/scale-out.md); the node says the size it
    /// uses as it starts. A pool of one connection is refused, with the reason.
    @Test func postgresPoolsAreTheSizeTheOperatorGives() async throws {
        let directory = NSTemporaryDirectory() + "nimbus-database-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (status, error) = try Self.failing(["serve", "--port", "0", "--data-dir", directory, "--postgres-connections", "1"])
        #expect(status != 0 && error.contains("--postgres-connections must be at least 2"), "\(error)")
        // scripts/test.sh always starts the cluster (PostgresDriverTests fails CI without it).
        guard PostgresTestCluster.url != nil else { return }
        try await PostgresTestCluster.withDatabase { location in
            let server = try await NimbusProcess.serve(
                arguments: [
                    "serve", "--port", "0", "--log-level", "error", "--data-dir", directory, "--database", location.description,
                    "--postgres-connections", "3",
                ], workingDirectory: nil)
            defer { server.stop() }
            #expect(server.output.contains("storage: PostgreSQL at \(location), pools of 3 connections"), "\(server.output)")
        }
    }
}

@Suite struct SchemaCommandTests {
    @Test func schemaVerbsDeployShowAndSetIndexes() async throws {
        let directory = NSTemporaryDirectory() + "nimbus-schema-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let container = "iCloud.test.schema"
        let data = try await NimbusProcess.dataArguments(directory)
        func nimbus(_ arguments: [String]) throws -> String { try NimbusProcess.run(arguments + data) }
        _ = try nimbus(["containers", "create", container, "--create"])
        let token = try nimbus(["tokens", "create", "--container", container]).trimmingCharacters(in: .whitespacesAndNewlines)
        _ = try nimbus(["users", "create", "ann", "--password", "ann-password"])
        let server = try await NimbusProcess.serve(dataDirectory: directory)
        var client = APIClient(
            baseURL: server.baseURL, container: container, environment: .development, apiToken: token, webAuthToken: nil,
            userRecordName: nil)
        client.webAuthToken = try await client.signIn("ann", password: "ann-password").json["ckWebAuthToken"]?.stringValue
        let saved = try await client.modify("public", [Op.create("p", type: "Item", ["k": Op.field(1), "s": Op.field("x")])])
        #expect(saved.records.first?.errorCode == nil)
        server.stop()

        #expect(try nimbus(["schema", "deploy", "--container", container]).contains("2 new record type(s), 2 new field(s)"))  // Item, and Users (ann's record)
        _ = try nimbus([
            "schema", "index", "--container", container, "--environment", "production", "--record-type", "Item",
            "--field", "k", "--set", "sortable",
        ])
        _ = try nimbus([
            "schema", "index", "--container", container, "--environment", "production", "--record-type", "Item",
            "--field", "___createTime", "--set", "queryable,sortable",
        ])
        let shown = try nimbus(["schema", "show", "--container", container, "--environment", "production"])
        #expect(shown.contains("DEFINE SCHEMA"))
        #expect(shown.contains("RECORD TYPE Item ("))
        // Names are padded to one column, as cktool writes them: compare words.
        let lines = Set(shown.split(separator: "\n").map { $0.split(separator: " ").joined(separator: " ").trimmingCharacters(in: CharacterSet(charactersIn: ",")) })
        #expect(lines.contains("k INT64 SORTABLE"), "\(shown)")
        #expect(lines.contains("s STRING QUERYABLE SORTABLE SEARCHABLE"))
        #expect(lines.contains("\"___createTime\" TIMESTAMP QUERYABLE SORTABLE"))
        // Roles are part of the schema (docs/roles.md): the CLI makes and grants them, show
        // prints them with the defaults of the types never set.
        _ = try nimbus(["roles", "create", "PartyAdmin", "--container", container, "--environment", "production"])
        _ = try nimbus([
            "roles", "grant", "PartyAdmin", "--container", container, "--environment", "production", "--record-type", "Item",
            "--permissions", "create,write",
        ])
        _ = try nimbus([
            "roles", "assign", "PartyAdmin", "--container", container, "--environment", "production", "--user", "ann",
        ])
        let secured = try nimbus(["schema", "show", "--container", container, "--environment", "production"])
        #expect(secured.contains("CREATE ROLE PartyAdmin;"), "\(secured)")
        #expect(secured.contains("GRANT CREATE TO \"PartyAdmin\"") && secured.contains("GRANT WRITE TO \"PartyAdmin\""), "\(secured)")
        #expect(secured.contains("GRANT READ TO \"_world\"") && secured.contains("GRANT WRITE TO \"_creator\""), "\(secured)")
        #expect(try nimbus(["roles", "list", "--container", container, "--environment", "production"]).contains("PartyAdmin"))
        #expect(throws: (any Error).self) {
            try nimbus(["roles", "grant", "Nobody", "--container", container, "--record-type", "Item", "--permissions", "read"])
        }
        #expect(throws: (any Error).self) {
            try nimbus([
                "schema", "index", "--container", container, "--environment", "production", "--record-type", "Item",
                "--field", "missing", "--set", "queryable",
            ])
        }
    }
}

/// Runs the built `nimbus` executable.
enum NimbusProcess {
    static var binary: String {
        if let path = ProcessInfo.processInfo.environment["NIMBUS_BINARY"] { return path }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let candidates = [".build/debug/nimbus", ".build/x86_64-unknown-linux-gnu/debug/nimbus", ".build/aarch64-unknown-linux-gnu/debug/nimbus"]
        return candidates.map { root.appendingPathComponent($0).path }.first { FileManager.default.isExecutableFile(atPath: $0) }
            ?? root.appendingPathComponent(".build/debug/nimbus").path
    }

    static var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["NIMBUS_PASSWORD_ROUNDS"] = "1000"
        return environment
    }

    /// Runs a verb to completion, `input` on its standard input, and returns its exit status,
    /// standard output and standard error, whatever the status.
    static func answer(_ arguments: [String], environment extra: [String: String] = [:], input: String? = nil) throws -> (
        status: Int32, output: String, error: String
    ) {
        let process = try ChildProcess(
            binary, arguments, environment: environment.merging(extra) { $1 }, input: input == nil ? .discard : .pipe, output: .pipe,
            error: .pipe)
        if let input {
            process.standardInput!.write(Data(input.utf8))
            try process.standardInput!.close()
        }
        let output = String(decoding: process.standardOutput!.readDataToEndOfFile(), as: UTF8.self)
        let error = String(decoding: process.standardError!.readDataToEndOfFile(), as: UTF8.self)
        return (process.terminationStatus, output, error)
    }

    /// Runs a verb to completion and returns its standard output.
    static func run(_ arguments: [String], environment extra: [String: String] = [:]) throws -> String {
        let process = try ChildProcess(binary, arguments, environment: environment.merging(extra) { $1 }, output: .pipe)
        let data = process.standardOutput!.readDataToEndOfFile()
        guard process.terminationStatus == 0 else {
            throw TestFailure("nimbus \(arguments.joined(separator: " ")) exited with \(process.terminationStatus)")
        }
        return String(decoding: data, as: UTF8.self)
    }

    final class Server: @unchecked Sendable {
        let process: ChildProcess
        let port: Int
        /// What the server printed up to its "listening" line.
        let output: String
        var baseURL: String { "http://127.0.0.1:\(port)" }

        init(process: ChildProcess, port: Int, output: String) {
            self.process = process
            self.port = port
            self.output = output
        }

        func kill() {
            process.kill()
            process.waitUntilExit()
        }

        func stop() {
            guard process.isRunning else { return }
            process.terminate()
            process.waitUntilExit()
        }
    }

    /// `--data-dir DIRECTORY`, and on the suite's PostgreSQL pass `--database` naming the
    /// directory's database on the test cluster (made if missing).
    static func dataArguments(_ dataDirectory: String) async throws -> [String] {
        guard !TestStorage.isSQLiteFile else { return ["--data-dir", dataDirectory] }
        let location = try await PostgresTestCluster.location(forDataDirectory: dataDirectory)
        return ["--data-dir", dataDirectory, "--database", location.description]
    }

    /// Starts `nimbus serve` on a free port and waits for its "listening" line.
    static func serve(dataDirectory: String, _ extra: [String] = [], environment variables: [String: String] = [:]) async throws
        -> Server
    {
        try await serve(
            arguments: ["serve", "--port", "0", "--sync", "normal", "--log-level", "error"] + dataArguments(dataDirectory) + extra,
            workingDirectory: nil, environment: variables)
    }

    static func serve(arguments: [String], workingDirectory: String?, environment variables: [String: String] = [:]) async throws
        -> Server
    {
        let process = try ChildProcess(
            binary, arguments, environment: environment.merging(variables) { $1 }, workingDirectory: workingDirectory, output: .pipe)
        let handle = process.standardOutput!
        let (port, text) = try await Task.detached { () throws -> (Int, String) in
            var text = ""
            while true {
                let data = handle.availableData
                if data.isEmpty { throw TestFailure("nimbus serve exited before listening: \(text)") }
                text += String(decoding: data, as: UTF8.self)
                // Wait for the whole banner: its last line is the token.
                guard text.contains("development API token: "), text.hasSuffix("\n") else { continue }
                if let line = text.split(separator: "\n").first(where: { $0.hasPrefix("Nimbus listening on") }),
                    let port = line.split(separator: ":").last.flatMap({ Int($0) })
                {
                    return (port, text)
                }
            }
        }.value
        return Server(process: process, port: port, output: text)
    }
}

