import Foundation
import NimbusSQLite
import NimbusStorage
import NimbusTestSupport
import Synchronization
import Testing

/// Where `PartitionedStorage` puts a database it has not placed yet (docs/scale-out.md,
/// "Partitions: the design"), over SQLite stores with the catalog in memory.
@Suite struct PartitionedStorageTests {
    static func key(_ owner: Int64) -> DatabaseKey {
        DatabaseKey(container: "iCloud.partitions", environment: .development, scope: .private, ownerID: owner)
    }

    static func withStores(_ body: (_ home: any StorageDriver, _ second: any StorageDriver) async throws -> Void) async throws {
        let directory = NSTemporaryDirectory() + "nimbus-partitions-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await withOpened(
            home: UnitOfWorkDriver(try SQLiteStorage(path: directory + "/home.sqlite", synchronous: .normal)),
            second: UnitOfWorkDriver(try SQLiteStorage(path: directory + "/second.sqlite", synchronous: .normal)), body)
    }

    /// `body` over two open stores, closed afterwards whatever happens.
    static func withOpened(
        home: any StorageDriver, second: any StorageDriver,
        _ body: (_ home: any StorageDriver, _ second: any StorageDriver) async throws -> Void
    ) async throws {
        do {
            try await body(home, second)
        } catch {
            try? await home.close()
            try? await second.close()
            throw error
        }
        try await home.close()
        try await second.close()
    }

    @Test func aForwardedOutboxReachesTheHomeOnceAndIdsNameTheirPartition() async throws {
        try await Self.withStores { home, second in try await Self.forwarding(home: home, second: second) }
    }

    /// What the notification pipeline relies on from each store (`PartitionStore`): a
    /// partition's ids start in its range and never go back; entries forwarded to the home
    /// arrive once, however often they are forwarded (a forward repeated after a crash, two
    /// nodes at once, after the home drained them), each partition's apart; a partition's
    /// forwarded entries are dropped even when another node dropped some. Run on PostgreSQL
    /// too (`PostgresDriverTests.partitionStoresForwardOnceAndKeepTheirIdRanges`).
    static func forwarding(home: any StorageDriver, second: any StorageDriver) async throws {
        try await second.partitioning.startIDs(atLeast: PartitionIDs.first(ofPartition: 3))
        let database = try await second.write { try $0.ensureDatabase(Self.key(1)) }
        #expect(PartitionIDs.partition(of: database.id) == 3, "\(database.id)")
        try await second.partitioning.startIDs(atLeast: 1)
        let next = try await second.write { try $0.ensureDatabase(Self.key(2)) }
        #expect(next.id > database.id, "\(next.id) after \(database.id)")

        try await second.write { tx in
            try tx.appendOutbox(databaseID: database.id, body: [1], createdAt: 10)
            try tx.appendOutbox(databaseID: next.id, body: [2], createdAt: 11)
        }
        let entries = try await second.read { try $0.outbox(limit: 10) }
        #expect(entries.map(\.body) == [[1], [2]])
        try await home.partitioning.acceptForwardedOutbox(entries.reversed(), fromPartition: 3, at: 100)
        try await home.partitioning.acceptForwardedOutbox(entries, fromPartition: 3, at: 101)
        // The same sequences from another partition are other entries.
        try await home.partitioning.acceptForwardedOutbox([entries[0]], fromPartition: 4, at: 102)
        let atHome = try await home.read { try $0.outbox(limit: 10) }
        #expect(atHome.map(\.body) == [[1], [2], [1]])
        #expect(atHome.map(\.databaseID) == [database.id, next.id, database.id])
        #expect(atHome.map(\.createdAt) == [10, 11, 10])
        try await home.write { try $0.removeOutbox(sequences: atHome.map(\.sequence)) }
        try await home.partitioning.acceptForwardedOutbox(entries, fromPartition: 3, at: 103)
        #expect(try await home.read { try $0.outbox(limit: 10) }.isEmpty)

        try await second.partitioning.dropOutbox(sequences: [entries[0].sequence])
        try await second.partitioning.dropOutbox(sequences: entries.map(\.sequence))
        #expect(try await second.read { try $0.outbox(limit: 10) }.isEmpty)
    }

    /// A partition that does not answer gets no new database, fails only the transactions
    /// of those it holds, and is opened once it answers (`LazyPartition`).
    @Test func aPartitionThatDoesNotAnswerHoldsUpOnlyItsOwnAndIsOpenedWhenItDoes() async throws {
        try await Self.withStores { home, second in
            let answers = Atomic<Bool>(false)
            let opened = Atomic<Int>(0)
            // A retry interval the three refused writes below fit in even on a loaded machine (at
            // 200 ms, CI's first pass once took longer and tried a second time).
            let lazy = LazyPartition(name: "second", home: home, retryInterval: .seconds(1)) {
                opened.add(1, ordering: .relaxed)
                guard answers.load(ordering: .relaxed) else { throw StorageError.unavailable("connection refused") }
                return second
            }
            let catalog = PartitionCatalogInMemory()
            let storage = PartitionedStorage(home: home, partitions: [StoragePartition(name: "second", number: 1, store: lazy)], catalog: catalog)
            // The home holds one, the second none: the second would be chosen, but it does not answer.
            _ = try await catalog.place(Self.key(9), on: "home")
            _ = try await storage.write(in: Self.key(1)) { try $0.ensureDatabase(Self.key(1)) }
            #expect(try await catalog.placement(of: Self.key(1)) == "home")
            _ = try await catalog.place(Self.key(2), on: "second")
            for _ in 0..<3 {
                await #expect {
                    try await storage.write(in: Self.key(2)) { try $0.ensureDatabase(Self.key(2)) }
                } throws: { error in
                    "\(error)".contains("partition 'second' did not answer")
                }
            }
            #expect(opened.load(ordering: .relaxed) == 1, "tried again within the retry interval")
            _ = try await storage.write(in: Self.key(1)) { try $0.ensureDatabase(Self.key(1)) }

            answers.store(true, ordering: .relaxed)
            try await Task.sleep(for: .milliseconds(1_050))
            let database = try await storage.write(in: Self.key(2)) { try $0.ensureDatabase(Self.key(2)) }
            #expect(PartitionIDs.partition(of: database.id) == 1, "\(database.id)")
            #expect(try await second.read(in: Self.key(2)) { try $0.database(Self.key(2)) } != nil)
        }
    }

    @Test func aNewDatabaseGoesWhereTheFewestAreAndOneFromBeforePartitionsStaysHome() async throws {
        try await Self.withStores { home, second in
            // Made before the deployment had partitions: in the home, placed nowhere.
            _ = try await home.write { try $0.ensureDatabase(Self.key(1)) }
            let catalog = PartitionCatalogInMemory()
            let storage = PartitionedStorage(home: home, partitions: [StoragePartition(name: "second", number: 1, store: second)], catalog: catalog)

            // Read before any write: from the home, which has it.
            let before = try await storage.read(in: Self.key(1)) { try $0.database(Self.key(1)) }
            #expect(before != nil)
            try await expectEqual(catalog.placement(of: Self.key(1)), nil)
            // Its first write through the partitions places it where it is.
            _ = try await storage.write(in: Self.key(1)) { try $0.ensureDatabase(Self.key(1)) }
            try await expectEqual(catalog.placement(of: Self.key(1)), "home")

            // New ones go where the fewest are: the second, then (a tie) the home, then the second.
            for owner in Int64(2)...4 { _ = try await storage.write(in: Self.key(owner)) { try $0.ensureDatabase(Self.key(owner)) } }
            var placements: [String?] = []
            for owner in Int64(2)...4 { placements.append(try await catalog.placement(of: Self.key(owner))) }
            expectEqual(placements, ["second", "home", "second"])
            for owner in Int64(2)...4 {
                let onSecond = try await second.read { try $0.database(Self.key(owner)) } != nil
                let onHome = try await home.read { try $0.database(Self.key(owner)) } != nil
                #expect(onSecond == (placements[Int(owner) - 2] == "second") && onHome != onSecond, "owner \(owner)")
            }
            // A zone's writes follow its database.
            _ = try await storage.write(inZone: ZoneOrder(database: Self.key(2), zoneName: "Notes")) { unit in
                let database = try unit.ensureDatabase(Self.key(2))
                return try unit.createZone(databaseID: database.id, name: "Notes")
            }
            let zone = try await second.read { tx in try tx.database(Self.key(2)).flatMap { try tx.zone(databaseID: $0.id, name: "Notes") } }
            #expect(zone != nil)
            // Each partition's rows, read from every partition.
            let counts = try await storage.readEveryPartition(.scan) { tx in
                try (1...4).filter { try tx.database(Self.key(Int64($0))) != nil }.count
            }
            expectEqual(counts, [2, 2])
        }
    }

    /// A partition takes new databases from `newPartitionSettle` after it was added, not a
    /// millisecond before: until then every node may not know it yet.
    @Test func aNewPartitionTakesNewDatabasesOnlyOnceSettled() async throws {
        try await Self.withStores { home, second in
            let settle = Int64(PartitionedStorage.newPartitionSettle.components.seconds) * 1_000
            let clock = Mutex<Int64>(1_000_000 + settle - 1)
            let catalog = PartitionCatalogInMemory()
            let storage = PartitionedStorage(
                home: home, partitions: [StoragePartition(name: "second", number: 1, store: second, addedAt: 1_000_000)], catalog: catalog,
                now: { clock.withLock { $0 } })
            // The home holds the most, so only the settle keeps the second from taking the next.
            _ = try await storage.write(in: Self.key(1)) { try $0.ensureDatabase(Self.key(1)) }
            _ = try await storage.write(in: Self.key(2)) { try $0.ensureDatabase(Self.key(2)) }
            try await expectEqual(catalog.placement(of: Self.key(1)), "home")
            try await expectEqual(catalog.placement(of: Self.key(2)), "home", "placed on a partition one millisecond before its settle")
            clock.withLock { $0 += 1 }
            _ = try await storage.write(in: Self.key(3)) { try $0.ensureDatabase(Self.key(3)) }
            try await expectEqual(catalog.placement(of: Self.key(3)), "second", "at its settle, the partition holding the fewest")
        }
    }

    @Test func aPlacementOnAPartitionTheNodeLacksIsRefusedAsUnavailable() async throws {
        try await Self.withStores { home, second in
            let catalog = PartitionCatalogInMemory()
            _ = try await catalog.place(Self.key(9), on: "elsewhere")
            let storage = PartitionedStorage(home: home, partitions: [StoragePartition(name: "second", number: 1, store: second)], catalog: catalog)
            await #expect {
                try await storage.read(in: Self.key(9)) { try $0.database(Self.key(9)) }
            } throws: { error in
                guard case StorageError.unavailable(let detail) = error else { return false }
                return detail.contains("'elsewhere'")
            }
            // Other databases are unaffected.
            _ = try await storage.write(in: Self.key(1)) { try $0.ensureDatabase(Self.key(1)) }
        }
    }

    /// Every partition keeps a copy of the schema: a change made on one is made on the others,
    /// and `synchronizeSchemas` makes a partition's copy the home's again.
    @Test func theSchemaIsTheSameOnEveryPartition() async throws {
        try await Self.withStores { home, second in
            _ = try await home.accounts.createContainer(ContainerRow(id: "iCloud.partitions", createdAt: 1))
            let catalog = PartitionCatalogInMemory()
            _ = try await catalog.place(Self.key(1), on: "second")
            let storage = PartitionedStorage(home: home, partitions: [StoragePartition(name: "second", number: 1, store: second)], catalog: catalog)
            @Sendable func fields(_ store: any StorageDriver, _ environment: Environment) async throws -> Set<String> {
                Set(try await store.read { tx in
                    try tx.schemaFields(container: "iCloud.partitions", environment: environment).map {
                        "\($0.recordType).\($0.fieldName):\($0.fieldType):\($0.indexes)"
                    }
                })
            }

            // A deploy-like change on the home reaches the second.
            _ = try await storage.write { unit in
                try unit.addSchemaRecordType(container: "iCloud.partitions", environment: .production, "Note")
                try unit.addSchemaField(
                    container: "iCloud.partitions", environment: .production,
                    SchemaFieldRow(recordType: "Note", fieldName: "title", fieldType: "STRING", indexes: SchemaFieldRow.Indexes.queryable))
            }
            try await expectEqual(fields(second, .production), ["Note.title:STRING:1"])
            // An admission in a write on the second (development's just-in-time schema) reaches the home.
            _ = try await storage.write(in: Self.key(1)) { unit in
                _ = try unit.ensureDatabase(Self.key(1))
                try unit.addSchemaRecordType(container: "iCloud.partitions", environment: .development, "Photo")
                try unit.addSchemaField(
                    container: "iCloud.partitions", environment: .development,
                    SchemaFieldRow(recordType: "Photo", fieldName: "caption", fieldType: "STRING"))
            }
            try await expectEqual(fields(home, .development), ["Photo.caption:STRING:7"])
            // Index changes and removals too.
            _ = try await storage.write { unit in
                _ = try unit.setSchemaFieldIndexes(
                    container: "iCloud.partitions", environment: .development, recordType: "Photo", fieldName: "caption", indexes: 3)
            }
            try await expectEqual(fields(second, .development), ["Photo.caption:STRING:3"])
            _ = try await storage.write { unit in
                try unit.removeFromSchema(container: "iCloud.partitions", environment: .development, recordType: "Photo", fieldName: nil)
            }
            try await expectEqual(fields(second, .development), [])

            // A partition's copy changed behind the router's back is made the home's again.
            _ = try await second.write { unit in
                try unit.addSchemaField(
                    container: "iCloud.partitions", environment: .production,
                    SchemaFieldRow(recordType: "Note", fieldName: "stray", fieldType: "INT64"))
                try unit.removeFromSchema(container: "iCloud.partitions", environment: .production, recordType: "Note", fieldName: "title")
                try unit.addSchemaField(
                    container: "iCloud.partitions", environment: .production,
                    SchemaFieldRow(recordType: "Note", fieldName: "title", fieldType: "INT64"))
            }
            try await storage.synchronizeSchemas()
            try await expectEqual(fields(second, .production), ["Note.title:STRING:1"])
            try await expectEqual(fields(second, .production), try await fields(home, .production))
        }
    }

    /// A partition that misses a schema change (it did not answer) does not fail the write
    /// that made it, and the next write has the schemas made equal again in the background.
    @Test func aSchemaChangeAPartitionMissedReachesItLater() async throws {
        try await Self.withStores { home, second in
            _ = try await home.accounts.createContainer(ContainerRow(id: "iCloud.partitions", createdAt: 1))
            let flaky = FaultyStorage(second)
            let storage = PartitionedStorage(home: home, partitions: [StoragePartition(name: "second", number: 1, store: flaky)], catalog: PartitionCatalogInMemory())
            @Sendable func onSecond() async throws -> [String] {
                try await second.read { tx in try tx.schemaRecordTypes(container: "iCloud.partitions", environment: .production) }
            }
            flaky.failWrites([.unavailable("the second partition is down")])
            _ = try await storage.write { unit in
                try unit.addSchemaRecordType(container: "iCloud.partitions", environment: .production, "Note")
            }
            try await expectEqual(onSecond(), [])
            // Any later write starts the repair.
            _ = try await storage.write(in: Self.key(1)) { try $0.ensureDatabase(Self.key(1)) }
            var types: [String] = []
            for _ in 0..<100 {
                types = try await onSecond()
                if !types.isEmpty { break }
                try await Task.sleep(for: .milliseconds(50))
            }
            expectEqual(types, ["Note"])
        }
    }
}

