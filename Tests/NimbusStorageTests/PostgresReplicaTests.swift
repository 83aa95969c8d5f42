import Foundation
import NimbusPostgres
import NimbusStorage
import NimbusTestSupport
import NimbusWire
import Synchronization
import Testing

/// Read replicas (`nimbus serve --read-replica`): a hot standby answers clients' reads once it
/// has replayed every write of the node, so a client reads its own writes; a change feed paged
/// across the primary and a lagging replica neither skips nor repeats a change; and a replica
/// that is not a standby of the primary's cluster is refused with the reason. Replay is paused
/// and resumed on the standby (`pg_wal_replay_pause`) to hold it behind on purpose.
@Suite(.serialized, .enabled(if: PostgresTestCluster.url != nil))
struct PostgresReplicaTests {
    static let port = 25433

    /// The node's storage, kept for its replica figures.
    final class Opened: Sendable {
        private let storage = Mutex<PostgresStorage?>(nil)
        func set(_ value: PostgresStorage) { storage.withLock { $0 = value } }
        var replicaReads: Int { storage.withLock { $0?.replicaFigures.first?.reads ?? 0 } }
        var figures: [ReplicaFigures] { storage.withLock { $0?.replicaFigures ?? [] } }
    }

    static func opener(_ primary: PostgresLocation, replicas: [PostgresLocation], opened: Opened) -> StorageOpener {
        StorageOpener(description: { _ in "PostgreSQL \(primary) with replicas" }) { _ in
            let storage = try await PostgresStorage(primary, readReplicas: replicas, deadline: .seconds(5), maximumConnections: 4)
            opened.set(storage)
            return UnitOfWorkDriver(PostgresCoarseStorage(storage))
        }
    }

    /// Waits until the standby has replayed all the primary has written.
    static func caughtUp(_ pair: PostgresStandbyPair) async throws {
        let written = try await PostgresTestCluster.rows("SELECT pg_current_wal_lsn()::text", on: try pair.primary)[0][0]!
        for _ in 0..<200 {
            let rows = try await PostgresTestCluster.rows(
                "SELECT (pg_last_wal_replay_lsn() >= '\(written)'::pg_lsn)::text", on: try pair.standby)
            if rows.first?.first == "true" { return }
            try await Task.sleep(for: .milliseconds(25))
        }
        throw TestFailure("the standby did not catch up with \(written)")
    }

    /// A pair with a database made on the primary and replayed on the standby; the locations
    /// naming it on each.
    static func withDatabase(
        _ name: String, _ body: (PostgresStandbyPair, PostgresLocation, PostgresLocation) async throws -> Void
    ) async throws {
        try await PostgresStandbyPair.with(primaryPort: port) { pair in
            try await PostgresTestCluster.execute("CREATE DATABASE \(name)", on: try pair.primary)
            try await caughtUp(pair)
            try await body(pair, pair.on(try pair.primary, database: name), pair.on(try pair.standby, database: name))
        }
    }

    static func replay(_ verb: String, _ pair: PostgresStandbyPair) async throws {
        _ = try await PostgresTestCluster.rows("SELECT pg_wal_replay_\(verb)()::text", on: try pair.standby)
    }

    /// A partition has read replicas of its own (`nimbus partitions add … --read-replica`): a
    /// replica that is not a standby of the partition's cluster is refused with the reason, and
    /// once added, reads a replica may serve of a database on the partition go to its standby.
    @Test func aPartitionsReadsGoToItsOwnReplica() async throws {
        try await Self.withDatabase("nimbus_partition_replica") { pair, primary, standby in
            try await PostgresTestCluster.withDatabase { home in
                let catalog = try await PostgresStorage(home, deadline: .seconds(5), maximumConnections: 2)
                do {
                    await #expect {
                        try await catalog.partitionCatalog.addChecked(name: "p2", url: primary.description, replicas: [primary.description], at: 1)
                    } throws: { "\($0)".contains("is not a standby") }
                    let number = try await catalog.partitionCatalog.addChecked(
                        name: "p2", url: primary.description, replicas: [standby.description], at: 2)
                    #expect(number == 1)
                    #expect(try await catalog.partitionCatalog.partitions().map(\.replicas) == [[standby.description]])

                    let storage = try await PostgresStorage.opener(home, maximumConnections: 4).open(NSTemporaryDirectory())
                    let key = DatabaseKey(container: "c", environment: .development, scope: .private, ownerID: 7)
                    _ = try await catalog.partitionCatalog.place(key, on: "p2")
                    let database = try await storage.write(in: key) { try $0.ensureDatabase(key) }
                    #expect(PartitionIDs.partition(of: database.id) == 1)
                    @Sendable func standbyTransactions() async throws -> Int {
                        let rows = try await PostgresTestCluster.rows(
                            "SELECT (xact_commit + xact_rollback)::text FROM pg_stat_database WHERE datname = 'nimbus_partition_replica'",
                            on: try pair.standby)
                        return Int(rows.first?.first.flatMap { $0 } ?? "0") ?? 0
                    }
                    try await Self.caughtUp(pair)
                    // One read first: the node may not know yet that the standby replayed the
                    // write, and then asks it (a statement on the standby) or, when its answer
                    // comes late on a loaded machine, reads from the primary. After it, nothing is
                    // written, so every read may go to the standby.
                    _ = try await storage.read(ReadKind.point.onReplica, in: key) { try $0.database(key) }
                    let servedBefore = ((storage as? any StoreFigures)?.replicas ?? []).first?.reads ?? 0
                    let before = try await standbyTransactions()
                    for _ in 0..<20 {
                        let read = try await storage.read(ReadKind.point.onReplica, in: key) { try $0.database(key) }
                        #expect(read?.id == database.id)
                    }
                    // Statistics reach pg_stat_database when a backend reports them (at most every
                    // half second while it is busy, at once when it goes idle).
                    var after = before
                    for _ in 0..<40 where after < before + 20 {
                        try await Task.sleep(for: .milliseconds(100))
                        after = try await standbyTransactions()
                    }
                    #expect(after >= before + 20, "the standby ran \(after - before) transactions for 20 reads")
                    // Its lag and reads are in the node's figures (/metrics, the dashboard), by partition.
                    let figures = (storage as? any StoreFigures)?.replicas ?? []
                    #expect(figures.map(\.name) == ["p2/127.0.0.1:\(pair.standbyPort)"], "\(figures)")
                    #expect((figures.first?.reads ?? 0) - servedBefore == 20, "\(figures), \(servedBefore) before")
                    try await storage.close()
                } catch {
                    try? await catalog.close()
                    throw error
                }
                try await catalog.close()
            }
        }
    }

    /// A move to a partition with a read replica switches only once the replica has replayed
    /// the copy (a read a node sends there must find the database): with replay paused the
    /// move is refused at its switch, saying which replica lags, and finishes when run again
    /// after the replica caught up.
    @Test func aMoveSwitchesOnlyOnceThePartitionsReplicaHasTheCopy() async throws {
        try await Self.withDatabase("nimbus_move_replica") { pair, primary, standby in
            try await PostgresTestCluster.withDatabase { home in
                let homeStore = try await PostgresStorage(home, deadline: .seconds(5), maximumConnections: 2)
                let target = try await PostgresStorage(primary, deadline: .seconds(5), maximumConnections: 2)
                do {
                    _ = try await homeStore.partitionCatalog.addChecked(name: "p2", url: primary.description, replicas: [standby.description], at: 1)
                    // A user's database on the home, from before partitions.
                    let key = DatabaseKey(container: "c", environment: .development, scope: .private, ownerID: 7)
                    let driver = UnitOfWorkDriver(PostgresCoarseStorage(homeStore))
                    _ = try await driver.write(in: key) { tx in try tx.createZone(databaseID: try tx.ensureDatabase(key).id, name: "Album") }
                    let stores: @Sendable (String) async throws -> PostgresStorage = { $0 == PartitionedStorage.home ? homeStore : target }

                    try await Self.replay("pause", pair)
                    let impatient = PartitionMove(home: homeStore, settle: .milliseconds(100), replicaWait: .milliseconds(500), store: stores)
                    await #expect {
                        _ = try await impatient.moveUser(7, to: "p2")
                    } throws: { error in
                        "\(error)".contains("partition 'p2''s replica") && "\(error)".contains("has not replayed the copy")
                    }
                    try await expectEqual(homeStore.partitionCatalog.moves().map(\.step), [.switchPlacement])
                    try await expectEqual(homeStore.partitionCatalog.placement(of: key), nil, "switched before the replica had the copy")

                    try await Self.replay("resume", pair)
                    let patient = PartitionMove(home: homeStore, settle: .milliseconds(100), store: stores)
                    let moved = try await patient.moveUser(7, to: "p2")
                    expectEqual(moved.map(\.source), ["home"])
                    try await expectEqual(homeStore.partitionCatalog.placement(of: key), "p2")
                    let onReplica = try await PostgresTestCluster.rows("SELECT count(*)::text FROM zones WHERE name = 'Album'", on: standby)
                    expectEqual(onReplica.first?.first, "1")
                    try await expectEqual(homeStore.partitionCatalog.moves().count, 0)
                } catch {
                    await target.close()
                    await homeStore.close()
                    throw error
                }
                await target.close()
                await homeStore.close()
            }
        }
    }

    /// A move to the home does not wait for the home's replicas (each node's own flags, which
    /// the catalog does not list): a node that learns of the move reads the database from them
    /// only once they have replayed past it, from the home's primary until then.
    @Test func aDatabaseMovedToTheHomeIsReadFromItsReplicasOnlyOnceTheyHaveTheCopy() async throws {
        try await Self.withDatabase("nimbus_move_home_replica") { pair, primary, standby in
            try await PostgresTestCluster.withDatabase { second in
                let homeStore = try await PostgresStorage(primary, readReplicas: [standby], deadline: .seconds(5), maximumConnections: 2)
                let catalog = try await PostgresStorage(primary, deadline: .seconds(5), maximumConnections: 2)
                let partition = try await PostgresStorage(second, deadline: .seconds(5), maximumConnections: 2)
                do {
                    _ = try await catalog.partitionCatalog.addChecked(name: "p2", url: second.description, at: 1)
                    let storage = try await PostgresStorage.withPartitions(
                        home: UnitOfWorkDriver(PostgresCoarseStorage(homeStore)), catalog: homeStore.partitionCatalog
                    ) { _, _ in UnitOfWorkDriver(PostgresCoarseStorage(partition)) }
                    // A user's database on p2, read by the node.
                    let key = DatabaseKey(container: "c", environment: .development, scope: .private, ownerID: 7)
                    try await expectEqual(catalog.partitionCatalog.place(key, on: "p2"), "p2")
                    _ = try await storage.write(in: key) { tx in try tx.createZone(databaseID: try tx.ensureDatabase(key).id, name: "Album") }
                    @Sendable func albums() async throws -> Int {
                        try await storage.read(ReadKind.point.onReplica, in: key) { tx in
                            try tx.database(key).map { try tx.zones(databaseID: $0.id).filter { $0.name == "Album" }.count } ?? 0
                        }
                    }
                    try await expectEqual(albums(), 1)

                    // Moved to the home while the home's standby replays nothing.
                    try await Self.caughtUp(pair)
                    try await Self.replay("pause", pair)
                    let stores: @Sendable (String) async throws -> PostgresStorage = { $0 == PartitionedStorage.home ? catalog : partition }
                    let moved = try await PartitionMove(home: catalog, settle: .milliseconds(100), store: stores).moveUser(7, to: "home")
                    expectEqual(moved.map(\.source), ["p2"])
                    let onStandby = try await PostgresTestCluster.rows("SELECT count(*)::text FROM zones WHERE name = 'Album'", on: standby)
                    expectEqual(onStandby.first?.first, "0", "the standby must lag for this test")
                    try await expectEqual(albums(), 1, "read from a standby that lacks the copy")
                    try await Self.replay("resume", pair)
                } catch {
                    try? await Self.replay("resume", pair)
                    await partition.close()
                    await catalog.close()
                    await homeStore.close()
                    throw error
                }
                await partition.close()
                await catalog.close()
                await homeStore.close()
            }
        }
    }

    @Test func aReplicaMustBeAStandbyOfThePrimarysClusterAndIsRefusedWithTheReasonOtherwise() async throws {
        try await PostgresStandbyPair.with(primaryPort: Self.port) { pair in
            func expectRefused(_ primary: PostgresLocation, _ replica: PostgresLocation, _ reason: String) async {
                await #expect {
                    _ = try await PostgresStorage(primary, readReplicas: [replica], deadline: .seconds(5), maximumConnections: 2)
                } throws: { error in
                    guard case StorageError.unavailable(let detail) = error else { return false }
                    return detail.contains(reason)
                }
            }
            await expectRefused(try pair.primary, try pair.primary, "is not a standby")
            // The suite's own cluster as the primary: the pair's standby belongs to another.
            let other = try PostgresLocation(url: try #require(PostgresTestCluster.url))
            await expectRefused(other, try pair.standby, "belongs to another cluster")
            await expectRefused(try pair.primary, try PostgresLocation(url: "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable"), "does not answer")
            await expectRefused(try pair.primary, try pair.location, "one host per --read-replica")
        }
    }

    @Test func aCaughtUpReplicaAnswersReadsAndAClientReadsItsOwnWritesWhileItLags() async throws {
        try await Self.withDatabase("nimbus_replica") { pair, primary, standby in
            let opened = Opened()
            try await TestServer.with(configure: { $0.storage = Self.opener(primary, replicas: [standby], opened: opened) }) { server in
                let alice = try await server.user("alice")
                try await expectEqual(alice.createZone("Notes").status, 200)
                try await expectEqual(alice.modify(zone: "Notes", [Op.create("first")]).status, 200)
                try await Self.caughtUp(pair)

                // Caught up: lookups, queries, zone lists and change feeds are the replica's.
                let before = opened.replicaReads
                #expect(try await alice.lookup(zone: "Notes", ["first"]).records.first?.errorCode == nil)
                let query: JSON = ["zoneID": ["zoneName": "Notes"], "query": ["recordType": "Note"]]
                try await expectEqual(alice.post("private", "records/query", query).records.count, 1)
                try await expectEqual(alice.zoneChanges("Notes").zones.first?["records"]?.arrayValue?.count, 1)
                try await expectEqual(alice.post("private", "zones/list", [:]).zones.count, 2)
                #expect(opened.replicaReads >= before + 4, "\(opened.figures)")

                // Held behind: the client's own write is still what it reads, from the primary.
                try await Self.replay("pause", pair)
                let behind = opened.replicaReads
                for index in 0..<5 {
                    let saved = try await alice.modify(zone: "Notes", [Op.create("while-paused-\(index)")])
                    #expect(saved.status == 200 && saved.records.first?.errorCode == nil, "\(saved.text)")
                    let found = try await alice.lookup(zone: "Notes", ["while-paused-\(index)"])
                    #expect(found.records.first?.errorCode == nil, "read its own write: \(found.text)")
                    try await expectEqual(alice.post("private", "records/query", query).records.count, index + 2)
                }
                expectEqual(opened.replicaReads, behind, "the lagging replica answered none of them")
                expectEqual(opened.figures.first?.isUp, true)

                // Caught up again: the replica serves them once more.
                try await Self.replay("resume", pair)
                try await Self.caughtUp(pair)
                try await Task.sleep(for: PostgresReplicasPoll.interval * 2)
                let resumed = opened.replicaReads
                #expect(try await alice.lookup(zone: "Notes", ["while-paused-4"]).records.first?.errorCode == nil)
                #expect(opened.replicaReads > resumed, "\(opened.figures)")
                #expect(opened.figures.first?.lagBytes ?? -1 >= 0)
            }
        }
    }

    @Test func aChangeFeedPagedAcrossThePrimaryAndALaggingReplicaNeitherSkipsNorRepeats() async throws {
        try await Self.withDatabase("nimbus_feed") { pair, primary, standby in
            let opened = Opened()
            // Two nodes on one database: the writer reads from the primary, the reader from the
            // replica (its floor is its own writes: none).
            try await TestServer.with(configure: { $0.storage = Self.opener(primary, replicas: [], opened: Opened()) }) { writer in
                try await TestServer.with(configure: { $0.storage = Self.opener(primary, replicas: [standby], opened: opened) }) { reader in
                    let alice = try await writer.user("alice")
                    let onReader = APIClient(
                        baseURL: reader.baseURL, container: TestServer.container, environment: .development,
                        apiToken: alice.apiToken, webAuthToken: alice.webAuthToken, userRecordName: alice.userRecordName)
                    try await expectEqual(alice.createZone("Feed").status, 200)
                    try await Self.caughtUp(pair)
                    try await Self.replay("pause", pair)
                    let saved = try await alice.modify(zone: "Feed", (0..<30).map { Op.create(String(format: "r%02d", $0)) })
                    #expect(saved.status == 200 && saved.records.allSatisfy { $0.errorCode == nil })

                    var seen: [String] = []
                    func page(_ client: APIClient, _ token: String?) async throws -> (token: String, more: Bool, count: Int) {
                        let response = try await client.zoneChanges("Feed", token: token, limit: 10)
                        let zone = try #require(response.zones.first, "\(response.text)")
                        let names = zone["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } ?? []
                        seen += names
                        return (try #require(zone["syncToken"]?.stringValue), zone["moreComing"]?.boolValue ?? false, names.count)
                    }
                    // The primary's first page, then the lagging replica with its token: an empty
                    // page, and a token no older than the one sent.
                    let first = try await page(alice, nil)
                    #expect(first.count == 10 && first.more)
                    let lagging = opened.replicaReads
                    let fromReplica = try await page(onReader, first.token)
                    #expect(fromReplica.count == 0 && !fromReplica.more)
                    #expect(opened.replicaReads > lagging, "the lagging replica answered it")
                    // The primary again, with the replica's token.
                    let second = try await page(alice, fromReplica.token)
                    #expect(second.count == 10 && second.more)
                    // The replica caught up, with the primary's token, to the end.
                    try await Self.replay("resume", pair)
                    try await Self.caughtUp(pair)
                    var token = second.token
                    var more = true
                    while more {
                        let next = try await page(onReader, token)
                        (token, more) = (next.token, next.more)
                    }
                    #expect(seen == (0..<30).map { String(format: "r%02d", $0) }, "no change skipped or repeated: \(seen)")
                    try await expectEqual(page(alice, token).count, 0)
                }
            }
        }
    }
}

/// The replica poll's period, as the tests wait on it.
enum PostgresReplicasPoll {
    static let interval: Duration = .milliseconds(100)
}
