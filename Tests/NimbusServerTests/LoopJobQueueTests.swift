import Foundation
import NimbusTestSupport
import NimbusWire
import Testing

/// `nimbus serve` on SQLite runs Swift's tasks on NIO's loops through a job queue of its own on
/// each loop (`LoopJobQueue`, installed in the server's process only: a test process keeps
/// Swift's pool). Many clients of one user at once, writing, reading and querying, each get every
/// answer and the right one: no job is lost, run twice or run off its loop's turn, and (on
/// PostgreSQL) no burst spends more of the user's budget than it asks for.
@Suite struct LoopJobQueueTests {
    @Test func manyClientsAtOnceGetEveryAnswerFromTheServerProcess() async throws {
        let (dataDirectory, container, apiToken) = try await CrashRecoveryTests.prepareDataDirectory()
        defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
        let (server, client) = try await CrashRecoveryTests.serveSignedIn(dataDirectory, container: container, apiToken: apiToken)
        defer { server.stop() }
        try await expectEqual(client.createZone("Busy").status, 200)
        // 32 × 12 rounds: 768 requests and 384 query pages of one user, inside their budgets
        // (1,200 and 600 a minute, docs/limits.md). On PostgreSQL, where budgets are leased from
        // the store, this burst was refused THROTTLED until concurrent leases were shared
        // (`BudgetLeases`).
        let clients = 32
        let rounds = 12
        let failures = try await withThrowingTaskGroup(of: [String].self) { group in
            for index in 0..<clients {
                // Each client on a device of its own: its creates come back to it.
                let client = client.onDevice("device-\(index)")
                group.addTask {
                    var failures: [String] = []
                    for round in 0..<rounds {
                        let name = "c\(index)-r\(round)"
                        let created = try await client.modify(
                            zone: "Busy", [Op.create(name, ["client": Op.field(.int(Int64(index))), "round": Op.field(.int(Int64(round)))])])
                        if created.status != 200 || created.records.first?.errorCode != nil { failures.append("create \(name): \(created.text)") }
                        let read = try await client.lookup(zone: "Busy", [name])
                        if read.records.first?["fields"]?["round"]?["value"]?.int64Value != Int64(round) {
                            failures.append("lookup \(name): \(read.text)")
                        }
                        let mine = try await client.post(
                            "private", "records/query",
                            [
                                "zoneID": ["zoneName": "Busy"],
                                "query": [
                                    "recordType": "Note",
                                    "filterBy": [["fieldName": "client", "comparator": "EQUALS", "fieldValue": ["value": .int(Int64(index))]]],
                                ],
                            ])
                        if mine.status != 200 || mine.records.count != round + 1 {
                            failures.append("query after \(name): \(mine.records.count) records, \(mine.status)")
                        }
                    }
                    return failures
                }
            }
            return try await group.reduce(into: []) { $0 += $1 }
        }
        #expect(failures.isEmpty, "\(failures.prefix(5))")
        if TestStorage.isSQLiteFile { #expect(server.output.contains("tasks: on NIO's"), "\(server.output)") }
    }
}

#if os(Linux)
    import CNimbusLibc
    import Glibc

    /// `LoopJobQueue.install()` takes Swift's executor hook from the address the linker resolved,
    /// because a binary with Swift's libraries linked in (`scripts/build-release.sh`) exports no
    /// symbol for `dlsym` to find. Where both can see it (this test binary links them
    /// dynamically), they must name the same slot.
    @Suite struct SwiftExecutorHookTests {
        @Test func theLinkedHookIsTheOneTheDynamicLinkerNames() throws {
            let linked = try #require(nimbus_swift_enqueue_global_hook(), "the weak declaration resolved to nothing")
            let named = try #require(dlsym(dlopen(nil, RTLD_NOW), "swift_task_enqueueGlobal_hook"))
            #expect(UnsafeMutableRawPointer(linked) == named)
        }
    }
#endif
