import Foundation
import NimbusPostgres
import NimbusSQLite
import NimbusStorage
import NimbusTestSupport
import NimbusWire
import Synchronization
import Testing

/// Every transaction over a database's rows names that database, so `PartitionedStorage` runs
/// it where the database lives (issue 40; docs/scale-out.md, "Partitions: the design"). Two
/// SQLite stores are the partitions, with the catalog in memory: Ann's private database is
/// placed on the second before her first write, Bob's on the home, everything else by the router. A
/// request whose transaction did not name its database would run on the home and not find
/// Ann's rows.
@Suite struct PartitionRoutingTests {
    final class Holder: Sendable {
        private let value = Mutex<(home: any StorageDriver, second: any StorageDriver, catalog: any PartitionCatalog)?>(nil)
        var parts: (home: any StorageDriver, second: any StorageDriver, catalog: any PartitionCatalog) { value.withLock { $0! } }
        func set(_ parts: (home: any StorageDriver, second: any StorageDriver, catalog: any PartitionCatalog)) { value.withLock { $0 = parts } }
    }

    /// Partitions opened as `open` opens a store, named after the data directory and
    /// `/second`, with the catalog `catalog` gives for the home.
    static func opener(
        _ description: @escaping @Sendable (String) -> String, holder: Holder,
        open: @escaping @Sendable (String) async throws -> any StorageDriver,
        catalog: @escaping @Sendable (any StorageDriver) throws -> any PartitionCatalog
    ) -> StorageOpener {
        StorageOpener(description: description) { directory in
            let home = try await open(directory)
            let second = try await open(directory + "/second")
            let parts = (home, second, try catalog(home))
            holder.set(parts)
            return PartitionedStorage(home: home, partitions: [StoragePartition(name: "second", number: 1, store: second)], catalog: parts.2)
        }
    }

    @Test func everyRequestOverADatabaseRunsWhereTheDatabaseLives() async throws {
        let holder = Holder()
        let catalog = PartitionCatalogInMemory()
        let sqlite = SQLiteStorage.opener(synchronous: .normal)
        try await TestServer.with(configure: { configuration in
            configuration.storage = Self.opener(sqlite.description, holder: holder, open: sqlite.open, catalog: { _ in catalog })
        }) { server in
            try await Self.scenario(server, holder.parts)
        }
    }

    /// The same on PostgreSQL: two databases of the test cluster as the partitions, the
    /// catalog in the home's tables (`PostgresPartitionCatalog`).
    @Test(.enabled(if: TestStorage.name == "postgres", "the suite's PostgreSQL pass"))
    func onPostgreSQLWithTheCatalogInTheHome() async throws {
        let holder = Holder()
        try await TestServer.with(configure: { configuration in
            configuration.storage = Self.opener(
                { "PostgreSQL partitions of \($0)" }, holder: holder,
                open: { directory in
                    let location = try await PostgresTestCluster.location(forDataDirectory: directory, migrated: true)
                    return UnitOfWorkDriver(
                        PostgresCoarseStorage(try await PostgresStorage(location, deadline: PostgresTestCluster.deadline, maximumConnections: 4)),
                        checksPurity: true)
                },
                catalog: { home in
                    guard let coarse = (home as? UnitOfWorkDriver)?.base as? PostgresCoarseStorage else { throw TestFailure("not PostgreSQL") }
                    return coarse.storage.partitionCatalog
                })
        }) { server in
            try await Self.scenario(server, holder.parts)
        }
    }

    static func scenario(_ server: TestServer, _ parts: (home: any StorageDriver, second: any StorageDriver, catalog: any PartitionCatalog))
        async throws
    {
        do {
            let stores = (home: parts.home, second: parts.second)
            let catalog = parts.catalog
            let ann = try await IdentityTests.person(server, "ann", email: "ann@example.com", given: "Ann")
            let annID = try #require(try await server.service.storage.accounts.user(name: "ann")).id
            let annKey = DatabaseKey(container: TestServer.container, environment: .development, scope: .private, ownerID: annID)
            try await expectEqual(catalog.place(annKey, on: "second"), "second")
            let bob = try await IdentityTests.person(server, "bob", email: "bob@example.com", given: "Bob")
            let bobID = try #require(try await server.service.storage.accounts.user(name: "bob")).id
            let bobKey = DatabaseKey(container: TestServer.container, environment: .development, scope: .private, ownerID: bobID)
            try await expectEqual(catalog.place(bobKey, on: "home"), "home")

            for person in [ann, bob] {
                let who = person.userRecordName ?? ""
                try await expectEqual(person.createZone("Album").status, 200, "\(who)")
                let zones = try await person.get("private", "zones/list")
                expectEqual(Set(zones.zones.compactMap { $0["zoneID"]?["zoneName"]?.stringValue }), ["_defaultZone", "Album"], "\(who): \(zones.text)")
                let looked = try await person.post("private", "zones/lookup", ["zones": [["zoneName": "Album"]]])
                expectEqual(looked.zones.first?["zoneID"]?["zoneName"], "Album", "\(who): \(looked.text)")

                let saved = try await person.modify(
                    zone: "Album", [Op.create("p1", type: "Photo", ["title": Op.field("one")]), Op.create("p2", type: "Photo", ["title": Op.field("two")])])
                expectEqual(saved.records.compactMap(\.errorCode), [], "\(who): \(saved.text)")
                let lookup = try await person.lookup(zone: "Album", ["p1", "p2"])
                expectEqual(lookup.records.map(\.errorCode), [nil, nil], "\(who): \(lookup.text)")
                let query = try await person.post("private", "records/query", ["zoneID": ["zoneName": "Album"], "query": ["recordType": "Photo"]])
                expectEqual(Set(query.records.compactMap { $0["recordName"]?.stringValue }), ["p1", "p2"], "\(who): \(query.text)")
                let database = try await person.databaseChanges()
                expectEqual(database.zones.compactMap { $0["zoneID"]?["zoneName"]?.stringValue }, ["Album"], "\(who): \(database.text)")
                let feed = try await person.zoneChanges("Album")
                let changed = feed.json["zones"]?[0]?["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue }
                expectEqual(Set(changed ?? []), ["p1", "p2"], "\(who): \(feed.text)")

                let subscribed = try await person.post(
                    "private", "subscriptions/modify",
                    ["operations": [SubscriptionTests.operation("create", SubscriptionTests.querySubscription("photos", type: "Photo", zone: "Album"))]])
                expectEqual(subscribed.json["subscriptions"]?[0]?["subscriptionID"], "photos", "\(who): \(subscribed.text)")
                let listed = try await person.post("private", "subscriptions/list", [:])
                expectEqual(listed.json["subscriptions"]?.arrayValue?.count, 1, "\(who): \(listed.text)")
                let found = try await person.post("private", "subscriptions/lookup", ["subscriptions": [["subscriptionID": "photos"]]])
                expectEqual(found.json["subscriptions"]?[0]?["subscriptionID"], "photos", "\(who): \(found.text)")
            }

            // Notifications: a write on either partition reaches its subscriber's collection
            // (the home's), through the second partition's outbox forwarded to the home's.
            // Ann also subscribes once to Photo records: it fires once, then it is gone from
            // her partition.
            let once = try await ann.post(
                "private", "subscriptions/modify",
                ["operations": [SubscriptionTests.operation("create", SubscriptionTests.querySubscription("once", type: "Photo", firesOnce: true, zone: "Album"))]])
            expectEqual(once.json["subscriptions"]?[0]?["subscriptionID"], "once", "\(once.text)")
            for person in [ann, bob] {
                try await expectEqual(person.modify(zone: "Album", [Op.create("p9", type: "Photo", ["title": Op.field("nine")])]).status, 200)
            }
            for (person, expected) in [(ann, ["once", "photos"]), (bob, ["photos"])] {
                var fired: [String] = []
                try await waitFor {
                    let page = try await person.device("notifications/changes")
                    fired = (page.json["notifications"]?.arrayValue ?? []).compactMap { $0["payload"]?["ck"]?["qry"]?["sid"]?.stringValue }.sorted()
                    return fired.count >= expected.count
                }
                expectEqual(fired, expected, "\(person.userRecordName ?? "")")
            }
            try await waitFor { try await ann.post("private", "subscriptions/list", [:]).json["subscriptions"]?.arrayValue?.count == 1 }
            try await expectEqual(ann.modify(zone: "Album", [Op.create("p10", type: "Photo", ["title": Op.field("ten")])]).status, 200)
            try await waitFor {
                try await ann.device("notifications/changes").json["notifications"]?.arrayValue?.count == 3
            }
            let annNotes = try await ann.device("notifications/changes").json["notifications"]?.arrayValue ?? []
            expectEqual(annNotes.compactMap { $0["payload"]?["ck"]?["qry"]?["sid"]?.stringValue }.sorted(), ["once", "photos", "photos"])
            // Time travel reads a zone's history where the zone lives: Ann's deletion of p10
            // on the second partition is undone from that partition's kept versions.
            server.clock.advance(milliseconds: 1_000)
            let moment = server.clock.nowMilliseconds()
            server.clock.advance(milliseconds: 1_000)
            let gone = try await ann.modify(zone: "Album", [Op.forceDelete("p10")])
            expectEqual(gone.records.first?["deleted"], true, "\(gone.text)")
            let travel = try await server.service.timeTravel(
                container: TestServer.container, environment: .development, userName: "ann", zoneName: "Album", to: moment, apply: true,
                operatorName: "test")
            expectEqual(travel.zones.first?.items.map { "\($0.change) \($0.recordName)" }, ["restore p10"], "\(travel)")
            try await expectEqual(ann.lookup(zone: "Album", ["p10"]).records.first?.errorCode, nil)

            // Ids name their partition (PartitionIDs): Ann's database was made on the second.
            let annDatabase = try #require(try await stores.second.read(in: annKey) { tx in try tx.database(annKey) })
            expectEqual(PartitionIDs.partition(of: annDatabase.id), 1, "\(annDatabase.id)")
            let bobDatabase = try #require(try await stores.home.read(in: bobKey) { tx in try tx.database(bobKey) })
            expectEqual(PartitionIDs.partition(of: bobDatabase.id), 0, "\(bobDatabase.id)")

            // Each database's rows are on its own store and nowhere else.
            for (ownerID, home, other) in [(annID, stores.second, stores.home), (bobID, stores.home, stores.second)] {
                let key = DatabaseKey(container: TestServer.container, environment: .development, scope: .private, ownerID: ownerID)
                let onHome = try await home.read(in: key) { tx in try tx.database(key) }
                let onOther = try await other.read(in: key) { tx in try tx.database(key) }
                #expect(onHome != nil && onOther == nil, "user \(ownerID): home \(String(describing: onHome)), other \(String(describing: onOther))")
            }

            // A zone-wide share from Ann's store, accepted and read by Bob on the first.
            let shared = try await ann.modify(
                zone: "Album", [ShareTests.share("cloudkit.zoneshare", participants: [ShareTests.invite(email: "bob@example.com")])])
            let guid = try #require(shared.records.first?["shortGUID"]?.stringValue, "\(shared.text)")
            try await expectEqual(ShareTests.resolve(bob, [guid], accept: true).json["results"]?[0]?["participantStatus"], "ACCEPTED")
            let sharedZones = try await bob.get("shared", "zones/list")
            expectEqual(sharedZones.zones.first?["zoneID"]?["ownerRecordName"]?.stringValue, ann.userRecordName, "\(sharedZones.text)")
            let sharedDatabase = try await bob.post("shared", "changes/database", [:])
            expectEqual(sharedDatabase.json["zones"]?.arrayValue?.count, 1, "\(sharedDatabase.text)")
            let (names, _) = try await SharedDatabaseTests.changes(bob, "Album", of: ann)
            expectEqual(Set(names.keys), ["p1", "p2", "p9", "p10", "cloudkit.zoneshare"], "\(names)")
            let sharedQuery = try await bob.post(
                "shared", "records/query", ["zoneID": SharedDatabaseTests.zone("Album", of: ann), "query": ["recordType": "Photo"]])
            expectEqual(Set(sharedQuery.records.compactMap { $0["recordName"]?.stringValue }), ["p1", "p2", "p9", "p10"], "\(sharedQuery.text)")
            let sharedLookup = try await bob.lookup("shared", zone: nil, ["p1"], extra: ["zoneID": SharedDatabaseTests.zone("Album", of: ann)])
            expectEqual(sharedLookup.records.first?.errorCode, nil, "\(sharedLookup.text)")

            // Bob's shared database lives on the home, Ann's zone on the second: her write is
            // mirrored into his shared database from the index, and he is notified.
            let bobShared = DatabaseKey(container: TestServer.container, environment: .development, scope: .shared, ownerID: bobID)
            try await expectEqual(catalog.place(bobShared, on: "home"), "home")
            try await NotificationTests.subscribe(bob, ["subscriptionID": "everything", "subscriptionType": "database"], in: "shared")
            let before = try await bob.device("notifications/changes").json["notifications"]?.arrayValue?.count ?? 0
            try await expectEqual(ann.modify(zone: "Album", [Op.create("p11", type: "Photo", ["title": Op.field("eleven")])]).status, 200)
            try await waitFor {
                let page = try await bob.device("notifications/changes")
                return page.json["notifications"]?.arrayValue?.count == before + 1 && page.text.contains("everything")
            }

            // Production: the deployed schema is on every partition, so Dora's production
            // database on the second takes Photo records, and an index granted after her
            // record was saved without it is filled in there for her query.
            let deployed = try await server.service.deploySchema(container: TestServer.container)
            #expect(deployed.recordTypes > 0 && deployed.fields > 0, "\(deployed)")
            let dora = try await server.user("dora", environment: .production)
            let doraID = try #require(try await server.service.storage.accounts.user(name: "dora")).id
            let doraKey = DatabaseKey(container: TestServer.container, environment: .production, scope: .private, ownerID: doraID)
            try await expectEqual(catalog.place(doraKey, on: "second"), "second")
            #expect(try await server.service.setFieldIndexes(
                container: TestServer.container, environment: .production, recordType: "Photo", field: "title", indexes: 0))
            let doraSaved = try await dora.modify([Op.create("d1", type: "Photo", ["title": Op.field("dune")])])
            expectEqual(doraSaved.records.first?.errorCode, nil, "\(doraSaved.text)")
            #expect(try await server.service.setFieldIndexes(
                container: TestServer.container, environment: .production, recordType: "Photo", field: "title", indexes: SchemaFieldRow.Indexes.all))
            let doraQuery = try await dora.post(
                "private", "records/query",
                ["query": ["recordType": "Photo", "filterBy": [["comparator": "EQUALS", "fieldName": "title", "fieldValue": ["value": "dune"]]]]])
            expectEqual(doraQuery.records.compactMap { $0["recordName"]?.stringValue }, ["d1"], "\(doraQuery.text)")

            // What an operator does over every database reaches the second store too: the
            // database's figures, the development reset (both users' subscriptions go), and
            // a user's deletion.
            let usage = try await server.service.usage(of: annKey)
            #expect(usage.usedBytes > 0, "\(usage)")
            let reset = try await server.service.resetDevelopment(container: TestServer.container)
            expectEqual(reset.subscriptions, 3)  // both users' photos, Bob's in his shared database
            let annZones = try await ann.get("private", "zones/list")
            expectEqual(annZones.zones.compactMap { $0["zoneID"]?["zoneName"]?.stringValue }, ["_defaultZone"], "\(annZones.text)")
            try await expectEqual(ann.post("private", "subscriptions/list", [:]).json["subscriptions"]?.arrayValue?.count, 0)
            try await expectEqual(ann.modify([Op.create("p3", type: "Photo")]).status, 200)
            try await expectEqual(ann.post("private", "subscriptions/modify", ["operations": [SubscriptionTests.operation(
                "create", SubscriptionTests.querySubscription("again", type: "Photo"))]]).status, 200)
            let deleted = try await server.service.deleteUser(name: "ann", by: "test")
            #expect(deleted.zones == 1 && deleted.subscriptions == 1, "\(deleted)")
            let left = try await stores.second.read(in: annKey) { tx in try tx.database(annKey).map { try tx.zones(databaseID: $0.id) } }
            #expect(left?.allSatisfy(\.isDeleted) ?? true, "\(String(describing: left))")
        }
    }
}
