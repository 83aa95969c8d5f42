import Foundation
#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
@testable import NimbusKit
import NimbusTestSupport
import NimbusWire
import Testing

/// Discretionary retries and long-lived operations (issue 20): a lost answer is retried and
/// the server answers the retry from its first outcome; a long-lived modify survives its
/// container being torn down mid-flight and, resumed on a new one, delivers its callbacks with
/// nothing applied twice. The answers are lost by a relay in front of the server.
@Suite("NimbusKit long-lived operations and retries")
struct LongLivedKitTests {
    /// Alice's device; `journals` and `keys` are its folders (the same for a relaunch of it).
    static func device(_ server: TestServer, via relay: AnswerDroppingRelay?, journals: URL? = nil, keys: URL? = nil) -> CKContainer {
        var configuration = server.configuration(user: "alice")
        if let relay { configuration.serverURL = URL(string: "http://127.0.0.1:\(relay.port)")! }
        configuration.longLivedOperationDirectory = journals
        configuration.encryptionKeyDirectory =
            keys ?? journals?.appendingPathComponent("keys")
            ?? URL(fileURLWithPath: NSTemporaryDirectory() + "nimbus-keys-" + UUID().uuidString, isDirectory: true)
        return CKContainer(configuration: configuration)
    }

    static func note(_ name: String, zone: CKRecordZone.ID) -> CKRecord {
        let record = CKRecord(recordType: "Note", recordID: CKRecord.ID(recordName: name, zoneID: zone))
        record["title"] = name
        return record
    }

    /// Runs a modify and returns each record's result and the operation's. A lost answer
    /// costs the request timeout, so tests keep it short.
    static func modify(_ operation: CKModifyRecordsOperation, on database: CKDatabase) async
        -> (saves: [String: Result<CKRecord, any Error>], result: Result<Void, any Error>?)
    {
        operation.configuration.timeoutIntervalForRequest = 2
        let saves = Box<[String: Result<CKRecord, any Error>]>([:])
        let result = Box<Result<Void, any Error>?>(nil)
        operation.perRecordSaveBlock = { id, outcome in saves.update { $0[id.recordName] = outcome } }
        operation.modifyRecordsResultBlock = { outcome in result.update { $0 = outcome } }
        await runOperation(operation, on: database)
        return (saves.value, result.value)
    }

    @Test("a discretionary modify whose answer was lost retries, and the server answers from the first outcome")
    func lostAnswerIsRetriedOnce() async throws {
        try await TestServer.with { server in
            let raw = try await server.user("alice")
            let relay = try await AnswerDroppingRelay(targetPort: server.port)
            defer { Task { try? await relay.close() } }
            let device = Self.device(server, via: relay)
            let zone = try await device.privateCloudDatabase.save(CKRecordZone(zoneName: "Notes"))
            relay.dropAnswers(1)
            let operation = CKModifyRecordsOperation(recordsToSave: [Self.note("n1", zone: zone.zoneID)])
            expectEqual(operation.qualityOfService, .utility)
            let (saves, result) = await Self.modify(operation, on: device.privateCloudDatabase)
            expectEqual(relay.droppedAnswers, 1)
            guard case .success? = result, case .success? = saves["n1"] else {
                Issue.record("the retried save failed: \(String(describing: result)) \(saves)")
                return
            }
            // Applied once: the zone's feed holds one change of n1, not a create and a conflict.
            let changes = try await raw.zoneChanges("Notes")
            expectEqual(changes.zones.first?["records"]?.arrayValue?.count, 1, "\(changes.text)")
        }
    }

    @Test("user-initiated work fails fast on a lost answer; discretionary work stops at timeoutIntervalForResource")
    func failFastAndResourceDeadline() async throws {
        try await TestServer.with { server in
            try await server.createUser("alice")
            let relay = try await AnswerDroppingRelay(targetPort: server.port)
            defer { Task { try? await relay.close() } }
            let device = Self.device(server, via: relay)
            let zone = try await device.privateCloudDatabase.save(CKRecordZone(zoneName: "Notes"))
            relay.dropAnswers(Int.max)

            let urgent = CKModifyRecordsOperation(recordsToSave: [Self.note("u1", zone: zone.zoneID)])
            urgent.qualityOfService = .userInitiated
            let requestsBefore = relay.forwardedRequests
            let started = Date()
            let (_, urgentResult) = await Self.modify(urgent, on: device.privateCloudDatabase)
            guard case .failure(let error as CKError)? = urgentResult else {
                Issue.record("expected a failure, got \(String(describing: urgentResult))")
                return
            }
            expectEqual(error.code, .networkFailure, "\(error)")
            // One attempt, no retry: counted as requests sent, since under the whole suite's load
            // the device's deadline can pass before the server answers at all (nothing dropped).
            expectEqual(relay.forwardedRequests - requestsBefore, 1, "user-initiated work does not retry")
            #expect(relay.droppedAnswers <= 1)
            #expect(Date().timeIntervalSince(started) < 10)

            let patient = CKModifyRecordsOperation(recordsToSave: [Self.note("p1", zone: zone.zoneID)])
            patient.configuration.timeoutIntervalForResource = 5
            let before = relay.forwardedRequests
            let (_, patientResult) = await Self.modify(patient, on: device.privateCloudDatabase)
            guard case .failure(let late as CKError)? = patientResult else {
                Issue.record("expected a failure, got \(String(describing: patientResult))")
                return
            }
            expectEqual(late.code, .networkFailure, "\(late)")
            // Retried: sent again (under load the server may not have answered, nor an answer
            // been dropped, before the deadline).
            #expect(relay.forwardedRequests - before >= 2, "discretionary work retried before its deadline")
        }
    }

    @Test("a long-lived modify survives its container being torn down mid-flight and resumes on a new one, applied once")
    func longLivedModifyResumes() async throws {
        try await TestServer.with { server in
            let raw = try await server.user("alice")
            let journals = URL(fileURLWithPath: NSTemporaryDirectory() + "nimbus-journals-" + UUID().uuidString, isDirectory: true)
            defer { try? FileManager.default.removeItem(at: journals) }
            let relay = try await AnswerDroppingRelay(targetPort: server.port)
            defer { Task { try? await relay.close() } }
            let first = Self.device(server, via: relay, journals: journals)
            let zone = try await first.privateCloudDatabase.save(CKRecordZone(zoneName: "Notes"))

            // The device has the user's key for encrypted values (its first use asks the server
            // whether another device holds one already).
            let warmUp = CKRecord(recordType: "Note", recordID: CKRecord.ID(recordName: "warm-up"))
            warmUp.encryptedValues["secret"] = "first"
            _ = try await first.privateCloudDatabase.save(warmUp)

            // Every answer is lost from now: the server applies the batch, the device never hears.
            relay.dropAnswers(Int.max)
            let records = [Self.note("l1", zone: zone.zoneID), Self.note("l2", zone: zone.zoneID)]
            records[1].encryptedValues["secret"] = "kept in the journal, sealed on the wire"
            let operation = CKModifyRecordsOperation(recordsToSave: records)
            operation.configuration.isLongLived = true
            operation.configuration.timeoutIntervalForRequest = 2
            let persisted = Box(false)
            operation.longLivedOperationWasPersistedBlock = { persisted.update { $0 = true } }
            let firstCallbacks = Box(0)
            operation.perRecordSaveBlock = { _, _ in firstCallbacks.update { $0 += 1 } }
            operation.modifyRecordsResultBlock = { _ in firstCallbacks.update { $0 += 1 } }
            first.privateCloudDatabase.add(operation)

            // Wait until the server has applied it (the device keeps retrying meanwhile).
            var applied = false
            for _ in 0..<100 where !applied {
                try await Task.sleep(for: .milliseconds(50))
                let lookup = try await raw.lookup(zone: "Notes", ["l1", "l2"])
                applied = lookup.records.allSatisfy { $0["serverErrorCode"] == nil } && lookup.records.count == 2
            }
            #expect(applied, "the server never applied the batch")
            #expect(persisted.value)
            try await expectEqual(first.allLongLivedOperationIDs(), [operation.operationID])

            // The app exits: the operation stops where it is, its journal stays.
            first.longLivedOperations.abandonAll()
            try await Task.sleep(for: .milliseconds(200))
            expectEqual(firstCallbacks.value, 0, "an abandoned operation calls nothing")

            // Relaunch: a new container object finds the operation and resumes it.
            let second = Self.device(server, via: nil, journals: journals)
            let ids = try await second.allLongLivedOperationIDs()
            expectEqual(ids, [operation.operationID])
            let resumed = try #require(try await second.longLivedOperation(for: operation.operationID) as? CKModifyRecordsOperation)
            expectEqual(resumed.operationID, operation.operationID)
            #expect(resumed.configuration.isLongLived)
            expectEqual(resumed.recordsToSave?.map(\.recordID.recordName), ["l1", "l2"])
            let (saves, result) = await Self.modify(resumed, on: second.privateCloudDatabase)
            guard case .success? = result else {
                Issue.record("the resumed operation failed: \(String(describing: result)) \(saves)")
                return
            }
            for name in ["l1", "l2"] {
                guard case .success(let saved)? = saves[name] else {
                    Issue.record("\(name): \(String(describing: saves[name]))")
                    continue
                }
                #expect(saved.recordChangeTag != nil)
            }
            // Finished: nothing left to resume; applied once.
            #expect(try await second.allLongLivedOperationIDs().isEmpty)
            #expect(try await second.longLivedOperation(for: operation.operationID) == nil)
            let changes = try await raw.zoneChanges("Notes")
            expectEqual(changes.zones.first?["records"]?.arrayValue?.count, 2, "\(changes.text)")
            let secret = try await second.privateCloudDatabase.record(for: records[1].recordID)
            #expect(secret.encryptedValues["secret"] as? String == "kept in the journal, sealed on the wire")
        }
    }

    @Test("a long-lived save of a 10 MB asset stopped mid-upload resumes after relaunch from the bytes the server holds")
    func longLivedUploadResumes() async throws {
        try await TestServer.with { server in
            try await server.createUser("alice")
            let scratch = URL(fileURLWithPath: NSTemporaryDirectory() + "nimbus-upload-" + UUID().uuidString, isDirectory: true)
            defer { try? FileManager.default.removeItem(at: scratch) }
            let journals = scratch.appendingPathComponent("journals", isDirectory: true)
            try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
            let file = scratch.appendingPathComponent("movie.bin")
            let bytes = Data((0..<10_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 13) })
            try bytes.write(to: file)

            let first = Self.device(server, via: nil, journals: journals)
            let zone = try await first.privateCloudDatabase.save(CKRecordZone(zoneName: "Films"))
            let record = CKRecord(recordType: "Film", recordID: CKRecord.ID(recordName: "f1", zoneID: zone.zoneID))
            record["title"] = "A long one"
            record["movie"] = CKAsset(fileURL: file)
            let operation = CKModifyRecordsOperation(recordsToSave: [record])
            operation.configuration.isLongLived = true
            let firstCallbacks = Box(0)
            // The app is stopped once a fifth of the file is on its way.
            operation.perRecordProgressBlock = { _, fraction in
                if fraction > 0.2 { first.longLivedOperations.abandonAll() }
            }
            operation.perRecordSaveBlock = { _, _ in firstCallbacks.update { $0 += 1 } }
            operation.modifyRecordsResultBlock = { _ in firstCallbacks.update { $0 += 1 } }
            await runOperation(operation, on: first.privateCloudDatabase)
            expectEqual(firstCallbacks.value, 0, "a stopped operation calls nothing")

            // The journal holds the upload's URL, and the server some of its bytes.
            let journal = try #require(try first.longLivedOperations.journal(operation.operationID))
            let journaled = try #require(
                journal["recordsToSave"]?.arrayValue?.first?["assetFields"]?["movie"]?["items"]?.arrayValue?.first?["upload"]?["url"]?.stringValue)
            var held: Int64 = 0
            for _ in 0..<100 where held == 0 {
                var head = URLRequest(url: try #require(URL(string: journaled)))
                head.httpMethod = "HEAD"
                let (_, response) = try await URLSession.shared.data(for: head)
                held = (response as? HTTPURLResponse)?.value(forHTTPHeaderField: "Upload-Offset").flatMap(Int64.init) ?? 0
                if held == 0 { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(held > 0 && held < 10_000_000, "the server holds \(held) bytes")

            // Relaunch: the save resumes; its first progress starts past what the server held.
            let second = Self.device(server, via: nil, journals: journals)
            let resumed = try #require(try await second.longLivedOperation(for: operation.operationID) as? CKModifyRecordsOperation)
            let fractions = Box<[Double]>([])
            resumed.perRecordProgressBlock = { _, fraction in fractions.update { $0.append(fraction) } }
            let (saves, result) = await Self.modify(resumed, on: second.privateCloudDatabase)
            guard case .success? = result, case .success(let saved)? = saves["f1"] else {
                Issue.record("the resumed save failed: \(String(describing: result)) \(saves)")
                return
            }
            let firstFraction = try #require(fractions.value.first)
            #expect(firstFraction >= Double(held) / 10_000_000 * 0.9 - 0.01, "resumed at \(firstFraction), held \(held)")
            expectEqual((saved["movie"] as? CKAsset)?.serverAsset?.size, 10_000_000)
            #expect(try await second.allLongLivedOperationIDs().isEmpty)

            // The stored bytes are the file's.
            let fetched = try await Self.device(server, via: nil).privateCloudDatabase.record(for: record.recordID)
            let downloaded = try #require((fetched["movie"] as? CKAsset)?.fileURL)
            try expectEqual(Data(contentsOf: downloaded), bytes)
            #expect(fetched["title"] as? String == "A long one")
        }
    }

    @Test("every kind of operation marked long-lived is journaled before it sends, and resumed after a relaunch it finishes")
    func everyKindIsJournaled() async throws {
        try await TestServer.with { server in
            let ann = try await ShareKitTests.person(server, "ann")
            let bob = try await ShareKitTests.person(server, "bob")
            let scratch = URL(fileURLWithPath: NSTemporaryDirectory() + "nimbus-kinds-" + UUID().uuidString, isDirectory: true)
            defer { try? FileManager.default.removeItem(at: scratch) }
            let journals = ["ann": scratch.appendingPathComponent("ann"), "bob": scratch.appendingPathComponent("bob")]

            // What the operations work on: a zone with a note, a share of it Bob opens, a zone
            // and a subscription an earlier launch deleted already.
            let zone = try await ann.privateCloudDatabase.save(CKRecordZone(zoneName: "Notes"))
            let note = Self.note("n1", zone: zone.zoneID)
            let shared = CKShare(rootRecord: note)
            shared.publicPermission = .readOnly
            _ = try await ann.privateCloudDatabase.modifyRecords(saving: [note, shared], deleting: [])
            let url = try #require(try await ann.privateCloudDatabase.record(for: shared.recordID) as? CKShare).url
            let metadata = try await bob.shareMetadata(for: try #require(url))
            _ = try await ann.privateCloudDatabase.save(CKRecordZone(zoneName: "Gone"))
            _ = try await ann.privateCloudDatabase.deleteRecordZone(withID: CKRecordZone.ID(zoneName: "Gone"))
            let file = scratch.appendingPathComponent("photo.jpg")
            try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
            try Data("a small photo".utf8).write(to: file)

            let photo = Self.note("n2", zone: zone.zoneID)
            photo["image"] = CKAsset(fileURL: file)
            let photoShare = CKShare(rootRecord: photo)
            let zoneChanges = CKFetchRecordZoneChangesOperation(
                recordZoneIDs: [zone.zoneID],
                configurationsByRecordZoneID: [zone.zoneID: .init(previousServerChangeToken: nil, resultsLimit: 10, desiredKeys: ["title"])])
            let query = CKQueryOperation(query: CKQuery(recordType: "Note", predicate: NSPredicate(format: "title == %@", "n1")))
            query.zoneID = zone.zoneID
            let subscription = CKQuerySubscription(
                recordType: "Note", predicate: NSPredicate(format: "title == %@", "n9"), subscriptionID: "q", options: [.firesOnRecordCreation])
            let work: [(user: String, operation: CKOperation)] = [
                ("ann", CKModifyRecordsOperation(recordsToSave: [photo, photoShare])),
                ("ann", CKFetchRecordsOperation(recordIDs: [note.recordID])),
                ("ann", zoneChanges),
                ("ann", CKFetchDatabaseChangesOperation(previousServerChangeToken: nil)),
                ("ann", CKFetchRecordChangesOperation(recordZoneID: zone.zoneID, previousServerChangeToken: nil)),
                ("ann", query),
                ("ann", CKModifyRecordZonesOperation(recordZonesToSave: [CKRecordZone(zoneName: "More")], recordZoneIDsToDelete: [CKRecordZone.ID(zoneName: "Gone")])),
                ("ann", CKFetchRecordZonesOperation.fetchAllRecordZonesOperation()),
                ("ann", CKModifySubscriptionsOperation(subscriptionsToSave: [subscription], subscriptionIDsToDelete: ["deleted-before"])),
                ("ann", CKFetchSubscriptionsOperation.fetchAllSubscriptionsOperation()),
                ("ann", CKFetchNotificationChangesOperation(previousServerChangeToken: nil)),
                ("ann", CKMarkNotificationsReadOperation(notificationIDsToMarkRead: [CKNotification.ID(UUID().uuidString)])),
                ("ann", CKModifyBadgeOperation(badgeValue: 3)),
                ("ann", CKFetchShareParticipantsOperation(userIdentityLookupInfos: [CKUserIdentity.LookupInfo(emailAddress: "bob@example.com")])),
                ("ann", CKDiscoverUserIdentitiesOperation(userIdentityLookupInfos: [CKUserIdentity.LookupInfo(emailAddress: "bob@example.com")])),
                ("ann", CKDiscoverAllUserIdentitiesOperation()),
                ("bob", CKFetchShareMetadataOperation(shareURLs: [try #require(url)])),
                ("bob", CKAcceptSharesOperation(shareMetadatas: [metadata])),
            ]

            // The first launch cannot reach the server: each operation is journaled before it
            // sends, then the app stops while it is still trying (one at a time: a queue runs
            // only so many container operations at once).
            var offline: [String: CKContainer] = [:]
            for user in ["ann", "bob"] {
                var configuration = server.configuration(user: user)
                configuration.serverURL = URL(string: "http://127.0.0.1:9")!
                configuration.longLivedOperationDirectory = journals[user]
                offline[user] = CKContainer(configuration: configuration)
            }
            let persisted = Box(0)
            for (index, (user, operation)) in work.enumerated() {
                operation.configuration.isLongLived = true
                operation.longLivedOperationWasPersistedBlock = { persisted.update { $0 += 1 } }
                offline[user]?.add(operation)
                for _ in 0..<200 where persisted.value <= index { try await Task.sleep(for: .milliseconds(10)) }
                offline[user]?.longLivedOperations.abandonAll()
                for _ in 0..<200 where !operation.isFinished { try await Task.sleep(for: .milliseconds(10)) }
            }
            expectEqual(persisted.value, work.count, "journaled \(persisted.value) of \(work.count)")

            // Relaunch: each comes back as its kind and finishes.
            for user in ["ann", "bob"] {
                var configuration = server.configuration(user: user)
                configuration.longLivedOperationDirectory = journals[user]
                let device = CKContainer(configuration: configuration)
                let mine = work.filter { $0.user == user }.map(\.operation)
                expectEqual(Set(try await device.allLongLivedOperationIDs()), Set(mine.map(\.operationID)))
                for original in mine {
                    let resumed = try #require(try await device.longLivedOperation(for: original.operationID))
                    #expect(type(of: resumed) == type(of: original), "\(type(of: original)) came back as \(type(of: resumed))")
                    await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                        resumed.completionBlock = { done.resume() }
                        device.add(resumed)
                    }
                    if case .failure(let error)? = resumed.result {
                        Issue.record("\(type(of: resumed)) resumed and failed: \(error)")
                    }
                    #expect(resumed.result != nil)
                }
                #expect(try await device.allLongLivedOperationIDs().isEmpty)
            }

            // What they did happened: the photo and its share, the zone, the subscription, the accept.
            let savedShare = try #require(try await ann.privateCloudDatabase.record(for: photoShare.recordID) as? CKShare)
            #expect(savedShare.url != nil)
            let savedPhoto = try await ann.privateCloudDatabase.record(for: photo.recordID)
            expectEqual((savedPhoto["image"] as? CKAsset)?.fileURL.map { try? Data(contentsOf: $0) }, Data("a small photo".utf8))
            #expect(try await ann.privateCloudDatabase.allRecordZones().contains { $0.zoneID.zoneName == "More" })
            try await expectEqual(ann.privateCloudDatabase.allSubscriptions().map(\.subscriptionID), ["q"])
            try await expectEqual(bob.sharedCloudDatabase.allRecordZones().map(\.zoneID.zoneName), ["Notes"])
        }
    }

    @Test("a journal that does not read, and an unknown ID, are clear answers")
    func badJournals() async throws {
        try await TestServer.with { server in
            try await server.createUser("alice")
            let journals = URL(fileURLWithPath: NSTemporaryDirectory() + "nimbus-journals-" + UUID().uuidString, isDirectory: true)
            defer { try? FileManager.default.removeItem(at: journals) }
            let device = Self.device(server, via: nil, journals: journals)
            #expect(try await device.longLivedOperation(for: "no-such-operation") == nil)
            try FileManager.default.createDirectory(at: journals, withIntermediateDirectories: true)
            try Data("{not json".utf8).write(to: journals.appendingPathComponent("garbled.json"))
            let error = await expectCKError(.internalError) { _ = try await device.longLivedOperation(for: "garbled") }
            expectEqual(error?.localizedDescription.contains("does not read"), true)
        }
    }
}
