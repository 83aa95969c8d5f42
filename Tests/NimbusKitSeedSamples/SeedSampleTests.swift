import Foundation
import NimbusKit
import NimbusTestSupport
import Testing

/// Runs the seeds' samples (in `Samples/`, which import only NimbusKit) against a live server
/// and checks they do what the sessions say. Serialized: the samples use
/// `CKContainer.default()`, which these tests point at each test's server.
@Suite("Seed samples", .serialized)
struct SeedSampleTests {
    /// A fresh server whose default container is signed in as "appleseed".
    private func withDefaultContainer(_ body: (TestServer) async throws -> Void) async throws {
        try await TestServer.with { server in
            _ = try await server.service.createUser(name: "appleseed", password: "apple orchard")
            CKContainer.defaultConfiguration = NimbusConfiguration(
                serverURL: URL(string: server.baseURL)!, apiToken: server.developmentToken,
                containerIdentifier: TestServer.container, username: "appleseed", password: "apple orchard")
            defer { CKContainer.defaultConfiguration = nil }
            try await body(server)
        }
    }

    /// Whether `task` ends within `limit`. Not a task group: a group waits for all its children,
    /// and a child awaiting another task's value cannot be cancelled, so a task that never ended
    /// (a notification sent before the subscription existed) hung the whole test run.
    private func finishes(_ task: Task<Void, any Error>, within limit: Duration) async -> Bool {
        final class FirstAnswer: @unchecked Sendable {
            private let lock = NSLock()
            private var continuation: CheckedContinuation<Bool, Never>?
            init(_ continuation: CheckedContinuation<Bool, Never>) { self.continuation = continuation }
            func give(_ answer: Bool) {
                lock.withLock {
                    continuation?.resume(returning: answer)
                    continuation = nil
                }
            }
        }
        return await withCheckedContinuation { continuation in
            let answer = FirstAnswer(continuation)
            Task { _ = try? await task.value; answer.give(true) }
            Task { try? await Task.sleep(for: limit); answer.give(false) }
        }
    }

    private func callback<Value: Sendable>(_ start: (@escaping @Sendable (Value) -> Void) -> Void) async -> Value {
        await withCheckedContinuation { continuation in start { continuation.resume(returning: $0) } }
    }

    // MARK: Introducing CloudKit (2014)

    @Test("2014 intro: records, IDs, references, assets, save / fetch / modify, queries, user ID")
    func introducingCloudKit() async throws {
        try await withDefaultContainer { _ in
            let (publicDatabase, privateDatabase) = IntroducingCloudKit2014.databases()
            #expect(publicDatabase.databaseScope == .public && privateDatabase.databaseScope == .private)

            let (party, summary, start) = IntroducingCloudKit2014.partyValues()
            #expect(summary == "Post Presentation Beers")
            #expect(start != nil)
            #expect(party.allKeys() == ["summary", "start"])

            let wellKnown = IntroducingCloudKit2014.wellKnownParty()
            #expect(wellKnown.recordID.recordName == "WellKnownParty")
            let (clown, otherClown) = IntroducingCloudKit2014.clowns(party: party)
            #expect((clown["party"] as? CKRecord.Reference)?.recordID == party.recordID)
            #expect((otherClown["party"] as? CKRecord.Reference)?.recordID.recordName == "WellKnownParty")

            let screenplayURL = URL(fileURLWithPath: NSTemporaryDirectory() + "screenplay-\(UUID().uuidString).txt")
            try Data("INT. PARTY - NIGHT".utf8).write(to: screenplayURL)
            defer { try? FileManager.default.removeItem(at: screenplayURL) }
            IntroducingCloudKit2014.attachScreenplay(to: party, screenplayURL: screenplayURL)
            #expect((party["screenplay"] as? CKAsset)?.fileURL == screenplayURL)
            _ = try await publicDatabase.modifyRecords(saving: [party, clown, otherClown], deleting: [])
            let storedClown = try await publicDatabase.record(for: clown.recordID)
            #expect((storedClown["party"] as? CKRecord.Reference)?.recordID == party.recordID)

            let (saved, saveError) = await callback { done in IntroducingCloudKit2014.saveParty { done(($0, $1)) } }
            #expect(saveError == nil)
            let originalEnd = try #require(saved?["end"] as? Date)
            let (fetched, _) = await callback { done in IntroducingCloudKit2014.fetchParty { done(($0, $1)) } }
            #expect(fetched?.recordChangeTag == saved?.recordChangeTag)
            let (extended, extendError) = await callback { done in IntroducingCloudKit2014.extendParty { done(($0, $1)) } }
            #expect(extendError == nil)
            let newEnd = try #require(extended?["end"] as? Date)
            #expect(abs(newEnd.timeIntervalSince(originalEnd) - 1800) < 0.01)

            // Upcoming parties: one starts in an hour, one started yesterday.
            let soon = CKRecord(recordType: "Party")
            soon["name"] = "Soon"
            soon["start"] = Date(timeIntervalSinceNow: 3600)
            soon["Location"] = CLLocation(latitude: 37.7831, longitude: -122.4041)
            soon["summary"] = "drinks after session"
            let past = CKRecord(recordType: "Party")
            past["name"] = "Past"
            past["start"] = Date(timeIntervalSinceNow: -86400)
            _ = try await publicDatabase.modifyRecords(saving: [soon, past], deleting: [])
            let (results, queryError) = await callback { done in IntroducingCloudKit2014.upcomingParties { done(($0, $1)) } }
            #expect(queryError == nil)
            #expect(results?.compactMap { $0["name"] as? String }.contains("Soon") == true)
            #expect(results?.compactMap { $0["name"] as? String }.contains("Past") == false)

            for predicate in IntroducingCloudKit2014.predicates(partyName: "Soon", dynamicKey: "name", value: "Soon") {
                let (matches, _) = try await publicDatabase.records(matching: CKQuery(recordType: "Party", predicate: predicate))
                #expect(matches.map(\.0).contains(soon.recordID), "\(predicate)")
            }

            let (userID, userError) = await callback { done in IntroducingCloudKit2014.userID { done(($0, $1)) } }
            #expect(userError == nil)
            #expect(userID?.recordName.hasPrefix("_") == true)
        }
    }

    // MARK: Advanced CloudKit (2014)

    @Test("2014 advanced: fetch operation blocks, shoebox receipts with cascading delete, atomic partial failure, merge")
    func advancedCloudKit() async throws {
        try await withDefaultContainer { _ in
            let database = CKContainer.default().privateCloudDatabase
            let zone = try await database.save(CKRecordZone(zoneName: "Receipts"))
            let (shoebox, receipts) = AdvancedCloudKit2014.fileReceipts(in: zone.zoneID, count: 5)
            _ = try await database.modifyRecords(saving: [shoebox] + receipts, deleting: [])

            let log = LockedList<String>()
            let (fetched, fetchError) = await callback { done in
                AdvancedCloudKit2014.fetchRecords(
                    receipts.map(\.recordID) + [CKRecord.ID(recordName: "Missing", zoneID: zone.zoneID)], desiredKeys: ["amount"],
                    in: database, log: { log.append($0) }
                ) { done(($0, $1)) }
            }
            #expect(fetched?.count == 5)
            #expect(fetched?.values.allSatisfy { $0.allKeys() == ["amount"] } == true)
            #expect((fetchError as? CKError)?.code == .partialFailure)
            #expect(log.items.filter { $0.hasPrefix("progress") }.count == 6)

            let (matches, _) = try await database.records(
                matching: AdvancedCloudKit2014.receiptsQuery(shoebox: shoebox), inZoneWith: zone.zoneID)
            #expect(matches.count == 5)

            // Deleting the shoebox deletes every receipt in it.
            try await database.deleteRecord(withID: shoebox.recordID)
            let after = try await database.records(for: receipts.map(\.recordID))
            #expect(after.values.allSatisfy { if case .failure = $0 { true } else { false } })

            // Atomic: one receipt that already exists fails the batch; the rest are batchRequestFailed.
            let keep = CKRecord(recordType: "Receipt", recordID: CKRecord.ID(recordName: "Kept", zoneID: zone.zoneID))
            _ = try await database.save(keep)
            let again = CKRecord(recordType: "Receipt", recordID: keep.recordID)
            let fresh = CKRecord(recordType: "Receipt", recordID: CKRecord.ID(recordName: "Fresh", zoneID: zone.zoneID))
            let (codes, atomicError) = await callback { done in
                AdvancedCloudKit2014.saveAtomically([fresh, again], in: database) { done(($0, $1)) }
            }
            #expect((atomicError as? CKError)?.code == .partialFailure)
            #expect(codes?[keep.recordID] == .serverRecordChanged)
            #expect(codes?[fresh.recordID] == .batchRequestFailed)

            // Locked updates: the second device's change lands after a merge.
            let first = try await database.record(for: keep.recordID)
            let second = try await database.record(for: keep.recordID)
            first["hobby"] = "Horticulture"
            _ = try await database.save(first)
            second["vendor"] = "Orchard Supply"
            let merged = try await AdvancedCloudKit2014.saveResolvingConflicts(second, in: database)
            #expect(merged["hobby"] as? String == "Horticulture")
            #expect(merged["vendor"] as? String == "Orchard Supply")
        }
    }

    // MARK: Tips and tricks (2015)

    @Test("2015 tips: typed subscripts, account status, errors' userInfo, paged thumbnails, system-field cache, dependencies")
    func tipsAndTricks() async throws {
        try await withDefaultContainer { server in
            let database = CKContainer.default().publicCloudDatabase
            let party = CKRecord(recordType: "Party")
            let (clowns, date) = TipsAndTricks2015.clownCount(party)
            #expect(clowns == 5 && date != nil)
            _ = try await database.save(party)

            let (status, statusError) = await callback { done in TipsAndTricks2015.checkAccount { done(($0, $1)) } }
            #expect(status == .available && statusError == nil)

            let busy = CKError(.serviceUnavailable, userInfo: [CKErrorRetryAfterKey: 5.0])
            #expect(TipsAndTricks2015.retryDate(for: busy).map { $0.timeIntervalSinceNow > 4 } == true)
            let stale = try await database.record(for: party.recordID)
            let current = try await database.record(for: party.recordID)
            current["numberOfClowns"] = 6
            _ = try await database.save(current)
            stale["numberOfClowns"] = 7
            do {
                _ = try await database.save(stale)
                Issue.record("a stale save should conflict")
            } catch {
                #expect(TipsAndTricks2015.serverCopy(from: error)?["numberOfClowns"] as? Int == 6)
            }

            let photos = (0..<25).map { index -> CKRecord in
                let photo = CKRecord(recordType: "Photo")
                photo["party"] = CKRecord.Reference(record: party, action: .none)
                photo["photoThumbnail"] = Data([UInt8(index)])
                photo["fullSize"] = Data(repeating: UInt8(index), count: 1000)
                return photo
            }
            _ = try await database.modifyRecords(saving: photos, deleting: [])
            let (firstPage, cursor, pageError) = await callback { done in
                TipsAndTricks2015.thumbnails(of: party, in: database, cursor: nil) { done(($0, $1, $2)) }
            }
            #expect(pageError == nil)
            #expect(firstPage.count == 20)
            #expect(firstPage.allSatisfy { $0.allKeys() == ["photoThumbnail"] })
            let (secondPage, end, _) = await callback { done in
                TipsAndTricks2015.thumbnails(of: party, in: database, cursor: cursor) { done(($0, $1, $2)) }
            }
            #expect(secondPage.count == 5 && end == nil)

            let notes = try await CKContainer.default().privateCloudDatabase.save(TipsAndTricks2015.notesZone())
            let note = CKRecord(recordType: "Party", recordID: CKRecord.ID(recordName: "FDFE37608477", zoneID: notes.zoneID))
            note["PartyName"] = "My Party"
            let savedNote = try await CKContainer.default().privateCloudDatabase.save(note)
            let archived = TipsAndTricks2015.archiveSystemFields(of: savedNote)
            let restored = try #require(try TipsAndTricks2015.unarchiveSystemFields(archived))
            restored["PartyName"] = "WWDC Bash"
            let resaved = try await CKContainer.default().privateCloudDatabase.save(restored)
            #expect(resaved["PartyName"] as? String == "WWDC Bash")

            let order = LockedList<String>()
            let queue = TipsAndTricks2015.fetchInOrder(
                first: party.recordID, second: photos[0].recordID, database: database, log: { order.append($0) })
            await withCheckedContinuation { continuation in
                DispatchQueue.global().async {
                    queue.waitUntilAllOperationsAreFinished()
                    continuation.resume()
                }
            }
            #expect(order.items == ["first", "second"])
            _ = server
        }
    }

    // MARK: Best practices (2016)

    @Test("2016: photos point back at their album (and have it as parent); the fetch-changes flow syncs a second device")
    func bestPractices() async throws {
        try await withDefaultContainer { server in
            let database = CKContainer.default().privateCloudDatabase
            let zone = try await database.save(CKRecordZone(zoneName: "Photos"))
            let album = CKRecord(recordType: "Album", recordID: CKRecord.ID(recordName: "Summer", zoneID: zone.zoneID))
            _ = try await database.save(album)
            let albumTag = try await database.record(for: album.recordID).recordChangeTag

            // Two devices add photos to the same album at once: no conflict, the album is untouched.
            let other = CKContainer(configuration: CKContainer.defaultConfiguration!).privateCloudDatabase
            async let phone = database.save(BestPractices2016.addPhoto(named: "beach", to: album))
            async let mac = other.save(BestPractices2016.addPhoto(named: "sunset", to: album))
            let (beach, sunset) = try await (phone, mac)
            #expect(beach.parent?.recordID == album.recordID && sunset.parent?.recordID == album.recordID)
            #expect(try await database.record(for: album.recordID).recordChangeTag == albumTag)
            let (photos, _) = try await database.records(matching: BestPractices2016.photosQuery(in: album), inZoneWith: zone.zoneID)
            #expect(Set(photos.map(\.0.recordName)) == ["beach", "sunset"])

            // A third device syncs everything from nothing, then only what changed.
            let cache = BestPractices2016.LocalCache()
            let device3 = CKContainer(configuration: CKContainer.defaultConfiguration!).privateCloudDatabase
            let firstSync = await callback { done in BestPractices2016.fetchChanges(in: device3, cache: cache) { done($0) } }
            #expect(firstSync == nil)
            #expect(Set(cache.records.keys.map(\.recordName)) == ["Summer", "beach", "sunset"])
            #expect(cache.databaseToken != nil)

            try await database.deleteRecord(withID: beach.recordID)
            let scratch = try await database.save(CKRecordZone(zoneName: "Scratch"))
            _ = try await database.save(CKRecord(recordType: "Note", recordID: CKRecord.ID(recordName: "n", zoneID: scratch.zoneID)))
            let secondSync = await callback { done in BestPractices2016.fetchChanges(in: device3, cache: cache) { done($0) } }
            #expect(secondSync == nil)
            #expect(Set(cache.records.keys.map(\.recordName)) == ["Summer", "sunset", "n"])

            try await database.deleteRecordZone(withID: scratch.zoneID)
            let thirdSync = await callback { done in BestPractices2016.fetchChanges(in: device3, cache: cache) { done($0) } }
            #expect(thirdSync == nil)
            #expect(cache.deletedZones == [scratch.zoneID])
            #expect(Set(cache.records.keys.map(\.recordName)) == ["Summer", "sunset"])
            _ = server
        }
    }

    // MARK: Subscriptions (2014, 2016)

    /// A notification's payload as APNs would hand it to the app (`userInfo`).
    private func userInfo(of server: TestServer, user: String) async throws -> [[AnyHashable: Any]] {
        var client = server.client()
        client.webAuthToken = try await client.signIn(user, password: "apple orchard").json["ckWebAuthToken"]?.stringValue
        let answer = try await client.device("notifications/changes")
        return try (answer.json["notifications"]?.arrayValue ?? []).map { entry in
            let data = Data(try #require(entry["payload"]).serialized())
            return try #require(try JSONSerialization.jsonObject(with: data) as? [AnyHashable: Any])
        }
    }

    @Test("2014 and 2016: the party subscription and its push, the silent shared-database subscription, catching up")
    func subscriptions() async throws {
        try await withDefaultContainer { server in
            let container = CKContainer.default()
            let publicDatabase = container.publicCloudDatabase
            _ = try await publicDatabase.save(CKRecord(recordType: "Party"))  // the type exists before subscribing
            let saveError = await callback { done in
                Subscriptions2014.save(Subscriptions2014.partySubscription(), in: publicDatabase) { done($0.map { "\($0)" }) }
            }
            #expect(saveError == nil)
            let subscribeError = await callback { done in
                Subscriptions2016.subscribeToSharedChanges(container, cachedSubscribed: false) { done($0.map { "\($0)" }) }
            }
            #expect(subscribeError == nil)
            #expect(try await container.sharedCloudDatabase.allSubscriptions().map(\.subscriptionID) == ["shared-changes"])

            // Another user announces a party tonight: appleseed's device is pushed.
            _ = try await server.service.createUser(name: "host", password: "host password")
            var host = NimbusConfiguration(
                serverURL: URL(string: server.baseURL)!, apiToken: server.developmentToken, containerIdentifier: TestServer.container,
                username: "host", password: "host password")
            host.deviceID = "host-phone"
            let party = CKRecord(recordType: "Party", recordID: CKRecord.ID(recordName: "tonight"))
            party["start"] = Date(timeIntervalSinceNow: 3600)
            _ = try await CKContainer(configuration: host).publicCloudDatabase.save(party)

            var pushes: [[AnyHashable: Any]] = []
            for _ in 0..<200 where pushes.isEmpty {
                pushes = try await userInfo(of: server, user: "appleseed")
                if pushes.isEmpty { try await Task.sleep(for: .milliseconds(20)) }
            }
            let push = try #require(pushes.first)
            let handled = Subscriptions2014.handlePush(push)
            #expect(handled.alert == "LOCAL_NOTIFICATION_KEY")
            #expect(handled.recordID == party.recordID)
            #expect(Subscriptions2016.subscriptionID(of: push) != "shared-changes")

            let (ids, error) = await NotificationCollection2014.catchUp(container, since: nil)
            #expect(error == nil)
            #expect(ids.count == 1)
        }
    }

    // MARK: README

    @Test("the README's first save, query and sync run as written")
    func readme() async throws {
        try await withDefaultContainer { server in
            let (database, zone) = try await ReadmeSnippets.firstSave()
            #expect(try await database.record(for: CKRecord.ID(recordName: "wwdc", zoneID: zone.zoneID))["guests"] as? Int == 13)
            try await ReadmeSnippets.firstQuery(database, zone)
            let tokens = try await ReadmeSnippets.firstSync(database)
            #expect(tokens[zone.zoneID] != nil)

            // First subscription: it returns once another device's change is heard.
            let listening = Task { try await ReadmeSnippets.firstSubscription(database) }
            let other = NimbusConfiguration(
                serverURL: URL(string: server.baseURL)!, apiToken: server.developmentToken,
                containerIdentifier: TestServer.container, username: "appleseed", password: "apple orchard",
                deviceID: "another-device")
            let otherDatabase = CKContainer(configuration: other).privateCloudDatabase
            var attempt = 0
            while attempt < 100 {
                _ = try await otherDatabase.save(CKRecordZone(zoneName: "elsewhere\(attempt)"))
                attempt += 1
                if await finishes(listening, within: .milliseconds(200)) { break }
            }
            #expect(attempt < 100)
            listening.cancel()
        }
    }
}
