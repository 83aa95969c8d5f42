import Foundation
import Logging
import NimbusPostgres
import PostgresNIO
import NimbusServer
import NimbusStorage
import NimbusTestSupport
import NimbusWire
import Testing

/// Partitions as an operator meets them (issue 40; docs/scale-out.md, "Partitions"):
/// `nimbus partitions add` checks what it is given and says why it refuses, `list` shows each
/// partition and whether it answers, and a server on the home opens the catalog's partitions,
/// puts new databases on them, notifies across them, and keeps serving everyone else while
/// one partition does not answer.
@Suite struct PartitionOperationsTests {
    static func refused(_ arguments: [String], saying words: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let answer = try NimbusProcess.answer(arguments)
        #expect(answer.status != 0, "accepted: \(arguments) → \(answer.output)", sourceLocation: sourceLocation)
        #expect(answer.error.contains(words), "\(arguments): \(answer.error)", sourceLocation: sourceLocation)
    }

    @Test(.enabled(if: TestStorage.name == "postgres", "the suite's PostgreSQL pass"))
    func partitionsAreAddedCheckedListedAndServed() async throws {
        try await PostgresTestCluster.withDatabase { home in
            try await PostgresTestCluster.withDatabase { second in
                try await PostgresTestCluster.withDatabase { third in
                    try await PostgresTestCluster.withDatabase { used in
                        try await PostgresTestCluster.withDatabase { later in
                            try await Self.scenario(home: home, second: second, third: third, used: used, later: later)
                        }
                    }
                }
            }
        }
    }

    /// The copy step of a move: a user's database copied to another store is the same row for
    /// row, ids included (zones, records, every index, references, subscriptions, kept
    /// versions), a repeated copy changes nothing, and the target's subscription index hears
    /// of the copied subscriptions.
    @Test(.enabled(if: TestStorage.name == "postgres", "the suite's PostgreSQL pass"))
    func aDatabaseCopiesToAnotherStoreRowForRow() async throws {
        try await PostgresTestCluster.withDatabase { source in
            try await PostgresTestCluster.withDatabase { target in
                try await TestServer.with(configure: { configuration in
                    configuration.storage = PostgresStorage.opener(source, maximumConnections: 4)
                }) { server in
                    let ann = try await IdentityTests.person(server, "ann")
                    try await expectEqual(ann.createZone("Album").status, 200)
                    let saved = try await ann.modify(zone: "Album", [
                        Op.create("p1", type: "Photo", ["title": Op.field("one"), "count": Op.field(1)]),
                        Op.create("p2", type: "Photo", ["title": Op.field("two"), "of": Op.field(["recordName": "p1", "action": "NONE"], "REFERENCE")]),
                    ])
                    expectEqual(saved.records.compactMap(\.errorCode), [], "\(saved.text)")
                    try await NotificationTests.subscribe(ann, SubscriptionTests.querySubscription("photos", type: "Photo", zone: "Album"))
                    try await expectEqual(ann.modify(zone: "Album", [Op.forceDelete("p2")]).status, 200)
                    try await expectEqual(ann.modify(zone: "Album", [Op.create("p3", type: "Photo", ["title": Op.field("three"), "of": Op.field(["recordName": "p1", "action": "NONE"], "REFERENCE")])]).status, 200)
                    let annID = try #require(try await server.service.storage.accounts.user(name: "ann")).id
                    let key = DatabaseKey(container: TestServer.container, environment: .development, scope: .private, ownerID: annID)

                    let from = try await PostgresStorage(source, maximumConnections: 2)
                    let to = try await PostgresStorage(target, maximumConnections: 2)
                    let versionBefore = try await PostgresTestCluster.rows("SELECT value::text FROM counters WHERE key = 'subscriptions_version'", on: target)
                    // The source's zones stamped in its change feed first: a stamp landing after
                    // the copy would change a row the comparison reads (a move's target stamps
                    // what it received pending itself).
                    #expect(try await PostgresTestCluster.feedStamped(on: source), "the source's feed was never stamped")
                    let copied = try await from.copyDatabase(key, to: to)
                    // Repeated after a crash, and in pages of two rows: the same.
                    try await expectEqual(from.copyDatabase(key, to: to, page: 2), copied, "a repeated copy")
                    let versionAfter = try await PostgresTestCluster.rows("SELECT value::text FROM counters WHERE key = 'subscriptions_version'", on: target)
                    #expect(versionAfter != versionBefore, "\(versionBefore) → \(versionAfter)")
                    let id = try #require(try await PostgresTestCluster.rows(
                        "SELECT id::text FROM databases WHERE owner_id = \(annID) AND scope = 'private'", on: source).first?.first ?? nil)
                    /// Every table's rows of Ann's database, the same on both stores; how many.
                    func compared(_ when: String) async throws -> Int {
                        var rows = 0
                        for table in PostgresStorage.databaseTables {
                            let column = table == "databases" ? "id" : "database_id"
                            let sql = "SELECT count(*)::text, coalesce(json_agg(t ORDER BY t::text), '[]')::text FROM \(table) t WHERE \(column) = \(id)"
                            let here = try await PostgresTestCluster.rows(sql, on: source)
                            let there = try await PostgresTestCluster.rows(sql, on: target)
                            #expect(here == there, "\(when), \(table): \(here) → \(there)")
                            rows += Int(here.first?.first.flatMap { $0 } ?? "0") ?? 0
                            if ["zones", "records", "field_index", "record_references", "subscriptions", "record_history"].contains(table) {
                                #expect(here.first?.first != "0", "\(table) holds none of Ann's rows: the test would show nothing")
                            }
                        }
                        return rows
                    }
                    let rows = try await compared("copied whole")
                    #expect(copied == rows, "\(copied) copied, \(rows) rows")

                    // Copied whole after a mark while Ann writes on, then again since the mark
                    // (a move's catch-up): records made, changed and deleted, a zone deleted with
                    // its records, another made, a subscription added; the same row for row.
                    try await expectEqual(ann.createZone("Gone").status, 200)
                    try await expectEqual(ann.modify(zone: "Gone", [Op.create("g1", type: "Photo", ["title": Op.field("gone")])]).status, 200)
                    let mark = try #require(try await from.copyMark(key))
                    _ = try await from.copyDatabase(key, to: to)
                    try await expectEqual(ann.modify(zone: "Album", [Op.create("p4", type: "Photo", ["title": Op.field("four")])]).status, 200)
                    try await expectEqual(ann.modify(zone: "Album", [Op.forceDelete("p1")]).status, 200)
                    try await expectEqual(ann.deleteZone("Gone").status, 200)
                    try await expectEqual(ann.createZone("New").status, 200)
                    try await expectEqual(ann.modify(zone: "New", [Op.create("n1", type: "Photo", ["title": Op.field("new")])]).status, 200)
                    try await NotificationTests.subscribe(ann, SubscriptionTests.querySubscription("more", type: "Photo", zone: "New"))
                    #expect(try await PostgresTestCluster.feedStamped(on: source), "the source's feed was never stamped")
                    let caughtUp = try await from.copyDatabase(key, to: to, since: mark)
                    let whole = try await compared("caught up")
                    // Not the whole database again: p2 and p3, their index entries and references stay as copied.
                    #expect(caughtUp > 0 && caughtUp < whole, "\(caughtUp) rows copied since the mark, of \(whole)")
                    await from.close()
                    await to.close()
                }
            }
        }
    }

    /// `nimbus partitions move`: a user's database moves from p2 to p3 while their device
    /// writes and syncs, and the device converges with every record once, none lost and none
    /// twice; the source keeps only a pointer. Moves interrupted by `kill -9` after each step
    /// finish when run again (a database left fenced answers TRY_AGAIN_LATER until then), and
    /// what cannot be moved is refused, saying why.
    @Test(.enabled(if: TestStorage.name == "postgres", "the suite's PostgreSQL pass"))
    func aUserMovesBetweenPartitionsWhileTheirDeviceWritesAndSyncs() async throws {
        try await PostgresTestCluster.withDatabase { home in
            try await PostgresTestCluster.withDatabase { second in
                try await PostgresTestCluster.withDatabase { third in
                    try await Self.moveScenario(home: home, second: second, third: third)
                }
            }
        }
    }

    /// A node started before the deployment had partitions serves the first one added while it
    /// runs: a partition just added takes no new database until every node has had time to
    /// learn of it; a user another node placed there afterwards is served from there (not given
    /// a second database on the home); and the partition has the deployment's production
    /// schema before its first write.
    @Test(.enabled(if: TestStorage.name == "postgres", "the suite's PostgreSQL pass"))
    func aNodeThatServedNoPartitionServesTheFirstOneAdded() async throws {
        try await PostgresTestCluster.withDatabase { home in
            try await PostgresTestCluster.withDatabase { second in
                let catalog = try await PostgresStorage(home, maximumConnections: 2)
                do {
                    try await Self.firstPartitionScenario(home: home, second: second, catalog: catalog.partitionCatalog)
                } catch {
                    try? await catalog.close()
                    throw error
                }
                try await catalog.close()
            }
        }
    }

    static func firstPartitionScenario(home: PostgresLocation, second: PostgresLocation, catalog: PostgresPartitionCatalog) async throws {
        try await TestServer.with(configure: { configuration in
            configuration.storage = PostgresStorage.opener(home, maximumConnections: 4)
        }) { server in
            func zones(named name: String, on location: PostgresLocation) async throws -> String? {
                try await PostgresTestCluster.rows("SELECT count(*)::text FROM zones WHERE name = '\(name)'", on: location).first?.first ?? nil
            }
            func key(_ name: String, _ environment: NimbusStorage.Environment) async throws -> DatabaseKey {
                let id = try #require(try await server.service.storage.accounts.user(name: name)).id
                return DatabaseKey(container: TestServer.container, environment: environment, scope: .private, ownerID: id)
            }
            // The deployment's schema, deployed while it has no partition.
            let ann = try await IdentityTests.person(server, "ann")
            try await expectEqual(ann.modify([Op.create("a1", type: "Photo", ["title": Op.field("one")])]).status, 200)
            _ = try await server.service.deploySchema(container: TestServer.container)

            // Added "a minute from now" (as by a command whose clock runs ahead): it takes no new
            // database for that minute and the settle, however slowly this test runs.
            _ = try await catalog.addChecked(name: "p2", url: second.description, at: Int64(Date().timeIntervalSince1970 * 1_000) + 60_000)
            // Once the node has asked again, it knows p2, but p2 takes no new database yet,
            // though it holds the fewest.
            for owner in Int64(1_001)...1_003 {
                _ = try await catalog.place(DatabaseKey(container: "elsewhere", environment: .development, scope: .private, ownerID: owner), on: "home")
            }
            try await Task.sleep(for: PartitionedStorage.placementsRecheck + .milliseconds(200))
            let bob = try await IdentityTests.person(server, "bob")
            try await expectEqual(bob.createZone("Early").status, 200)
            try await expectEqual(zones(named: "Early", on: home), "1")
            try await expectEqual(zones(named: "Early", on: second), "0")
            let bobPlacement = try await catalog.placement(of: key("bob", .development))
            #expect(bobPlacement == nil || bobPlacement == "home", "\(String(describing: bobPlacement))")

            // A node places a new production database on p2 (here, the catalog directly, as a
            // node would past the settle); this node serves it from there, with the schema
            // deployed before p2 was added.
            let dora = try await server.user("dora", environment: .production)
            try await expectEqual(catalog.place(key("dora", .production), on: "p2"), "p2")
            let saved = try await dora.modify([Op.create("d1", type: "Photo", ["title": Op.field("dune")])])
            expectEqual(saved.records.first?.errorCode, nil, "\(saved.text)")
            try await expectEqual(dora.createZone("Later").status, 200)
            try await expectEqual(zones(named: "Later", on: second), "1")
            try await expectEqual(zones(named: "Later", on: home), "0", "no second copy of her database on the home")
            let found = try await dora.lookup(["d1"])
            expectEqual(found.records.first?["fields"]?["title"]?["value"], "dune", "\(found.text)")
        }
    }

    /// `nimbus ARGUMENTS` on a thread of its own, so the test's tasks go on meanwhile.
    static func answerAside(_ arguments: [String], environment: [String: String] = [:]) async throws -> (
        status: Int32, output: String, error: String
    ) {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread { continuation.resume(with: Result { try NimbusProcess.answer(arguments, environment: environment) }) }
        }
    }

    /// A device that saves records one at a time (again after TRY_AGAIN_LATER, which a fence
    /// answers) and fetches the zone's changes after each, as CKSyncEngine would.
    actor Device {
        let client: APIClient
        private(set) var saved: [String] = []
        private(set) var seen: [String: Int] = [:]
        private(set) var refusals: [String] = []
        private var token: String?

        init(_ client: APIClient) { self.client = client }

        func save(_ name: String) async throws {
            while true {
                let answer = try await client.modify(zone: "Album", [Op.create(name, type: "Photo", ["title": Op.field(.string(name))])])
                let code = answer.errorCode ?? answer.records.first?["serverErrorCode"]?.stringValue
                guard let code else { break }
                refusals.append(code)
                // Only the fence may refuse; a save refused as existing was committed while refused.
                guard code == "TRY_AGAIN_LATER" else { throw TestFailure("saving \(name): \(answer.status) \(answer.text)") }
                try await Task.sleep(for: .milliseconds(100))
            }
            saved.append(name)
        }

        /// Fetches changes until none are left.
        func sync() async throws {
            while true {
                let answer = try await client.zoneChanges("Album", token: token)
                guard answer.status == 200, let zone = answer.zones.first, zone["serverErrorCode"] == nil else {
                    refusals.append(answer.errorCode ?? answer.zones.first?["serverErrorCode"]?.stringValue ?? "\(answer.status)")
                    try await Task.sleep(for: .milliseconds(100))
                    continue
                }
                for record in zone["records"]?.arrayValue ?? [] {
                    seen[record["recordName"]?.stringValue ?? "?", default: 0] += 1
                }
                token = zone["syncToken"]?.stringValue
                if zone["moreComing"]?.boolValue != true { return }
            }
        }
    }

    static func moveScenario(home: PostgresLocation, second: PostgresLocation, third: PostgresLocation) async throws {
        let data = ["--database", home.description]
        let catalogStore = try await PostgresStorage(home, maximumConnections: 2)
        let catalog = catalogStore.partitionCatalog
        defer { Task { await catalogStore.close() } }
        _ = try await catalog.addChecked(name: "p2", url: second.description, at: 1)
        _ = try await catalog.addChecked(name: "p3", url: third.description, at: 2)
        try await TestServer.with(configure: { configuration in
            configuration.storage = PostgresStorage.opener(home, maximumConnections: 4)
        }) { server in
            let ann = try await IdentityTests.person(server, "ann")
            let annID = try #require(try await server.service.storage.accounts.user(name: "ann")).id
            let key = DatabaseKey(container: TestServer.container, environment: .development, scope: .private, ownerID: annID)
            try await expectEqual(catalog.place(key, on: "p2"), "p2")
            try await expectEqual(ann.createZone("Album").status, 200)
            let device = Device(ann)
            for index in 0..<5 { try await device.save("before-\(index)") }
            try await NotificationTests.subscribe(ann, SubscriptionTests.querySubscription("photos", type: "Photo", zone: "Album"))
            // Bob, whose databases stay on the home, takes part in Ann's zone, and writes in it.
            let bob = try await IdentityTests.person(server, "bob", email: "bob@example.com", given: "Bob")
            let bobKey = DatabaseKey(
                container: TestServer.container, environment: .development, scope: .private,
                ownerID: try #require(try await server.service.storage.accounts.user(name: "bob")).id)
            try await expectEqual(catalog.place(bobKey, on: "home"), "home")
            let shared = try await ann.modify(
                zone: "Album",
                [ShareTests.share("cloudkit.zoneshare", participants: [ShareTests.invite(email: "bob@example.com", permission: "READ_WRITE")])])
            let guid = try #require(shared.records.first?["shortGUID"]?.stringValue, "\(shared.text)")
            try await expectEqual(ShareTests.resolve(bob, [guid], accept: true).json["results"]?[0]?["participantStatus"], "ACCEPTED")
            try await device.sync()

            // The move runs while the device writes and syncs.
            let writing = Task {
                for index in 0..<40 {
                    try await device.save("during-\(index)")
                    try await device.sync()
                }
            }
            let moved = try await answerAside(["partitions", "move", "--user", "ann", "--to", "p3"] + data)
            try await writing.value
            #expect(moved.status == 0 && moved.output.contains("from 'p2' to 'p3'"), "\(moved)")
            try await expectEqual(catalog.placement(of: key), "p3")
            // The share goes on from the zone's new partition: Bob writes in it and reads it.
            let bobWrote = try await bob.modify(
                "shared", zone: nil, [Op.create("from-bob", type: "Photo", ["title": Op.field("bob's")])],
                extra: ["zoneID": SharedDatabaseTests.zone("Album", of: ann)])
            expectEqual(bobWrote.records.first?["serverErrorCode"], nil, "\(bobWrote.text)")
            try await device.sync()
            for index in 0..<5 { try await device.save("after-\(index)") }
            try await device.sync()
            let (bobSees, _) = try await SharedDatabaseTests.changes(bob, "Album", of: ann)
            let annSaved = await device.saved
            expectEqual(Set(bobSees.keys), Set(annSaved + ["from-bob", "cloudkit.zoneshare"]), "what Bob's share shows")
            let saved = await device.saved
            let seen = await device.seen
            expectEqual(Set(seen.keys), Set(saved + ["from-bob", "cloudkit.zoneshare"]), "every record saved reaches the device's sync")
            expectEqual(seen.filter { $0.value != 1 }, [:], "no record reaches it twice")
            // The source keeps only the pointer; the target has every record; subscribers are
            // still told of changes, now from p3.
            let sourceRows = try await PostgresTestCluster.rows(
                "SELECT (SELECT count(*) FROM records)::text, (SELECT string_agg(moving_to || ' ' || moved, ',') FROM databases WHERE owner_id = \(annID))", on: second)
            expectEqual(sourceRows.first, ["0", "p3 true"])
            let targetRows = try await PostgresTestCluster.rows("SELECT count(*)::text FROM records WHERE NOT deleted", on: third)
            expectEqual(targetRows.first?.first, "\(saved.count + 2)", "Ann's records, Bob's and the share")
            try await waitFor {
                let notifications = try await ann.device("notifications/changes").json["notifications"]?.arrayValue ?? []
                return notifications.contains { "\($0)".contains("after-4") }
            }

            // Refused, saying why.
            let nobody = try await answerAside(["partitions", "move", "--user", "nobody", "--to", "p2"] + data)
            #expect(nobody.status != 0 && nobody.error.contains("no account is named 'nobody'"), "\(nobody)")
            let nowhere = try await answerAside(["partitions", "move", "--user", "ann", "--to", "p9"] + data)
            #expect(nowhere.status != 0 && nowhere.error.contains("there is no partition 'p9'"), "\(nowhere)")
            // Another move of Ann's running (its session lock held here): refused, saying so.
            let holder = try await PostgresTestCluster.connect(to: home, id: 7, logger: Logger(label: "test"))
            let lock = "nimbus partitions move \(annID)"
            _ = try await holder.query("SELECT pg_advisory_lock(hashtextextended(\(lock), 0))", logger: Logger(label: "test")).collect()
            let racing = try await answerAside(["partitions", "move", "--user", "ann", "--to", "p2"] + data)
            #expect(racing.status != 0 && racing.error.contains("another `nimbus partitions move` of this user is running"), "\(racing)")
            try await holder.close()
            let again = try await answerAside(["partitions", "move", "--user", "ann", "--to", "p3"] + data)
            #expect(again.status == 0 && again.output.contains("on partition 'p3' already"), "\(again)")

            // Killed after each step, the move finishes when run again; meanwhile a fenced
            // database answers TRY_AGAIN_LATER, and a move elsewhere is refused.
            let (_, password) = try await server.service.createOperator(name: "olga", role: .administrator, containers: nil, by: "cli")
            var browser = OperatorTests.Browser(server)
            _ = try await browser.signIn("olga", password)
            var target = "p2"
            for (step, next) in [("copy", "fence"), ("fence", "catch-up"), ("catch-up", "switch"), ("switch", "clean")] {
                let killed = try await answerAside(
                    ["partitions", "move", "--user", "ann", "--to", target] + data, environment: ["NIMBUS_TEST_MOVE_CRASH_AFTER": step])
                #expect(killed.status != 0, "\(step): \(killed)")
                let listed = try await answerAside(["partitions", "list"] + data)
                #expect(listed.output.contains("move under way") && listed.output.contains("to '\(target)'"), "\(step): \(listed.output)")
                if step == "copy" {
                    // A database made for Ann while her move is under way goes where it goes
                    // (her shared database, made by her first subscription there), though the
                    // move's target holds the most.
                    for owner in Int64(1_001)...1_004 {
                        _ = try await catalog.place(DatabaseKey(container: "elsewhere", environment: .development, scope: .private, ownerID: owner), on: target)
                    }
                    try await NotificationTests.subscribe(ann, ["subscriptionID": "shared-all", "subscriptionType": "database"], in: "shared")
                    let sharedKey = DatabaseKey(container: TestServer.container, environment: .development, scope: .shared, ownerID: annID)
                    try await expectEqual(catalog.placement(of: sharedKey), target)
                }
                // The dashboard's storage page shows it too.
                let moves = try await browser.get("storage").json["moves"]?.arrayValue ?? []
                expectEqual(
                    moves.map {
                        "\($0["source"]?.stringValue ?? "") \($0["target"]?.stringValue ?? "") \($0["step"]?.stringValue ?? "")"
                            + ($0["fenced"]?.boolValue == true ? " fenced" : "")
                    },
                    ["\(target == "p2" ? "p3" : "p2") \(target) \(next)" + (next == "catch-up" || next == "switch" ? " fenced" : "")], "\(step)")
                if step == "fence" || step == "catch-up" {
                    let fenced = try await ann.modify(zone: "Album", [Op.create("fenced-\(step)", type: "Photo")])
                    expectEqual(fenced.errorCode, "TRY_AGAIN_LATER", "\(step): \(fenced.text)")
                    #expect(fenced.json["retryAfter"] != nil, "\(fenced.text)")
                    let elsewhere = try await answerAside(["partitions", "move", "--user", "ann", "--to", "home"] + data)
                    #expect(elsewhere.status != 0 && elsewhere.error.contains("finish that move first"), "\(step): \(elsewhere)")
                }
                let finished = try await answerAside(["partitions", "move", "--user", "ann", "--to", target] + data)
                #expect(finished.status == 0, "\(step): \(finished)")
                try await expectEqual(catalog.placement(of: key), target)
                try await device.save("after-\(step)")
                try await device.sync()
                let names = await device.saved
                let found = try await ann.lookup(zone: "Album", names)
                expectEqual(found.records.filter { $0["serverErrorCode"] != nil }.count, 0, "\(step): \(found.text)")
                target = target == "p2" ? "p3" : "p2"
            }
            let seenAtEnd = await device.seen
            expectEqual(seenAtEnd.filter { $0.value != 1 }, [:], "no record reaches the device twice")
            try await expectEqual(catalog.moves().count, 0)
        }
    }

    static func scenario(
        home: PostgresLocation, second: PostgresLocation, third: PostgresLocation, used: PostgresLocation, later: PostgresLocation
    ) async throws {
        let data = ["--database", home.description]
        // A store that holds a logical database already (another deployment's).
        let other = UnitOfWorkDriver(PostgresCoarseStorage(try await PostgresStorage(used, maximumConnections: 2)))
        _ = try await other.write { try $0.ensureDatabase(DatabaseKey(container: "c", environment: .development, scope: .public, ownerID: 0)) }
        try await other.close()

        try refused(["partitions", "add", "Second", second.description] + data, saying: "is not a partition name")
        try refused(["partitions", "add", "home", second.description] + data, saying: "is not a partition name")
        // Names of 63 characters at most: one past is refused for its name; one at the limit
        // passes the name's check and is refused for its URL.
        try refused(["partitions", "add", String(repeating: "p", count: 64), second.description] + data, saying: "is not a partition name")
        try refused(["partitions", "add", String(repeating: "p", count: 63), "postgres://nobody@127.0.0.1:1/nowhere"] + data, saying: "does not answer")
        try refused(["partitions", "add", "p2", "mysql://db/nimbus"] + data, saying: "does not read")
        try refused(["partitions", "add", "p2", "postgres://nobody@127.0.0.1:1/nowhere"] + data, saying: "does not answer")
        try refused(["partitions", "add", "p2", home.description] + data, saying: "is the home store itself")
        try refused(["partitions", "add", "p2", used.description] + data, saying: "holds 1 logical databases already")
        try refused(["partitions", "add", "p2", second.description, "--data-dir", NSTemporaryDirectory()], saying: "partitions need a PostgreSQL home")
        let added = try NimbusProcess.answer(["partitions", "add", "p2", second.description] + data)
        #expect(added.status == 0 && added.output.contains("added partition 'p2' (number 1)") && added.output.contains("without a restart"), "\(added)")
        try refused(["partitions", "add", "p2", third.description] + data, saying: "a partition named 'p2' exists")
        try refused(["partitions", "add", "again", second.description] + data, saying: "is partition 'p2' already")
        let addedThird = try NimbusProcess.answer(["partitions", "add", "p3", third.description] + data)
        #expect(addedThird.status == 0, "\(addedThird)")
        let addedAt = ContinuousClock.now

        // The server says which partitions it serves.
        let directory = NSTemporaryDirectory() + "nimbus-partitions-serve-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let served = try await NimbusProcess.serve(
            arguments: ["serve", "--port", "0", "--log-level", "error", "--data-dir", directory] + data, workingDirectory: nil)
        served.stop()
        #expect(served.output.contains("partitions: home, p2, p3 (nimbus partitions list shows each)"), "\(served.output)")

        // p3 stops answering (its database is renamed away while nothing is connected).
        try await PostgresTestCluster.execute("ALTER DATABASE \(third.database) RENAME TO \(third.database)_away", on: PostgresTestCluster.adminLocation())
        defer { Task { try? await PostgresTestCluster.execute("ALTER DATABASE \(third.database)_away RENAME TO \(third.database)", on: PostgresTestCluster.adminLocation()) } }
        let listed = try NimbusProcess.answer(["partitions", "list"] + data)
        #expect(listed.status == 0, "\(listed)")
        let lines = listed.output.split(separator: "\n").map(String.init)
        #expect(lines.contains { $0.hasPrefix("home ") && $0.contains("answers") }, "\(listed.output)")
        #expect(lines.contains { $0.hasPrefix("p2 ") && $0.contains(" 1 ") && $0.hasSuffix("answers") }, "\(listed.output)")
        #expect(lines.contains { $0.hasPrefix("p3 ") && $0.contains("does not answer") }, "\(listed.output)")

        let catalog = try await PostgresStorage(home, maximumConnections: 2)
        do {
            try await TestServer.with(configure: { configuration in
                configuration.storage = PostgresStorage.opener(home, maximumConnections: 4)
            }) { server in
                // New databases go where the fewest are among the partitions that answer, once
                // every node has had time to learn of them: the public database to the home,
                // then private ones to p2 and the home in turn, never to p3.
                try await Task.sleep(until: addedAt + PartitionedStorage.newPartitionSettle)
                var onSecond: (client: APIClient, key: DatabaseKey)?
                var placements: [String] = []
                for name in ["ann", "bob", "cy"] {
                    let client = try await IdentityTests.person(server, name)
                    try await expectEqual(client.createZone("Album").status, 200, "\(name)")
                    let id = try #require(try await server.service.storage.accounts.user(name: name)).id
                    let key = DatabaseKey(container: TestServer.container, environment: .development, scope: .private, ownerID: id)
                    let placement = try #require(try await catalog.partitionCatalog.placement(of: key))
                    placements.append(placement)
                    if placement == "p2" { onSecond = (client, key) }
                }
                #expect(!placements.contains("p3") && placements.contains("p2") && placements.contains("home"), "\(placements)")

                // A subscriber on p2 hears of their own writes there.
                let (dana, _) = try #require(onSecond)
                try await expectEqual(dana.modify(zone: "Album", [Op.create("p0", type: "Photo", ["title": Op.field("zero")])]).status, 200)
                try await NotificationTests.subscribe(
                    dana, SubscriptionTests.querySubscription("photos", type: "Photo", zone: "Album"))
                try await expectEqual(dana.modify(zone: "Album", [Op.create("p1", type: "Photo", ["title": Op.field("one")])]).status, 200)
                try await waitFor {
                    try await dana.device("notifications/changes").json["notifications"]?.arrayValue?.count == 1
                }

                // A user whose database lives on p3 is told to try again later; the others are served.
                let eve = try await IdentityTests.person(server, "eve")
                let eveID = try #require(try await server.service.storage.accounts.user(name: "eve")).id
                let eveKey = DatabaseKey(container: TestServer.container, environment: .development, scope: .private, ownerID: eveID)
                try await expectEqual(catalog.partitionCatalog.place(eveKey, on: "p3"), "p3")
                let refusedZone = try await eve.createZone("Album")
                expectEqual(refusedZone.errorCode, "TRY_AGAIN_LATER", "\(refusedZone.status) \(refusedZone.text)")
                #expect(refusedZone.json["retryAfter"] != nil, "\(refusedZone.text)")
                try await expectEqual(dana.modify(zone: "Album", [Op.create("p2", type: "Photo")]).status, 200)
                // An operator sees which partition does not answer (the dashboard's storage page).
                let (_, password) = try await server.service.createOperator(name: "olga", role: .administrator, containers: nil, by: "cli")
                var browser = OperatorTests.Browser(server)
                _ = try await browser.signIn("olga", password)
                let status = try await browser.get("storage")
                let states = (status.json["partitions"]?.arrayValue ?? []).map {
                    "\($0["name"]?.stringValue ?? "") \($0["problem"]?.stringValue == nil ? "answers" : "does not answer")"
                }
                expectEqual(states, ["home answers", "p2 answers", "p3 does not answer"], "\(status.text)")

                // A partition added while the node runs is opened when the node first meets a
                // database placed on it.
                try await expectEqual(catalog.partitionCatalog.addChecked(name: "p4", url: later.description, at: 3) > 2, true)
                let fay = try await IdentityTests.person(server, "fay")
                let fayID = try #require(try await server.service.storage.accounts.user(name: "fay")).id
                let fayKey = DatabaseKey(container: TestServer.container, environment: .development, scope: .private, ownerID: fayID)
                try await expectEqual(catalog.partitionCatalog.place(fayKey, on: "p4"), "p4")
                try await expectEqual(fay.createZone("Album").status, 200)
                let onLater = try await PostgresTestCluster.rows("SELECT count(*)::text FROM zones WHERE name = 'Album'", on: later)
                expectEqual(onLater.first?.first, "1")

                // A backup of one store would lose the partitions: refused, saying so.
                await #expect {
                    try await Backups.take(storage: server.service.storage.base, blobs: nil, dataDirectory: NSTemporaryDirectory(), to: NSTemporaryDirectory() + UUID().uuidString)
                } throws: { error in
                    "\(error)".contains("this deployment has partitions")
                }
            }
        } catch {
            try? await catalog.close()
            throw error
        }
        try await catalog.close()
    }
}
