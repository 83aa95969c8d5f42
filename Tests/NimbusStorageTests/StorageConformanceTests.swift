import Foundation
import NimbusPostgres
@testable import NimbusSQLite
import NimbusStorage
import NimbusWire
import NimbusTestSupport
import Testing

/// The behaviour every storage driver must show. Each test runs against every driver in
/// `StorageConformanceTests.drivers`; a new driver joins the list and must pass them all.
@Suite struct StorageConformanceTests {
    struct Driver: CustomStringConvertible, Sendable {
        let description: String
        /// Makes a fresh, empty place for a store (a directory, a database), runs `body` with
        /// its name, and removes it.
        let place: @Sendable (_ body: (String) async throws -> Void) async throws -> Void
        /// Opens the store at a place (again, to see what survived a reopen).
        let make: @Sendable (String) async throws -> any StorageDriver
    }

    static func directory(_ body: (String) async throws -> Void) async throws {
        let directory = NSTemporaryDirectory() + "nimbus-storage-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await body(directory)
    }

    static let drivers: [Driver] =
        [
            Driver(description: "SQLite synchronous=FULL", place: directory) { UnitOfWorkDriver(try SQLiteStorage(path: $0 + "/db.sqlite", synchronous: .full)) },
            Driver(description: "SQLite synchronous=NORMAL", place: directory) { UnitOfWorkDriver(try SQLiteStorage(path: $0 + "/db.sqlite", synchronous: .normal)) },
            Driver(description: "SQLite over round trips", place: directory) {
                RetryingStorage(UnitOfWorkDriver(RoundTrips(try SQLiteStorage(path: $0 + "/db.sqlite", synchronous: .normal)), checksPurity: true))
            },
        ]
        + (PostgresTestCluster.url == nil
            ? []
            : [
                Driver(
                    description: "PostgreSQL as units of work",
                    place: { body in try await PostgresTestCluster.withDatabase { try await body($0.description) } },
                    make: { place in
                        RetryingStorage(
                            UnitOfWorkDriver(PostgresCoarseStorage(try await PostgresStorage(
                                try PostgresLocation(url: place), deadline: PostgresTestCluster.deadline, maximumConnections: 4))))
                    })
            ])


    func withDriver(_ driver: Driver, _ body: (any StorageDriver) async throws -> Void) async throws {
        try await driver.place { place in
            try await withClosing(try await driver.make(place), closedBy: { try await $0.close() }, body)
        }
    }

    /// A driver of the parts of the protocol already in their coarse async form (`AccountStore`,
    /// `PushStore`): every driver, PostgreSQL's included, passes these.
    struct StoreDriver: CustomStringConvertible, Sendable {
        let description: String
        let run: @Sendable (_ body: @Sendable (any AccountStore, any PushStore) async throws -> Void) async throws -> Void
    }

    static let storeDrivers: [StoreDriver] =
        drivers.map { driver in
            StoreDriver(description: driver.description) { body in
                try await driver.place { place in
                    let storage = try await driver.make(place)
                    try await body(storage.accounts, storage.push)
                    try await storage.close()
                }
            }
        }

    static let key = DatabaseKey(container: "c", environment: .development, scope: .private, ownerID: 7)

    static func row(_ zone: Int64, _ name: String, sequence: Int64, deleted: Bool = false) -> RecordRow {
        let stamp = ChangeStamp(timestamp: 1, userRecordName: "_u", deviceID: "d")
        return RecordRow(
            zoneID: zone, recordName: name, recordType: "T", fields: Array("{}".utf8), parent: nil,
            changeSequence: sequence, created: stamp, modified: stamp, isDeleted: deleted)
    }

    /// A record's modifier and device read back as saved, whether or not they are the
    /// creator's (SQLite shares the creator's strings when the text is the same): by name, in
    /// the change feed and in a query's page. Among them, texts where one is the other's prefix,
    /// and empty ones.
    @Test(arguments: drivers)
    func modifierAndDeviceReadBackAsSavedBesideTheCreators(driver: Driver) async throws {
        try await withDriver(driver) { storage in
            let database = try await storage.write { try $0.ensureDatabase(Self.key) }
            let zone = try #require(try await storage.read { try $0.zone(databaseID: database.id, name: "_defaultZone") })
            let stamps: [(created: ChangeStamp, modified: ChangeStamp)] = [
                (ChangeStamp(timestamp: 1, userRecordName: "_u", deviceID: "d"), ChangeStamp(timestamp: 2, userRecordName: "_u", deviceID: "d")),
                (ChangeStamp(timestamp: 1, userRecordName: "_u", deviceID: "d"), ChangeStamp(timestamp: 2, userRecordName: "_v", deviceID: "phone")),
                (ChangeStamp(timestamp: 1, userRecordName: "_u", deviceID: "d"), ChangeStamp(timestamp: 2, userRecordName: "_u2", deviceID: "")),
                (ChangeStamp(timestamp: 1, userRecordName: "_u2", deviceID: ""), ChangeStamp(timestamp: 2, userRecordName: "_u", deviceID: "d")),
                (ChangeStamp(timestamp: 1, userRecordName: "", deviceID: ""), ChangeStamp(timestamp: 2, userRecordName: "", deviceID: "")),
            ]
            let saved = try await storage.write { tx in
                try stamps.enumerated().map { index, stamp in
                    var row = Self.row(zone.id, "s\(index)", sequence: Int64(index + 1))
                    (row.created, row.modified) = stamp
                    _ = try tx.putRecord(row)
                    return row
                }
            }
            for row in saved {
                let read = try #require(try await storage.read { try $0.record(zoneID: zone.id, name: row.recordName) })
                expectEqual([read.created, read.modified], [row.created, row.modified], "\(row.recordName)")
            }
            let feed = try await storage.read { try $0.recordChanges(zoneID: zone.id, after: 0, recordTypes: nil, limit: 100) }
            expectEqual(feed.map { [$0.created, $0.modified] }, saved.map { [$0.created, $0.modified] })
            let query = RecordQuery(
                databaseID: zone.databaseID, zoneIDs: [zone.id], recordType: "T", conditions: [], sorts: [], after: nil, limit: 100)
            let page = try await storage.read { try $0.queryRecords(query) }
            expectEqual(
                Set(page.rows.map { "\($0.recordName) \($0.created) \($0.modified)" }),
                Set(saved.map { "\($0.recordName) \($0.created) \($0.modified)" }))
        }
    }

    @Test(arguments: drivers)
    func databaseIsMadeOnceWithItsDefaultZone(driver: Driver) async throws {
        try await withDriver(driver) { storage in
            let first = try await storage.write { try $0.ensureDatabase(Self.key) }
            let second = try await storage.write { try $0.ensureDatabase(Self.key) }
            expectEqual(first.id, second.id)
            let zones = try await storage.read { try $0.zones(databaseID: first.id) }
            expectEqual(zones.map(\.name), ["_defaultZone"])
            try await expectEqual(storage.read { try $0.installationSecret() }.count, 32)
            // A new database asks once for production index entries to be rebuilt (its
            // migrations added a kind of entry); the service does that as it starts.
            #expect(try await storage.write { try $0.takeIndexRebuildRequest() })
            #expect(try await !storage.write { try $0.takeIndexRebuildRequest() })
        }
    }

    @Test(arguments: drivers)
    func sequencesStrictlyIncreaseAndAreNeverReused(driver: Driver) async throws {
        try await withDriver(driver) { storage in
            let database = try await storage.write { try $0.ensureDatabase(Self.key) }
            let zone = try #require(try await storage.read { try $0.zone(databaseID: database.id, name: "_defaultZone") })
            let a = try await storage.write { try $0.nextRecordSequence(in: zone) }
            struct Undo: Error {}
            _ = try? await storage.write { tx -> Int64 in
                _ = try tx.nextRecordSequence(in: zone)
                throw Undo()
            }
            let b = try await storage.write { try $0.nextRecordSequence(in: zone) }
            #expect(b == a + 1)  // the rolled-back writer left no trace
        }
    }

    /// A zone (and a database with its default zone) made in the transaction that saves its
    /// first records: the next transaction's sequences come after those.
    @Test(arguments: drivers)
    func aZoneMadeWithItsRecordsCountsOnFromThem(driver: Driver) async throws {
        try await withDriver(driver) { storage in
            let (zone, defaultZone, first) = try await storage.write { tx in
                let database = try tx.ensureDatabase(Self.key)
                let defaultZone = try #require(try tx.zone(databaseID: database.id, name: "_defaultZone"))
                let zone = try tx.createZone(databaseID: database.id, name: "Z")
                var last: [Int64] = []
                for made in [zone, defaultZone] {
                    for _ in 0..<2 { last.append(try tx.nextRecordSequence(in: made)) }
                }
                return (zone, defaultZone, last)
            }
            let next = try await storage.write { tx in [try tx.nextRecordSequence(in: zone), try tx.nextRecordSequence(in: defaultZone)] }
            #expect(next[0] > first[1] && next[1] > first[3], "\(first) then \(next)")
        }
    }

    @Test(arguments: drivers)
    func concurrentWritersSucceedOrFailEachOnTheirOwn(driver: Driver) async throws {
        try await withDriver(driver) { storage in
            let database = try await storage.write { try $0.ensureDatabase(Self.key) }
            let zone = try #require(try await storage.read { try $0.zone(databaseID: database.id, name: "_defaultZone") })
            struct Refused: Error {}
            let results = await withTaskGroup(of: Bool.self) { group in
                for index in 0..<200 {
                    group.addTask {
                        do {
                            try await storage.write { tx in
                                let sequence = try tx.nextRecordSequence(in: zone)
                                try tx.putRecord(Self.row(zone.id, "r\(index)", sequence: sequence))
                                if index % 3 == 0 { throw Refused() }
                            }
                            return true
                        } catch { return false }
                    }
                }
                var outcomes: [Bool] = []
                for await outcome in group { outcomes.append(outcome) }
                return outcomes
            }
            expectEqual(results.filter { $0 }.count, 133)
            let rows = try await storage.read { try $0.recordChanges(zoneID: zone.id, after: 0, recordTypes: nil, limit: 1000) }
            expectEqual(rows.count, 133)
            #expect(!rows.contains { Int($0.recordName.dropFirst())! % 3 == 0 })
            expectEqual(rows.map(\.changeSequence), rows.map(\.changeSequence).sorted())
        }
    }

    /// Writers whose records together need several blocks of ids (a group of units of work
    /// shares one decision, and a 200-record batch alone nearly fills a block).
    @Test(arguments: drivers)
    func concurrentLargeWritersAllCommit(driver: Driver) async throws {
        try await withDriver(driver) { storage in
            let database = try await storage.write { try $0.ensureDatabase(Self.key) }
            let zone = try #require(try await storage.read { try $0.zone(databaseID: database.id, name: "_defaultZone") })
            try await withThrowingTaskGroup(of: Void.self) { group in
                for writer in 0..<6 {
                    group.addTask {
                        try await storage.write { tx in
                            for index in 0..<200 {
                                let sequence = try tx.nextRecordSequence(in: zone)
                                try tx.putRecord(Self.row(zone.id, "w\(writer)-\(index)", sequence: sequence))
                            }
                        }
                    }
                }
                try await group.waitForAll()
            }
            let rows = try await storage.read { try $0.recordChanges(zoneID: zone.id, after: 0, recordTypes: nil, limit: 2000) }
            expectEqual(rows.count, 1200)
            expectEqual(Set(rows.map(\.recordName)).count, 1200)
        }
    }

    @Test(arguments: drivers)
    func recreatedZoneGetsNewIdAndDeletedZoneLosesRecords(driver: Driver) async throws {
        try await withDriver(driver) { storage in
            let database = try await storage.write { try $0.ensureDatabase(Self.key) }
            let (first, firstTags) = try await storage.write { tx in
                let zone = try tx.createZone(databaseID: database.id, name: "Z")
                var tags: [Int64] = []
                for _ in 0..<5 {
                    tags.append(try tx.nextRecordSequence(in: zone))
                    try tx.putRecord(Self.row(zone.id, "r", sequence: tags.last!))
                }
                return (zone, tags)
            }
            try await storage.write { tx in try tx.deleteZone(id: first.id) }
            let tombstone = try await storage.read { try $0.zone(databaseID: database.id, name: "Z") }
            expectEqual(tombstone?.isDeleted, true)
            #expect(try await storage.read { try $0.record(zoneID: first.id, name: "r") } == nil)
            let (second, secondTag) = try await storage.write { tx in
                let zone = try tx.createZone(databaseID: database.id, name: "Z")
                return (zone, try tx.nextRecordSequence(in: zone))
            }
            #expect(second.id != first.id)
            // A record of the zone made again never gets a change tag one of the zone before had.
            #expect(secondTag > firstTags.max()!)
            // Through the database's sequence as read: every committed stamp is at or below it.
            let changes = try await storage.read { tx in
                // (nil only while a unit of work finds what to load: no #require in here)
                let current = try tx.database(Self.key)?.sequence ?? 0
                return try tx.zoneChanges(databaseID: database.id, after: 0, through: current, limit: 10)
            }
            expectEqual(changes.map(\.name), ["Z"])
            expectEqual(changes.first?.isDeleted, false)
        }
    }

    @Test(arguments: drivers)
    func recordStorageIDStaysWithZoneAndName(driver: Driver) async throws {
        try await withDriver(driver) { storage in
            let database = try await storage.write { try $0.ensureDatabase(Self.key) }
            let zone = try #require(try await storage.read { try $0.zone(databaseID: database.id, name: "_defaultZone") })
            let ids = try await storage.write { tx -> [Int64] in
                let first = try tx.putRecord(Self.row(zone.id, "a", sequence: 1), isNew: true)
                let other = try tx.putRecord(Self.row(zone.id, "b", sequence: 2))
                let updated = try tx.putRecord(Self.row(zone.id, "a", sequence: 3))
                let tombstone = try tx.putRecord(Self.row(zone.id, "a", sequence: 4, deleted: true))
                let recreated = try tx.putRecord(Self.row(zone.id, "a", sequence: 5))
                return [first, other, updated, tombstone, recreated]
            }
            #expect(ids[0] != ids[1])
            expectEqual(Set([ids[0], ids[2], ids[3], ids[4]]).count, 1)
        }
    }

    @Test(arguments: drivers)
    func recordChangesFollowSequenceAndFilterByType(driver: Driver) async throws {
        try await withDriver(driver) { storage in
            let database = try await storage.write { try $0.ensureDatabase(Self.key) }
            let zone = try #require(try await storage.read { try $0.zone(databaseID: database.id, name: "_defaultZone") })
            try await storage.write { tx in
                for name in ["a", "b", "c"] {
                    var row = Self.row(zone.id, name, sequence: try tx.nextRecordSequence(in: zone))
                    if name == "b" { row.recordType = "Other" }
                    try tx.putRecord(row)
                }
                // Rewriting "a" moves it to the end; a tombstone keeps its place in the feed.
                try tx.putRecord(Self.row(zone.id, "a", sequence: try tx.nextRecordSequence(in: zone), deleted: true))
            }
            let all = try await storage.read { try $0.recordChanges(zoneID: zone.id, after: 0, recordTypes: nil, limit: 10) }
            expectEqual(all.map(\.recordName), ["b", "c", "a"])
            expectEqual(all.last?.isDeleted, true)
            let page = try await storage.read { try $0.recordChanges(zoneID: zone.id, after: all[0].changeSequence, recordTypes: nil, limit: 1) }
            expectEqual(page.map(\.recordName), ["c"])
            let typed = try await storage.read { try $0.recordChanges(zoneID: zone.id, after: 0, recordTypes: ["Other"], limit: 10) }
            expectEqual(typed.map(\.recordName), ["b"])
        }
    }

    /// Containers read inside a transaction (the index rebuild at start walks them): every one,
    /// in byte order of their ids.
    @Test(arguments: drivers)
    func containersAreReadInATransactionInIdOrder(driver: Driver) async throws {
        try await withDriver(driver) { storage in
            #expect(try await storage.read { try $0.containers() }.isEmpty)
            for (id, time) in [("b", 2), ("a", 1), ("C", 3)] {
                #expect(try await storage.accounts.createContainer(ContainerRow(id: id, createdAt: Int64(time))))
            }
            let read = try await storage.read { try $0.containers() }
            expectEqual(read, [ContainerRow(id: "C", createdAt: 3), ContainerRow(id: "a", createdAt: 1), ContainerRow(id: "b", createdAt: 2)])
        }
    }

    @Test(arguments: storeDrivers)
    func accountsRoundTripAndRefuseDuplicates(driver: StoreDriver) async throws {
        try await driver.run { accounts, _ in
            #expect(try await accounts.createContainer(ContainerRow(id: "c", createdAt: 1)))
            #expect(try await !accounts.createContainer(ContainerRow(id: "c", createdAt: 9)), "a second container c")
            try await expectEqual(accounts.containers(), [ContainerRow(id: "c", createdAt: 1)])
            let token = APITokenRow(tokenHash: "h", container: "c", environment: .production, createdAt: 2, isRevoked: false)
            #expect(try await accounts.createAPIToken(token))
            var orphan = token
            orphan.tokenHash = "h2"
            orphan.container = "missing"
            #expect(try await !accounts.createAPIToken(orphan), "a token for a container that does not exist")
            guard case .created(let user) = try await accounts.createUser(name: "u", passwordHash: "p", createdAt: 3, profile: UserProfile())
            else { throw TestFailure("the user was not created") }
            try await expectEqual(accounts.createUser(name: "u", passwordHash: "q", createdAt: 3, profile: UserProfile()), .nameTaken)
            try await expectEqual(accounts.user(name: "u")?.passwordHash, "p")
            #expect(try await accounts.user(name: "nobody") == nil)
            let session = SessionRow(tokenHash: "s", userID: user.id, container: "c", environment: .production, createdAt: 4, lastUsedAt: 4)
            try await accounts.startSession(session, removingSessionsIdleBefore: 0)

            let both = try await accounts.credentials(apiTokenHash: "h", sessionHash: "s")
            expectEqual(both.apiToken, token)
            expectEqual(both.session?.row, session)
            expectEqual(both.session?.user, user)
            let neither = try await accounts.credentials(apiTokenHash: "x", sessionHash: "y")
            #expect(neither.apiToken == nil && neither.session == nil)

            try await accounts.touchSession(tokenHash: "s", at: 10)
            try await expectEqual(accounts.credentials(apiTokenHash: nil, sessionHash: "s").session?.row.lastUsedAt, 10)
            // A new session sweeps those idle since before the bound.
            try await accounts.startSession(
                SessionRow(tokenHash: "s2", userID: user.id, container: "c", environment: .production, createdAt: 20, lastUsedAt: 20),
                removingSessionsIdleBefore: 11)
            #expect(try await accounts.credentials(apiTokenHash: nil, sessionHash: "s").session == nil)
            try await expectEqual(accounts.endSessions(userName: "u"), 1)
            #expect(try await accounts.endSessions(userName: "nobody") == nil)
            try await accounts.endSession(tokenHash: "s2")  // ending what is gone is no error
            try await expectEqual(accounts.revokeAPITokens(container: "c", environment: nil), 1)
            try await expectEqual(accounts.credentials(apiTokenHash: "h", sessionHash: nil).apiToken?.isRevoked, true)
        }
    }

    @Test(arguments: storeDrivers)
    func serverKeysRoundTripAndSignaturesAreAdmittedOnce(driver: StoreDriver) async throws {
        try await driver.run { accounts, _ in
            let key = ServerKeyRow(keyID: "k1", container: "c", environment: .development, publicKeyPEM: "pem", createdAt: 5, isRevoked: false)
            var second = key
            second.keyID = "k0"
            second.createdAt = 6
            let orphan = try await accounts.addServerKey(key)
            #expect(try await accounts.createContainer(ContainerRow(id: "c", createdAt: 1)))
            let inserts = [orphan, try await accounts.addServerKey(key), try await accounts.addServerKey(key),
                           try await accounts.addServerKey(second)]
            expectEqual(inserts, [.noContainer, .added, .duplicate, .added])
            try await expectEqual(accounts.serverKey(id: "k1"), key)
            #expect(try await accounts.serverKey(id: "nothing") == nil)
            #expect(try await accounts.serverKeys(container: "c").map(\.keyID) == ["k1", "k0"])  // in the order added
            #expect(try await accounts.serverKeys(container: "other").isEmpty)
            // Revoked once; a second time, or a key that does not exist, is no revocation.
            let revocations = [
                try await accounts.revokeServerKey(id: "k1"), try await accounts.revokeServerKey(id: "k1"),
                try await accounts.revokeServerKey(id: "nothing"),
            ]
            expectEqual(revocations, [true, false, false])
            try await expectEqual(accounts.serverKey(id: "k1")?.isRevoked, true)
            // A signature is admitted once while kept (until 100, inclusive); once swept (by a
            // later admission), the caller's date check is what refuses it.
            let admissions = [
                try await accounts.admitSignature("s", keepUntil: 100, now: 50),
                try await accounts.admitSignature("s", keepUntil: 100, now: 60),
                try await accounts.admitSignature("s", keepUntil: 100, now: 100),
                try await accounts.admitSignature("t", keepUntil: 300, now: 200),
                try await accounts.admitSignature("s", keepUntil: 400, now: 201),
            ]
            expectEqual(admissions, [true, false, false, true, true])
        }
    }

    @Test(arguments: storeDrivers)
    func profilesMembershipsAndTheDirectoryRoundTrip(driver: StoreDriver) async throws {
        try await driver.run { accounts, _ in
            let names = NameComponents(givenName: "Ann", familyName: "Lee", nickname: "annie")
            let annProfile = UserProfile(emailAddress: "ann@example.com", phoneNumber: "+15550100", nameComponents: names)
            guard case .created(let ann) = try await accounts.createUser(name: "ann", passwordHash: "p", createdAt: 1, profile: annProfile),
                case .created(let bob) = try await accounts.createUser(
                    name: "bob", passwordHash: "p", createdAt: 2, profile: UserProfile(emailAddress: "bob@example.com"))
            else { throw TestFailure("the users were not created") }
            // Name, email and phone are each one account's.
            let taken = [
                try await accounts.createUser(name: "ann", passwordHash: "p", createdAt: 3, profile: UserProfile()),
                try await accounts.createUser(name: "cy", passwordHash: "p", createdAt: 3, profile: UserProfile(emailAddress: "ann@example.com")),
                try await accounts.createUser(name: "cy", passwordHash: "p", createdAt: 3, profile: UserProfile(phoneNumber: "+15550100")),
            ]
            expectEqual(taken, [.nameTaken, .emailTaken, .phoneTaken])
            #expect(try await accounts.user(name: "cy") == nil, "nothing written by the refusals")
            try await expectEqual(accounts.profile(userID: ann.id), annProfile)
            #expect(try await accounts.profile(userID: 999) == nil)

            #expect(try await accounts.member(container: "c", userID: ann.id) == nil)
            #expect(try await !accounts.setDiscoverable(container: "c", userID: ann.id, true), "not a member yet")
            let annMember = ContainerMember(container: "c", userID: ann.id, userRecordName: "_ann", discoverable: nil, joinedAt: 5)
            try await accounts.join(annMember)
            var again = annMember
            again.joinedAt = 9
            try await accounts.join(again)  // joining again keeps the first membership
            try await expectEqual(accounts.member(container: "c", userID: ann.id), annMember)
            try await accounts.join(ContainerMember(container: "c", userID: bob.id, userRecordName: "_bob", discoverable: nil, joinedAt: 6))
            try await accounts.join(ContainerMember(container: "d", userID: bob.id, userRecordName: "_bob_d", discoverable: true, joinedAt: 6))
            #expect(try await accounts.setDiscoverable(container: "c", userID: ann.id, true))
            try await expectEqual(accounts.member(container: "c", userID: ann.id)?.discoverable, true)

            // The directory finds members of the container by any lookup, whatever their choice.
            let found = try await accounts.directory(
                container: "c", lookups: [.email("ann@example.com"), .recordName("_bob"), .phone("+19990000"), .recordName("_bob_d")])
            expectEqual(Set(found.map(\.member.userRecordName)), ["_ann", "_bob"])
            expectEqual(found.first { $0.member.userID == ann.id }?.profile, annProfile)
            #expect(try await accounts.directory(container: "c", lookups: []).isEmpty)
            try await expectEqual(accounts.directory(container: "c", lookups: [.phone("+15550100")]).map(\.member.userID), [ann.id])
            try await expectEqual(accounts.discoverableMembers(container: "c", limit: 10).map(\.member.userID), [ann.id])
            try await expectEqual(accounts.discoverableMembers(container: "d", limit: 10).map(\.member.userID), [bob.id])
            #expect(try await accounts.discoverableMembers(container: "d", limit: 0).isEmpty)

            // Discovery for a whole container: on until turned off; only for a container that exists.
            try await expectEqual(accounts.containerSettings(container: "c"), ContainerSettings(userDiscovery: true, signUp: false))
            let closed = ContainerSettings(userDiscovery: false, signUp: true)
            #expect(try await !accounts.setContainerSettings(container: "c", closed), "no container c yet")
            #expect(try await accounts.createContainer(ContainerRow(id: "c", createdAt: 1)))
            #expect(try await accounts.setContainerSettings(container: "c", closed))
            try await expectEqual(accounts.containerSettings(container: "c"), closed)
            #expect(try await accounts.setContainerSettings(container: "c", ContainerSettings()))
            try await expectEqual(accounts.containerSettings(container: "c"), ContainerSettings())
        }
    }

    @Test(arguments: storeDrivers)
    func securityRolesGrantsAndAssignmentsRoundTrip(driver: StoreDriver) async throws {
        try await driver.run { accounts, _ in
            try await expectEqual(accounts.securityState(), SecurityState())
            guard case .created(let ann) = try await accounts.createUser(name: "ann", passwordHash: "p", createdAt: 1, profile: UserProfile())
            else { throw TestFailure("the user was not created") }
            let created = [
                try await accounts.createRole(container: "c", environment: .development, name: "Admin", createdAt: 1),
                try await accounts.createRole(container: "c", environment: .development, name: "Admin", createdAt: 2),
                try await accounts.createRole(container: "c", environment: .production, name: "Admin", createdAt: 3),
            ]
            expectEqual(created, [true, false, true])
            try await accounts.setGrant(container: "c", environment: .development, SecurityGrant(recordType: "Party", role: "Admin", permissions: .all))
            try await accounts.setGrant(container: "c", environment: .development, SecurityGrant(recordType: "Party", role: "_world", permissions: .read))
            try await accounts.setGrant(container: "c", environment: .development, SecurityGrant(recordType: "Party", role: "Admin", permissions: [.read]))
            let assigned = [
                try await accounts.assignRole(container: "c", environment: .development, userID: ann.id, role: "Admin", assigned: true),
                try await accounts.assignRole(container: "c", environment: .development, userID: ann.id, role: "Admin", assigned: true),
            ]
            expectEqual(assigned, [true, false])
            let state = try await accounts.securityState()
            let development = state["c", .development]
            expectEqual(development.roles, ["Admin"])
            expectEqual(development.grants, ["Party": ["Admin": [.read], "_world": .read]])
            expectEqual(development.assignments, [ann.id: ["Admin"]])
            #expect(state["c", .production].roles == ["Admin"] && state["c", .production].grants.isEmpty)
            expectEqual(state["other", .development], SecurityScope())
            let removed = [
                try await accounts.assignRole(container: "c", environment: .development, userID: ann.id, role: "Admin", assigned: false),
                try await accounts.assignRole(container: "c", environment: .development, userID: ann.id, role: "Admin", assigned: false),
            ]
            expectEqual(removed, [true, false])
            #expect(try await accounts.securityState()["c", .development].assignments.isEmpty)
        }
    }

    @Test(arguments: storeDrivers)
    func pushRegistrationsAndCredentialsRoundTrip(driver: StoreDriver) async throws {
        try await driver.run { accounts, push in
            let alice = NotificationOwner(container: "c", environment: .development, userID: 1)
            let bob = NotificationOwner(container: "c", environment: .development, userID: 2)
            let phone = PushTokenRow(owner: alice, token: "aa", apnsEnvironment: "development", isWebCourier: false, deviceID: "p", createdAt: 1)
            let browser = PushTokenRow(owner: alice, token: "bb", apnsEnvironment: "production", isWebCourier: true, deviceID: "b", createdAt: 2)
            try await push.putPushToken(phone)
            try await push.putPushToken(browser)
            expectEqual(Set(try await push.pushTokens(owner: alice)), [phone, browser])
            #expect(try await push.pushTokens(owner: bob).isEmpty)
            // The same token registered again (by another user's device) replaces the registration.
            var moved = phone
            moved.owner = bob
            try await push.putPushToken(moved)
            try await expectEqual(push.pushToken("aa"), moved)
            try await expectEqual(push.pushTokens(owner: alice), [browser])
            try await push.deletePushToken("bb")
            #expect(try await push.pushToken("bb") == nil)

            #expect(try await push.apnsCredentials(container: "c") == nil)
            #expect(try await accounts.createContainer(ContainerRow(id: "c", createdAt: 1)))
            let credentials = APNsCredentialsRow(container: "c", teamID: "T", keyID: "K", topic: "com.example", privateKeyPEM: "pem", updatedAt: 3)
            try await push.putAPNsCredentials(credentials)
            try await expectEqual(push.apnsCredentials(container: "c"), credentials)
            #expect(try await push.deleteAPNsCredentials(container: "c"))
            #expect(try await !push.deleteAPNsCredentials(container: "c"))
        }
    }

    @Test(arguments: drivers)
    func schemaRowsRoundTrip(driver: Driver) async throws {
        try await withDriver(driver) { storage in
            try await storage.write { tx in
                try tx.addSchemaRecordType(container: "c", environment: .development, "T")
                try tx.addSchemaField(container: "c", environment: .development, SchemaFieldRow(recordType: "T", fieldName: "f", fieldType: "INT64"))
                try tx.addSchemaField(container: "c", environment: .development, SchemaFieldRow(recordType: "T", fieldName: "f", fieldType: "INT64"))
            }
            let (fields, productionTypes) = try await storage.read { tx in
                (try tx.schemaFields(container: "c", environment: .development), try tx.schemaRecordTypes(container: "c", environment: .production))
            }
            expectEqual(fields.count, 1)
            #expect(productionTypes.isEmpty)
        }
    }

    /// An equality filter plus a sort served from sorted pair entries pages exactly like the
    /// same query served from per-field entries: same records, same order, same cursors,
    /// numbers and texts, both directions, after updates and deletions.
    @Test(arguments: drivers)
    func sortedPairsPageLikePerFieldEntries(driver: Driver) async throws {
        try await withDriver(driver) { storage in
            let database = try await storage.write { try $0.ensureDatabase(Self.key) }
            let zone = try #require(try await storage.read { try $0.zone(databaseID: database.id, name: "_defaultZone") })
            let byCount = SortedPair(field: "category", sortField: "count")
            let byTitle = SortedPair(field: "category", sortField: "title")
            // Production grants that pair the queryable category with each sortable field.
            let grants = IndexGrants.of(
                .production,
                grants: [
                    "category": SchemaFieldRow.Indexes.queryable, "count": SchemaFieldRow.Indexes.sortable,
                    "title": SchemaFieldRow.Indexes.sortable,
                ])
            expectEqual(Set(grants.sortedPairs), [byCount, byTitle])
            func save(_ name: String, sequence: Int64, category: String, count: Int?, title: String, deleted: Bool = false) async throws {
                try await storage.write { tx in
                    let row = Self.row(zone.id, name, sequence: sequence, deleted: deleted)
                    let id = try tx.putRecord(row)
                    var fields: [(name: String, value: FieldValue)] = [("category", .string(category)), ("title", .string(title))]
                    // A record lacking the sort field is not listed, by either plan.
                    if let count { fields.append(("count", .int64(Int64(count)))) }
                    let record = IndexedRecord(row: row, fields: fields, grants: grants)
                    try tx.indexRecord(recordID: id, zoneID: zone.id, recordType: "T", deleted ? nil : record, hadEntries: true)
                }
            }
            // 60 records over 3 categories; counts repeat (ties break by record id) and titles too.
            for number in 0..<60 {
                try await save(
                    "r\(number)", sequence: Int64(number + 1), category: "c\(number % 3)", count: number % 7 == 0 ? nil : number % 5,
                    title: "t\(number % 4)")
            }
            try await save("r4", sequence: 100, category: "c1", count: 9, title: "t9")  // new count and title, same category
            try await save("r5", sequence: 101, category: "c0", count: 1, title: "t0")  // moves from c2 to c0
            try await save("r6", sequence: 102, category: "c0", count: 1, title: "t0", deleted: true)

            func page(_ sort: IndexSort, pairs: Set<SortedPair>, category: String) async throws -> [String] {
                var names: [String] = []
                var after: QueryPosition?
                repeat {
                    var query = RecordQuery(
                        databaseID: zone.databaseID, zoneIDs: [zone.id], recordType: "T", conditions: [.compare(field: "category", scope: .scalar, .equal, .text(category))],
                        sorts: [sort], after: after, limit: 4)
                    query.sortedPairs = pairs
                    let result = try await storage.read { [query] in try $0.queryRecords(query) }
                    names += result.rows.map(\.recordName)
                    after = result.rows.count == 4 ? result.positions.last : nil
                } while after != nil
                return names
            }
            for category in ["c0", "c1", "c2"] {
                for sort in [
                    IndexSort(.number(field: "count"), ascending: false), IndexSort(.number(field: "count"), ascending: true),
                    IndexSort(.text(field: "title"), ascending: true), IndexSort(.text(field: "title"), ascending: false),
                ] {
                    let perField = try await page(sort, pairs: [], category: category)
                    let paired = try await page(sort, pairs: [byCount, byTitle], category: category)
                    expectEqual(paired, perField, "\(category) \(sort)")
                    expectEqual(Set(perField).count, perField.count)
                    #expect(perField.count > 10)
                }
            }
            #expect(try await page(IndexSort(.number(field: "count"), ascending: false), pairs: [byCount], category: "c0").contains("r5"))
            #expect(try await !page(IndexSort(.number(field: "count"), ascending: false), pairs: [byCount], category: "c2").contains("r5"))
            #expect(try await !page(IndexSort(.number(field: "count"), ascending: false), pairs: [byCount], category: "c0").contains("r6"))

            // The pair plan reads pair entries only: a record saved without them is not found
            // through it (so the comparison above really compared two plans).
            try await storage.write { tx in
                // Development grants every field and pairs none.
                let row = Self.row(zone.id, "unpaired", sequence: 200)
                let id = try tx.putRecord(row)
                let record = IndexedRecord(row: row, fields: [("category", .string("c9")), ("count", .int64(1))], grants: .everything)
                try tx.indexRecord(recordID: id, zoneID: zone.id, recordType: "T", record, hadEntries: false)
            }
            try await expectEqual(page(IndexSort(.number(field: "count"), ascending: true), pairs: [], category: "c9"), ["unpaired"])
            try await expectEqual(page(IndexSort(.number(field: "count"), ascending: true), pairs: [byCount], category: "c9"), [])
        }
    }

    /// A driver may hold a write's index entries back and write them together (SQLite does,
    /// for a batch's): a query in the same write still sees them (where the write's closure
    /// runs in the engine's transaction), a record indexed again keeps
    /// only its new entries, a savepoint rolled back takes its records' entries with it, and a
    /// write indexing more records than the driver holds back loses none.
    @Test(arguments: drivers)
    func indexEntriesHeldBackAreSeenReplacedAndRolledBack(driver: Driver) async throws {
        struct Undo: Error {}
        try await withDriver(driver) { storage in
            let database = try await storage.write { try $0.ensureDatabase(Self.key) }
            let zone = try #require(try await storage.read { try $0.zone(databaseID: database.id, name: "_defaultZone") })
            let zoneID = zone.id
            @Sendable func tagged(_ tag: String) -> RecordQuery {
                var query = RecordQuery(
                    databaseID: database.id, zoneIDs: [zoneID], recordType: "T", conditions: [.compare(field: "tag", scope: .scalar, .equal, .text(tag))], sorts: [],
                    after: nil, limit: 1_000)
                query.budget = .seconds(30)  // not what this test measures (a fresh PostgreSQL table has no statistics)
                return query
            }
            @Sendable func index(_ tx: UnitOfWork, _ name: String, tag: String, sequence: Int64, again: Bool = false) throws {
                let row = Self.row(zoneID, name, sequence: sequence)
                let id = try tx.putRecord(row)
                let record = IndexedRecord(row: row, fields: [("tag", .string(tag))], grants: .everything)
                try tx.indexRecord(recordID: id, zoneID: zoneID, recordType: "T", record, hadEntries: again)
            }
            let seenInTheWrite = try await storage.write { tx -> (x: Set<String>, y: Set<String>) in
                try index(tx, "a", tag: "x", sequence: 1)
                try index(tx, "b", tag: "x", sequence: 2)
                try index(tx, "b", tag: "y", sequence: 3, again: true)
                _ = try? tx.savepoint { () throws -> Void in
                    try index(tx, "c", tag: "x", sequence: 4)
                    throw Undo()
                }
                try index(tx, "d", tag: "y", sequence: 5)
                return (Set(try tx.queryRecords(tagged("x")).rows.map(\.recordName)), Set(try tx.queryRecords(tagged("y")).rows.map(\.recordName)))
            }
            // A unit of work's query reads what is committed, not what the unit wrote (on every
            // driver: SQLite applies a unit's writes after its decision, in the same transaction).
            #expect(seenInTheWrite.x.isEmpty && seenInTheWrite.y.isEmpty)
            expectEqual(Set(try await storage.read { try $0.queryRecords(tagged("x")) }.rows.map(\.recordName)), ["a"])
            expectEqual(Set(try await storage.read { try $0.queryRecords(tagged("y")) }.rows.map(\.recordName)), ["b", "d"])
            // Seven entry rows a record (five system fields, the tag, its token): past SQLite's
            // bound of rows held back (4,096).
            try await storage.write { tx in
                for number in 0..<700 { try index(tx, "m\(number)", tag: "many", sequence: Int64(10 + number)) }
            }
            try await expectEqual(storage.read { try $0.queryRecords(tagged("many")) }.rows.count, 700)
            // Indexed again in one write, more records than SQLite deletes entries of at once
            // (500): every old entry goes, every new one is found.
            try await storage.write { tx in
                for number in 0..<600 { try index(tx, "m\(number)", tag: "again", sequence: Int64(1_000 + number), again: true) }
            }
            try await expectEqual(storage.read { try $0.queryRecords(tagged("many")) }.rows.count, 100)
            try await expectEqual(storage.read { try $0.queryRecords(tagged("again")) }.rows.count, 600)
        }
    }

    /// A savepoint that fails takes back its records and references, nested or not, and what
    /// an inner savepoint kept goes when the outer one fails; the write sees that at once, and
    /// commits only what stayed. (A unit of work keeps records and references apart from the
    /// overlay it copies per savepoint, undoing them from a journal.)
    @Test(arguments: drivers)
    func savepointsTakeBackTheirRecordsAndReferencesNestedOrNot(driver: Driver) async throws {
        struct Undo: Error {}
        try await withDriver(driver) { storage in
            let database = try await storage.write { try $0.ensureDatabase(Self.key) }
            let zone = try #require(try await storage.read { try $0.zone(databaseID: database.id, name: "_defaultZone") })
            let zoneID = zone.id
            @Sendable func pointing(_ tx: UnitOfWork, from source: String, to target: String) throws {
                try tx.replaceReferences(
                    sourceZoneID: zoneID, sourceName: source,
                    with: [ReferenceRow(sourceZoneID: zoneID, sourceName: source, fieldName: "f", targetZoneID: zoneID, targetName: target, action: "NONE")])
            }
            @Sendable func referrers(_ tx: ReadUnit, _ target: String) throws -> [String] {
                try tx.referrers(targetZoneID: zoneID, targetName: target, action: "NONE").map(\.sourceName)
            }
            @Sendable func names(_ tx: ReadUnit) throws -> [String] {
                try ["a", "b", "c", "d"].filter { try tx.record(zoneID: zoneID, name: $0) != nil }
            }
            let seen = try await storage.write { tx -> (inner: [String], innerTargets: [String], after: [String], targets: [String]) in
                try tx.putRecord(Self.row(zoneID, "a", sequence: 1))
                try pointing(tx, from: "a", to: "x")
                var inner: ([String], [String]) = ([], [])
                _ = try? tx.savepoint { () throws -> Void in
                    try tx.putRecord(Self.row(zoneID, "b", sequence: 2))
                    try pointing(tx, from: "a", to: "y")
                    _ = try? tx.savepoint { () throws -> Void in
                        try tx.putRecord(Self.row(zoneID, "c", sequence: 3))
                        try pointing(tx, from: "a", to: "z")
                        throw Undo()
                    }
                    inner = (try names(tx), try referrers(tx, "y"))
                    throw Undo()
                }
                _ = try tx.savepoint { try tx.putRecord(Self.row(zoneID, "d", sequence: 4)) }
                return (inner.0, inner.1, try names(tx), try referrers(tx, "x"))
            }
            #expect(seen.inner == ["a", "b"] && seen.innerTargets == ["a"], "inside the outer savepoint, after the inner one failed")
            #expect(seen.after == ["a", "d"] && seen.targets == ["a"], "after the outer one failed")
            let committed = try await storage.read { tx in (try names(tx), try referrers(tx, "x"), try referrers(tx, "y") + referrers(tx, "z")) }
            #expect(committed.0 == ["a", "d"] && committed.1 == ["a"] && committed.2.isEmpty)
        }
    }

    /// Prepared query statements are kept per shape up to a bound; past it the cache starts
    /// over, and every query still answers from its own statement.
    @Test(arguments: drivers)
    func queriesStayRightPastTheStatementCacheBound(driver: Driver) async throws {
        try await withDriver(driver) { storage in
            let database = try await storage.write { try $0.ensureDatabase(Self.key) }
            let zone = try #require(try await storage.read { try $0.zone(databaseID: database.id, name: "_defaultZone") })
            try await storage.write { tx in
                for number in 0..<3 {
                    let row = Self.row(zone.id, "r\(number)", sequence: Int64(number + 1))
                    let id = try tx.putRecord(row)
                    let record = IndexedRecord(row: row, fields: [("n", .double(Double(number)))], grants: .everything)
                    try tx.indexRecord(recordID: id, zoneID: zone.id, recordType: "T", record, hadEntries: false)
                }
            }
            // A list of k values is its own SQL text: more shapes than the cache keeps.
            for size in 1...(QueryStatementCache.maximumShapes + 20) {
                let values = (0..<size).map { index -> IndexValue in .number(index % 2 == 0 ? 1 : Double(100 + index)) }
                let query = RecordQuery(
                    databaseID: zone.databaseID, zoneIDs: [zone.id], recordType: "T", conditions: [.oneOf(field: "n", scope: .scalar, values)], sorts: [],
                    after: nil, limit: 10)
                let names = try await storage.read { try $0.queryRecords(query) }.rows.map(\.recordName)
                expectEqual(names, ["r1"], "\(size) values")
            }
        }
    }

    /// The outbox commits with the writer's transaction or not at all, hands entries out in
    /// commit order, and forgets removed ones; it survives closing and reopening.
    @Test(arguments: drivers)
    func outboxEntriesCommitWithTheirTransactionInOrder(driver: Driver) async throws {
        try await driver.place { place in
        var storage = try await driver.make(place)
        let database = try await storage.write { try $0.ensureDatabase(Self.key) }
        struct Undo: Error {}
        _ = try? await storage.write { tx -> Void in
            try tx.appendOutbox(databaseID: database.id, body: Array("undone".utf8), createdAt: 1)
            throw Undo()
        }
        for index in 0..<5 {
            try await storage.write { try $0.appendOutbox(databaseID: database.id, body: Array("change \(index)".utf8), createdAt: 2) }
        }
        let all = try await storage.read { try $0.outbox(limit: 10) }
        #expect(all.map { String(decoding: $0.body, as: UTF8.self) } == (0..<5).map { "change \($0)" })
        expectEqual(all.map(\.sequence), all.map(\.sequence).sorted())
        try await expectEqual(storage.read { try $0.outbox(limit: 2) }.count, 2)
        try await storage.write { try $0.removeOutbox(sequences: Array(all.prefix(3).map(\.sequence))) }
        try await storage.close()
        storage = try await driver.make(place)
        let left = try await storage.read { try $0.outbox(limit: 10) }
        expectEqual(left.map { String(decoding: $0.body, as: UTF8.self) }, ["change 3", "change 4"])
        try await storage.close()
        }
    }

    /// What lets several nodes share notifications: a subscriptions version that every save and
    /// delete changes, and every owner's notifications in sequence order, with how to push them.
    @Test(arguments: drivers)
    func subscriptionsVersionAndTheWholeCollectionServeEveryNode(driver: Driver) async throws {
        try await withDriver(driver) { storage in
            let database = try await storage.write { try $0.ensureDatabase(Self.key) }
            let start = try await storage.read { try $0.subscriptionsVersion() }
            let row = SubscriptionRow(
                databaseID: database.id, database: Self.key, userID: 7, subscriptionID: "s", definition: Array("{}".utf8), createdAt: 1)
            try await storage.write { try $0.putSubscription(row) }
            let saved = try await storage.read { try $0.subscriptionsVersion() }
            #expect(saved != start)
            #expect(try await !storage.write { try $0.deleteSubscription(databaseID: database.id, userID: 7, subscriptionID: "none") })
            try await expectEqual(storage.read { try $0.subscriptionsVersion() }, saved, "deleting nothing changes nothing")
            #expect(try await storage.write { try $0.deleteSubscription(databaseID: database.id, userID: 7, subscriptionID: "s") })
            let deleted = try await storage.read { try $0.subscriptionsVersion() }
            #expect(deleted != saved)
            // The changes since the start: the save, then the delete, each with its version.
            let changes = try #require(try await storage.read { try $0.subscriptionChanges(after: start, limit: 10) })
            expectEqual(changes.map(\.version), [saved, deleted])
            #expect(changes.allSatisfy { $0.databaseID == database.id && $0.userID == 7 && $0.subscriptionID == "s" })
            try await expectEqual(storage.read { try $0.subscriptionChanges(after: deleted, limit: 10) }, [])
            try await expectEqual(storage.read { try $0.subscriptionChanges(after: start, limit: 1) }?.count, 1)

            try await expectEqual(storage.read { try $0.newestNotificationSequence() }, 0)
            let owners = [NotificationOwner(container: "c", environment: .development, userID: 7),
                          NotificationOwner(container: "c", environment: .production, userID: 8)]
            for index in 0..<4 {
                _ = try await storage.write {
                    try $0.insertNotification(
                        owner: owners[index % 2], notificationID: "n\(index)", originDeviceID: "d", payload: Array("{}".utf8), createdAt: 1,
                        delivery: NotificationDelivery(collapseID: index == 1 ? "group" : nil, isSilent: index == 2))
                }
            }
            let all = try await storage.read { try $0.notifications(after: 0, limit: 10) }
            expectEqual(all.map(\.notificationID), ["n0", "n1", "n2", "n3"])
            expectEqual(all.map(\.owner), [owners[0], owners[1], owners[0], owners[1]])
            #expect(all.map(\.delivery) == [
                NotificationDelivery(), NotificationDelivery(collapseID: "group"), NotificationDelivery(isSilent: true), NotificationDelivery(),
            ])
            try await expectEqual(storage.read { try $0.newestNotificationSequence() }, all.last?.sequence)
            try await expectEqual(storage.read { try $0.notifications(after: all[1].sequence, limit: 1) }.map(\.notificationID), ["n2"])
        }
    }

    /// The change log keeps the newest changes only; a node further behind is told to rebuild.
    @Test(arguments: drivers)
    func subscriptionChangesTooOldAreGone(driver: Driver) async throws {
        try await withDriver(driver) { storage in
            let database = try await storage.write { try $0.ensureDatabase(Self.key) }
            let start = try await storage.read { try $0.subscriptionsVersion() }
            func save(_ count: Int) async throws {
                try await storage.write { tx in
                    for index in 0..<count {
                        try tx.putSubscription(
                            SubscriptionRow(
                                databaseID: database.id, database: Self.key, userID: 7, subscriptionID: "s\(index % 3)",
                                definition: Array("{}".utf8), createdAt: 1))
                    }
                }
            }
            // At the limit: exactly the 10,000 changes kept since `start` still reach back to it.
            try await save(10_000)
            try await expectEqual(storage.read { try $0.subscriptionChanges(after: start, limit: 10) }?.count, 10)
            // One past it: the oldest of them is gone.
            try await save(1)
            #expect(try await storage.read { try $0.subscriptionChanges(after: start, limit: 10) } == nil)
            let now = try await storage.read { try $0.subscriptionsVersion() }
            try await expectEqual(storage.read { try $0.subscriptionChanges(after: now - 5, limit: 10) }?.count, 5)
        }
    }
}
