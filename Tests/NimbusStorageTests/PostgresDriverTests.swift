import Foundation
import Logging
import NIOCore
import NIOPosix
import NimbusPostgres
import NimbusStorage
import NimbusTestSupport
import PostgresNIO
import Synchronization
import Testing

/// What is particular to the PostgreSQL driver: its URL, its migrations, its round trips, and
/// how it fails when the server is gone or silent. (What every driver must do is
/// `StorageConformanceTests`.)
@Suite struct PostgresDriverTests {
    @Test func continuousIntegrationRunsThePostgreSQLCases() {
        // scripts/test.sh starts a cluster; CI must never pass by leaving PostgreSQL out.
        if ProcessInfo.processInfo.environment["CI"] == "true" {
            #expect(PostgresTestCluster.url != nil, "NIMBUS_TEST_POSTGRES is not set under CI")
        }
    }

    @Test func urlsNameServerUserDatabaseAndTLS() throws {
        let full = try PostgresLocation(url: "postgres://nimbus:s%40cret@db.internal:6543/cloud?sslmode=require")
        #expect(full.host == "db.internal" && full.port == 6543 && full.user == "nimbus" && full.password == "s@cret")
        #expect(full.database == "cloud" && full.tls == .require)
        #expect(!full.description.contains("cret"), "the password never reaches logs")
        let bare = try PostgresLocation(url: "postgresql://localhost")
        #expect(bare.port == 5432 && bare.user == "postgres" && bare.database == "postgres" && bare.tls == .prefer)
        #expect(!bare.followsPrimary && bare.sessionAttributes == .any)
    }

    @Test func urlsNameAPrimaryAndItsStandbysAsLibpqDoes() throws {
        let pair = try PostgresLocation(
            url: "postgres://nimbus:pw@db1:5433,db2,[::1]:6000/cloud?sslmode=disable&target_session_attrs=read-write")
        expectEqual(pair.endpoints.map(\.description), ["db1:5433", "db2:5432", "[::1]:6000"])
        #expect(pair.user == "nimbus" && pair.password == "pw" && pair.database == "cloud" && pair.tls == .disable)
        #expect(pair.sessionAttributes == .readWrite && pair.followsPrimary)
        // What logs show, and what pg_dump and pg_restore are given: every host, no password.
        expectEqual(pair.description, "postgres://nimbus@db1:5433,db2:5432,[::1]:6000/cloud?sslmode=disable&target_session_attrs=read-write")
        try expectEqual(PostgresLocation(url: pair.description).endpoints, pair.endpoints)
        // One host that must be a primary is followed too: a demoted host is left for none.
        #expect(try PostgresLocation(url: "postgres://db1/cloud?target_session_attrs=primary").followsPrimary)
        // Several hosts, any of them: the first that answers.
        #expect(try PostgresLocation(url: "postgres://db1,db2/cloud").followsPrimary)
    }

    @Test(arguments: [
        ("postgres://", "names no host"),
        ("postgres://h/db?sslmode=maybe", "sslmode 'maybe'"),
        ("postgres://h/db?pool=3", "'pool'"),
        ("postgres://h:0/db", "out of range"),
        ("postgres://h/a/b", "contains '/'"),
        ("mysql://h/db", "is not a postgres://"),
        ("postgres://h1,h1/db", "names a host twice"),
        ("postgres://h1,,h2/db", "empty host"),
        ("postgres://h1:x,h2/db", "port 'x'"),
        ("postgres://[::1/db", "no closing ']'"),
        ("postgres://h1,h2/db?target_session_attrs=standby", "read-only forms are for read replicas"),
    ])
    func badURLsSayWhatIsWrong(url: String, reason: String) {
        #expect {
            _ = try PostgresLocation(url: url)
        } throws: { error in
            String(describing: error).contains(reason)
        }
    }

    @Test func aServerThatRefusesConnectionsIsUnavailableByTheDeadline() async throws {
        // A port nothing listens on: the connection is refused (the pool keeps trying until
        // the deadline, so a server that comes back in time is used).
        let closed = try await Self.unusedPort()
        let start = ContinuousClock.now
        await #expect {
            _ = try await PostgresStorage(try PostgresLocation(url: "postgres://postgres@127.0.0.1:\(closed)/x?sslmode=disable"),
                                          deadline: .seconds(1))
        } throws: { error in
            guard case StorageError.unavailable = error else { return false }
            return true
        }
        // Well past the deadline, because beside the whole suite on two cores the clock also
        // measures the machine; a pool that kept retrying would never end at all.
        #expect(ContinuousClock.now - start < .seconds(10))
    }

    @Test func aServerThatNeverAnswersFailsAtTheDeadline() async throws {
        // Accepts connections and says nothing: the request must not hang.
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let silent = try await ServerBootstrap(group: group).bind(host: "127.0.0.1", port: 0).get()
        let port = try #require(silent.localAddress?.port)
        let start = ContinuousClock.now
        await #expect {
            _ = try await PostgresStorage(try PostgresLocation(url: "postgres://postgres@127.0.0.1:\(port)/x?sslmode=disable"),
                                          deadline: .milliseconds(800))
        } throws: { error in
            guard case StorageError.unavailable(let detail) = error else { return false }
            return detail.contains("did not answer")
        }
        #expect(ContinuousClock.now - start < .seconds(10))  // as above
        try await silent.close()
        try await group.shutdownGracefully()
    }

    /// A node keeps the ids it has read of database keys (`PostgresDatabaseIDs`). A kept id
    /// whose row is gone (the store restored from a backup older than the database, which
    /// another node then made again under a new id) is forgotten by the load that misses it,
    /// so the node's next try reads the directory: its write finds the new database instead
    /// of colliding with it for ever.
    @Test(.enabled(if: PostgresTestCluster.url != nil))
    func aKeptDatabaseIDWhoseRowIsGoneIsReadAgainFromTheDirectory() async throws {
        try await PostgresTestCluster.withDatabase { location in
            let a = UnitOfWorkDriver(PostgresCoarseStorage(try await PostgresStorage(location, deadline: PostgresTestCluster.deadline, maximumConnections: 2)))
            let b = UnitOfWorkDriver(PostgresCoarseStorage(try await PostgresStorage(location, deadline: PostgresTestCluster.deadline, maximumConnections: 2)))
            let key = DatabaseKey(container: "c", environment: .development, scope: .private, ownerID: 7)
            let first = try await a.write(in: key) { try $0.ensureDatabase(key) }
            try await expectEqual(b.read(in: key) { try $0.database(key) }?.id, first.id)
            for table in ["zones", "database_directory"] {
                try await PostgresTestCluster.execute("DELETE FROM \(table) WHERE database_id = \(first.id)", on: location)
            }
            try await PostgresTestCluster.execute("DELETE FROM databases WHERE id = \(first.id)", on: location)
            let again = try await a.write(in: key) { try $0.ensureDatabase(key) }
            #expect(again.id != first.id)
            try await expectEqual(b.write(in: key) { try $0.ensureDatabase(key) }.id, again.id, "node b kept the id whose row is gone")
            try await a.close()
            try await b.close()
        }
    }

    @Test(.enabled(if: PostgresTestCluster.url != nil))
    func nodesStartingTogetherMigrateOnce() async throws {
        try await PostgresTestCluster.withDatabase { location in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<4 {
                    group.addTask {
                        let storage = try await PostgresStorage(location, deadline: PostgresTestCluster.deadline, maximumConnections: 2)
                        await storage.close()
                    }
                }
                try await group.waitForAll()
            }
            let storage = try await PostgresStorage(location, deadline: PostgresTestCluster.deadline, maximumConnections: 2)
            #expect(try await storage.accounts.createContainer(ContainerRow(id: "c", createdAt: 1)))
            await storage.close()
        }
    }

    @Test(.enabled(if: PostgresTestCluster.url != nil))
    func partitionStoresForwardOnceAndKeepTheirIdRanges() async throws {
        try await PostgresTestCluster.withDatabase { homeLocation in
            try await PostgresTestCluster.withDatabase { secondLocation in
                try await PartitionedStorageTests.withOpened(
                    home: UnitOfWorkDriver(PostgresCoarseStorage(
                        try await PostgresStorage(homeLocation, deadline: PostgresTestCluster.deadline, maximumConnections: 4))),
                    second: UnitOfWorkDriver(PostgresCoarseStorage(
                        try await PostgresStorage(secondLocation, deadline: PostgresTestCluster.deadline, maximumConnections: 4)))
                ) { home, second in
                    try await PartitionedStorageTests.forwarding(home: home, second: second)
                }
            }
        }
    }

    /// The partition catalog in a home (docs/scale-out.md, "Partitions: the design"): nodes
    /// racing to place one database all get the first placement, and counts follow.
    @Test(.enabled(if: PostgresTestCluster.url != nil))
    func partitionPlacementsRacingAgreeOnTheFirst() async throws {
        try await PostgresTestCluster.withDatabase { location in
            let storage = try await PostgresStorage(location, deadline: PostgresTestCluster.deadline, maximumConnections: 8)
            let catalog = storage.partitionCatalog
            #expect(try await catalog.addPartition(name: "p2", url: "postgres://db2/nimbus", at: 1) == 1)
            #expect(try await catalog.addPartition(name: "p2", url: "postgres://elsewhere/nimbus", at: 2) == nil)
            // Numbers are never reused (the refused insert may have used one): the home is 0.
            let third = try #require(try await catalog.addPartition(name: "p3", url: "postgres://db3/nimbus", at: 3))
            #expect(third > 1)
            #expect(
                try await catalog.partitions().map { "\($0.name) \($0.number) \($0.url)" }
                    == ["p2 1 postgres://db2/nimbus", "p3 \(third) postgres://db3/nimbus"])

            let key = DatabaseKey(container: "c", environment: .production, scope: .private, ownerID: 7)
            #expect(try await catalog.placement(of: key) == nil)
            let answers = try await withThrowingTaskGroup(of: String.self) { group in
                for partition in ["home", "p2", "home", "p2", "p2", "home", "p2", "home"] {
                    group.addTask { try await catalog.place(key, on: partition) }
                }
                return try await group.reduce(into: [String]()) { $0.append($1) }
            }
            let placed = try #require(try await catalog.placement(of: key))
            #expect(answers.count == 8 && answers.allSatisfy { $0 == placed }, "\(answers)")
            // Another environment, scope or owner is another database.
            for other in [
                DatabaseKey(container: "c", environment: .development, scope: .private, ownerID: 7),
                DatabaseKey(container: "c", environment: .production, scope: .public, ownerID: 0),
                DatabaseKey(container: "c", environment: .production, scope: .private, ownerID: 8),
            ] {
                #expect(try await catalog.place(other, on: "p2") == "p2")
            }
            var expected = ["p2": 3]
            expected[placed, default: 0] += 1
            #expect(try await catalog.placementCounts() == expected)
            await storage.close()
        }
    }

    /// The apply function is no migration's: the first node of a version installs it under its
    /// text's fingerprint (docs/scale-out.md, "Migrations"), so nodes starting together make it
    /// once, and the function an older version installed stays for the older nodes still running.
    @Test(.enabled(if: PostgresTestCluster.url != nil))
    func nodesInstallTheApplyFunctionOnceByItsFingerprint() async throws {
        try await PostgresTestCluster.withDatabase { location in
            let storage = try await PostgresStorage(location, deadline: PostgresTestCluster.deadline, maximumConnections: 2)
            await storage.close()
            // As a node of another version would have left it.
            try await PostgresTestCluster.execute(
                "CREATE FUNCTION nimbus_apply_00000000000000ff(changes jsonb) RETURNS void LANGUAGE sql AS 'SELECT'", on: location)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<3 {
                    group.addTask { await (try await PostgresStorage(location, deadline: PostgresTestCluster.deadline, maximumConnections: 2)).close() }
                }
                try await group.waitForAll()
            }
            let names = try await PostgresTestCluster.rows(
                "SELECT proname::text FROM pg_proc WHERE proname LIKE 'nimbus\\_apply%' ORDER BY proname", on: location
            ).compactMap(\.first).compactMap { $0 }
            expectEqual(names.count, 2, "\(names)")
            #expect(names.contains("nimbus_apply_00000000000000ff"))
            let own = names.filter { $0 != "nimbus_apply_00000000000000ff" }
            #expect(own.count == 1 && own[0].wholeMatch(of: /nimbus_apply_[0-9a-f]{16}/) != nil, "\(own)")
            // And it is the one a unit's writes go through.
            let storage2 = try await PostgresStorage(location, deadline: PostgresTestCluster.deadline, maximumConnections: 2)
            let driver = UnitOfWorkDriver(PostgresCoarseStorage(storage2))
            let zone = try await driver.write { unit in
                try unit.createZone(
                    databaseID: try unit.ensureDatabase(DatabaseKey(container: "c", environment: .development, scope: .private, ownerID: 1)).id,
                    name: "Z")
            }
            expectEqual(zone.name, "Z")
            await storage2.close()
        }
    }

    @Test(.enabled(if: PostgresTestCluster.url != nil))
    func everyAccountCallIsOneRoundTrip() async throws {
        try await PostgresTestCluster.withDatabase { location in
            let statements = Mutex<[String]>([])
            let storage = try await PostgresStorage(location, deadline: PostgresTestCluster.deadline, maximumConnections: 2) { sql in
                statements.withLock { $0.append(sql) }
            }
            // The node's own upkeep is not a request's: the change feed stamper's first pass
            // (half a second after the store opened) once landed among the calls below and was
            // counted as `credentials`' second statement.
            statements.withLock { $0.removeAll() }
            try await Task.sleep(for: .seconds(1))
            expectEqual(statements.withLock { $0 }, [], "statements sent by the node alone")
            let accounts = storage.accounts
            // The statements a call sent, shown when there are more than one.
            func expectOneRoundTrip(_ work: () async throws -> Void, sourceLocation: SourceLocation = #_sourceLocation) async throws {
                statements.withLock { $0.removeAll() }
                try await work()
                let sent = statements.withLock { $0 }
                #expect(sent.count == 1, "statements sent: \(sent)", sourceLocation: sourceLocation)
            }
            try await expectOneRoundTrip { _ = try await accounts.createContainer(ContainerRow(id: "c", createdAt: 1)) }
            guard case .created(let user) = try await accounts.createUser(name: "u", passwordHash: "p", createdAt: 1, profile: UserProfile())
            else { throw TestFailure("the user was not created") }
            let session = SessionRow(tokenHash: "s", userID: user.id, container: "c", environment: .development, createdAt: 1, lastUsedAt: 1)
            try await expectOneRoundTrip { try await accounts.startSession(session, removingSessionsIdleBefore: 0) }
            // Authenticating a request: token, session and user in one.
            try await expectOneRoundTrip { _ = try await accounts.credentials(apiTokenHash: "t", sessionHash: "s") }
            try await expectOneRoundTrip { _ = try await accounts.endSessions(userName: "u") }
            await storage.close()
        }
    }

    /// A migration that needs a table another session holds (as a node of an earlier version
    /// still serving would) stops after the lock wait and says why, instead of waiting out the
    /// migrations' hour; once the table is free, the same migration goes through.
    @Test(.enabled(if: PostgresTestCluster.url != nil))
    func aMigrationBlockedByAnotherSessionSaysSoInsteadOfWaiting() async throws {
        try await PostgresTestCluster.withDatabase { location in
            await (try await PostgresStorage(location, deadline: PostgresTestCluster.deadline, maximumConnections: 2)).close()
            // v36 pending again, with the index it drops back on `records`, and `records` held
            // as a reader of an earlier version holds it.
            try await PostgresTestCluster.execute("CREATE INDEX records_by_id ON records (id)", on: location)
            try await PostgresTestCluster.execute("DELETE FROM nimbus_migrations WHERE name = 'v36-records-by-key-only'", on: location)
            let logger = Logger(label: "holder")
            let holder = try await PostgresTestCluster.connect(to: location, logger: logger)
            _ = try await holder.query("BEGIN", logger: logger)
            _ = try await holder.query("LOCK TABLE records IN ACCESS SHARE MODE", logger: logger)
            let started = ContinuousClock.now
            do {
                let storage = try await PostgresStorage(
                    location, deadline: PostgresTestCluster.deadline, maximumConnections: 2, migrationLockWait: .seconds(1))
                await storage.close()
                Issue.record("the migration went through while another session held its table")
            } catch {
                let reason = String(describing: error)
                #expect(reason.contains("v36-records-by-key-only") && reason.contains("earlier version"), "\(reason)")
            }
            #expect(ContinuousClock.now - started < .seconds(20), "it waited \(ContinuousClock.now - started)")
            _ = try await holder.query("ROLLBACK", logger: logger)
            try await holder.close()
            await (try await PostgresStorage(
                location, deadline: PostgresTestCluster.deadline, maximumConnections: 2, migrationLockWait: .seconds(1))).close()
            let applied = try await PostgresTestCluster.rows(
                "SELECT count(*)::text FROM nimbus_migrations WHERE name = 'v36-records-by-key-only'", on: location)
            expectEqual(applied.first?.first ?? nil, "1")
            let index = try await PostgresTestCluster.rows("SELECT count(*)::text FROM pg_indexes WHERE indexname = 'records_by_id'", on: location)
            expectEqual(index.first?.first ?? nil, "0", "v36 dropped the index")
        }
    }

    /// Citus distributes a table by a column that every primary and unique key must include:
    /// every table of a logical database carries `database_id` and leads its keys with it
    /// (docs/scale-out.md, "Distribution").
    @Test(.enabled(if: PostgresTestCluster.url != nil))
    func everyTableOfALogicalDatabaseLeadsItsKeysWithTheDatabase() async throws {
        try await PostgresTestCluster.withDatabase { location in
            let storage = try await PostgresStorage(location, deadline: PostgresTestCluster.deadline, maximumConnections: 2)
            await storage.close()
            let tables = ["zones", "records", "field_index", "record_tokens", "pair_index", "record_references", "subscriptions"]
            let list = tables.map { "'\($0)'" }.joined(separator: ", ")
            let carrying = try await PostgresTestCluster.rows(
                "SELECT table_name::text FROM information_schema.columns WHERE column_name = 'database_id' AND table_name IN (\(list))",
                on: location
            ).compactMap(\.first).compactMap { $0 }
            expectEqual(Set(carrying), Set(tables))
            let keys = try await PostgresTestCluster.rows(
                """
                SELECT c.conrelid::regclass::text, c.conname::text, a.attname::text
                FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
                WHERE c.contype IN ('p', 'u') AND c.conrelid::regclass::text IN (\(list))
                """, on: location)
            let keyed = Set(keys.compactMap { $0[0] })
            expectEqual(keyed, Set(tables).subtracting(["record_references"]), "tables with keys: \(keyed.sorted())")
            for key in keys {
                expectEqual(key[2], "database_id", "\(key[0] ?? "") key \(key[1] ?? "") leads with \(key[2] ?? "nothing")")
            }
        }
    }

    /// Tables filled before autovacuum came round get the planner's statistics from the node that
    /// wrote them (`PostgresPlannerStatistics`). Autovacuum is off for them here, so only the
    /// node can have analyzed them; a table with fewer changes than the threshold is left alone.
    @Test(.enabled(if: PostgresTestCluster.url != nil))
    func tablesFilledBeforeAutovacuumCameRoundAreAnalyzedByTheNode() async throws {
        try await PostgresTestCluster.withDatabase { location in
            let postgres = try await PostgresStorage(location, deadline: PostgresTestCluster.deadline, maximumConnections: 4)
            let storage = UnitOfWorkDriver(PostgresCoarseStorage(postgres))
            // Only these: autovacuum may analyze the others (zones, counters) at any time, and
            // did when a loaded machine stretched the test to half a minute.
            let filled: Set<String> = ["records", "field_index", "pair_index", "record_tokens"]
            for table in filled {
                try await PostgresTestCluster.execute("ALTER TABLE \(table) SET (autovacuum_enabled = false)", on: location)
            }
            func analyzed() async throws -> Set<String> {
                let rows = try await PostgresTestCluster.rows(
                    "SELECT relname::text FROM pg_stat_user_tables WHERE last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL",
                    on: location)
                return Set(rows.compactMap { $0.first ?? nil })
            }
            let database = try await storage.write { try $0.ensureDatabase(StorageConformanceTests.key) }
            let zone = try #require(try await storage.read { try $0.zone(databaseID: database.id, name: "_defaultZone") })
            var written = 0
            func write(_ count: Int) async throws {
                let first = written
                written += count
                try await storage.write { tx in
                    for number in first..<first + count {
                        let row = StorageConformanceTests.row(zone.id, "r\(number)", sequence: try tx.nextRecordSequence(in: zone))
                        let id = try tx.putRecord(row)
                        let record = IndexedRecord(row: row, fields: [("n", .double(Double(number)))], grants: .everything)
                        try tx.indexRecord(recordID: id, zoneID: zone.id, recordType: "T", record, hadEntries: false)
                    }
                }
            }
            try await write(100)
            #expect(try await analyzed().isDisjoint(with: filled), "a new store's tables start without statistics")
            // Past the threshold, then writes as an app goes on making them: the node checks after
            // writes, at most every PostgresPlannerStatistics.interval.
            try await write(700)
            let deadline = ContinuousClock.now + .seconds(30)
            while try await !analyzed().isSuperset(of: ["records", "field_index"]), ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(300))
                try await write(1)
            }
            let tables = try await analyzed()
            #expect(tables.isSuperset(of: ["records", "field_index"]), "analyzed: \(tables.sorted())")
            #expect(!tables.contains("pair_index") && !tables.contains("record_tokens"), "tables without changes: \(tables.sorted())")
            try await storage.close()
        }
    }

    @Test(.enabled(if: PostgresTestCluster.url != nil))
    func droppedConnectionsFailClearlyAndRecoverWithoutARestart() async throws {
        try await PostgresTestCluster.withDatabase { location in
            let storage = try await PostgresStorage(location, deadline: PostgresTestCluster.deadline, maximumConnections: 2)
            #expect(try await storage.accounts.createContainer(ContainerRow(id: "c", createdAt: 1)))
            // Every connection to this database is killed, as a server restart or a proxy would.
            var admin = location
            admin.database = "postgres"
            try await PostgresTestCluster.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '\(location.database)'", on: admin)
            var answered = false
            for _ in 0..<5 where !answered {
                do {
                    answered = try await storage.accounts.containers().map(\.id) == ["c"]
                } catch {
                    // A request caught on a dying connection fails as unavailable, never otherwise.
                    guard case StorageError.unavailable = error else {
                        Issue.record("a dropped connection surfaced as \(error)")
                        break
                    }
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
            #expect(answered, "the pool reconnected by itself")
            await storage.close()
        }
    }

    static func unusedPort() async throws -> Int {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let channel = try await ServerBootstrap(group: group).bind(host: "127.0.0.1", port: 0).get()
        let port = channel.localAddress!.port!
        try await channel.close()
        try await group.shutdownGracefully()
        return port
    }
}
