import Foundation
import NimbusTestSupport
import NimbusTesting
import Testing

/// `NimbusTesting` (issue 41, docs/testing.md): a real server in the test process, and faults a
/// test switches on. Each fault must reach NimbusKit as the same `CKError` (code, `retryAfter`,
/// partial-error shape) as the real situation does; where the situation can be caused for real
/// (a budget spent, another device's save, a zone made again), the test causes it too and
/// compares.
@Suite("NimbusTesting: faults as switches")
struct FaultKitTests {
    static let zone = CKRecordZone(zoneName: "Notes")

    static func note(_ name: String, _ text: String = "hello") -> CKRecord {
        let record = CKRecord(recordType: "Note", recordID: CKRecord.ID(recordName: name, zoneID: zone.zoneID))
        record["text"] = text
        return record
    }

    /// What NimbusKit reports for one failed call.
    static func failure(_ body: () async throws -> Void) async -> CKError? {
        do {
            try await body()
            return nil
        } catch {
            return error as? CKError
        }
    }

    @Test("throttled: requestRateLimited with the fault's retryAfter, as a spent budget answers; a discretionary operation waits it out")
    func throttled() async throws {
        // The real thing: a budget of two requests a minute, spent.
        let real = try await NimbusTestServer.with(configure: { $0.service.containerLimits[.userRequestsPerMinute] = 2 }) { server in
            let phone = try await server.device(of: "alice")
            var error: CKError?
            for attempt in 0..<5 where error == nil {
                error = await Self.failure { _ = try await phone.privateCloudDatabase.save(Self.zone) }
                _ = attempt
            }
            return try #require(error)
        }
        expectEqual(real.code, .requestRateLimited)
        #expect((real.retryAfterSeconds ?? 0) > 0)

        try await NimbusTestServer.with { server in
            let phone = try await server.device(of: "alice")
            _ = try await phone.privateCloudDatabase.save(Self.zone)
            try await server.switchOn(Fault(.throttled, retryAfter: 2, route: "records/modify"))
            let error = try #require(await Self.failure { _ = try await phone.privateCloudDatabase.save(Self.note("n1")) })
            expectEqual(error.code, real.code)
            expectEqual(error.retryAfterSeconds, 2)
            #expect(server.faultsOn.isEmpty, "a fault with a count of one is spent")
            // Other routes and other users were never concerned; the next save goes through.
            _ = try await phone.privateCloudDatabase.save(Self.note("n1"))

            // Discretionary work (an operation at .utility) waits retryAfter and succeeds.
            try await server.switchOn(Fault(.throttled, retryAfter: 1, route: "records/modify"))
            let operation = CKModifyRecordsOperation(recordsToSave: [Self.note("n2")])
            let started = Date()
            let result = Box<Result<Void, any Error>?>(nil)
            operation.modifyRecordsResultBlock = { outcome in result.update { $0 = outcome } }
            await runOperation(operation, on: phone.privateCloudDatabase)
            guard case .success? = result.value else {
                Issue.record("the discretionary save failed: \(String(describing: result.value))")
                return
            }
            #expect(Date().timeIntervalSince(started) >= 0.9)
        }
    }

    @Test("zoneBusy and tryAgainLater: zoneBusy and serviceUnavailable with retryAfter, scoped to a zone and a user")
    func busy() async throws {
        try await NimbusTestServer.with { server in
            let alice = try await server.device(of: "alice")
            let bob = try await server.device(of: "bob")
            for device in [alice, bob] { _ = try await device.privateCloudDatabase.save(Self.zone) }
            try await server.switchOn(Fault(.zoneBusy, retryAfter: 4, user: "alice", zone: "Notes", count: 2))
            // Bob's zone of the same name is not alice's.
            _ = try await bob.privateCloudDatabase.save(Self.note("b1"))
            for _ in 0..<2 {
                let error = try #require(await Self.failure { _ = try await alice.privateCloudDatabase.save(Self.note("a1")) })
                expectEqual(error.code, .zoneBusy)
                expectEqual(error.retryAfterSeconds, 4)
            }
            _ = try await alice.privateCloudDatabase.save(Self.note("a1"))

            try await server.switchOn(Fault(.tryAgainLater, retryAfter: 3, user: "bob"))
            let error = try #require(await Self.failure { _ = try await bob.privateCloudDatabase.record(for: Self.note("b1").recordID) })
            expectEqual(error.code, .serviceUnavailable)
            expectEqual(error.retryAfterSeconds, 3)

            // A fault for someone who does not exist is refused, not silently useless.
            await #expect(throws: (any Error).self) { try await server.switchOn(Fault(.throttled, user: "nobody")) }
        }
    }

    @Test("connectionReset: the save happens, its answer is lost; a user-initiated call gets networkFailure")
    func connectionReset() async throws {
        try await NimbusTestServer.with { server in
            let phone = try await server.device(of: "alice")
            _ = try await phone.privateCloudDatabase.save(Self.zone)
            try await server.switchOn(Fault(.connectionReset, route: "records/modify"))
            let error = try #require(await Self.failure { _ = try await phone.privateCloudDatabase.save(Self.note("n1", "kept")) })
            expectEqual(error.code, .networkFailure)
            let stored = try await phone.privateCloudDatabase.record(for: Self.note("n1").recordID)
            #expect(stored["text"] as? String == "kept", "the server carried the save out before the connection went")
        }
    }

    @Test("conflict: serverRecordChanged with the server's record, and in an atomic batch the rest batchRequestFailed, as a real conflict")
    func conflict() async throws {
        try await NimbusTestServer.with { server in
            let phone = try await server.device(of: "alice")
            let laptop = try await server.device(of: "alice", named: "laptop")
            _ = try await phone.privateCloudDatabase.save(Self.zone)
            var saved: [CKRecord] = []
            for name in ["a", "b", "c"] { saved.append(try await phone.privateCloudDatabase.save(Self.note(name, "first"))) }

            // The real thing: the laptop changes "a", then the phone saves its stale copy of all three.
            let onLaptop = try await laptop.privateCloudDatabase.record(for: saved[0].recordID)
            onLaptop["text"] = "laptop"
            _ = try await laptop.privateCloudDatabase.save(onLaptop)
            for record in saved { record["text"] = "phone" }
            let realError = try #require(await Self.failure { _ = try await Self.saveAll(saved, on: phone) })

            // The fault: the same batch again (fresh tags), with a conflict switched on for "b".
            var fresh: [CKRecord] = []
            for record in saved { fresh.append(try await phone.privateCloudDatabase.record(for: record.recordID)) }
            for record in fresh { record["text"] = "again" }
            try await server.switchOn(Fault(.conflict, recordName: "b"))
            let faultError = try #require(await Self.failure { _ = try await Self.saveAll(fresh, on: phone) })

            for (error, conflicted) in [(realError, "a"), (faultError, "b")] {
                expectEqual(error.code, .partialFailure)
                let items = try #require(error.partialErrorsByItemID)
                expectEqual(items.count, 3)
                for (id, itemError) in items {
                    let ckError = try #require(itemError as? CKError)
                    let name = try #require(id as? CKRecord.ID).recordName
                    if name == conflicted {
                        expectEqual(ckError.code, .serverRecordChanged)
                        expectEqual(ckError.serverRecord?.recordID.recordName, conflicted)
                    } else {
                        expectEqual(ckError.code, .batchRequestFailed)
                    }
                }
            }
            // Nothing of the faulted batch was written; merged with the server record, it goes through.
            #expect(try await phone.privateCloudDatabase.record(for: fresh[2].recordID)["text"] as? String == "first")
            _ = try await Self.saveAll(fresh, on: phone)
        }
    }

    /// Saves `records` in one atomic operation; throws the operation's error (`partialFailure`
    /// with each record's).
    static func saveAll(_ records: [CKRecord], on device: CKContainer) async throws {
        let operation = CKModifyRecordsOperation(recordsToSave: records)
        operation.isAtomic = true
        operation.qualityOfService = .userInitiated
        let outcome = Box<Result<Void, any Error>?>(nil)
        operation.modifyRecordsResultBlock = { result in outcome.update { $0 = result } }
        await runOperation(operation, on: device.privateCloudDatabase)
        try #require(outcome.value).get()
    }

    @Test("changeTokenExpired: a zone's feed answers changeTokenExpired for its token, as after the zone was made again")
    func changeTokenExpired() async throws {
        try await NimbusTestServer.with { server in
            let phone = try await server.device(of: "alice")
            let database = phone.privateCloudDatabase
            _ = try await database.save(Self.zone)
            _ = try await database.save(Self.note("n1"))
            let token = try await database.recordZoneChanges(inZoneWith: Self.zone.zoneID, since: nil).changeToken

            try await server.switchOn(Fault(.changeTokenExpired, user: "alice", zone: "Notes"))
            let faulted = try #require(await Self.failure { _ = try await database.recordZoneChanges(inZoneWith: Self.zone.zoneID, since: token) })
            // The token still works once the fault is spent.
            _ = try await database.recordZoneChanges(inZoneWith: Self.zone.zoneID, since: token)

            // The real thing: the zone deleted and made again.
            _ = try await database.deleteRecordZone(withID: Self.zone.zoneID)
            _ = try await database.save(Self.zone)
            let real = try #require(await Self.failure { _ = try await database.recordZoneChanges(inZoneWith: Self.zone.zoneID, since: token) })
            expectEqual(faulted.code, .changeTokenExpired)
            expectEqual(faulted.code, real.code)
        }
    }

    @Test("signOut: the session ends on every device; NimbusKit signs in again with the password it has")
    func signOut() async throws {
        try await NimbusTestServer.with { server in
            let phone = try await server.device(of: "alice")
            _ = try await phone.privateCloudDatabase.save(Self.zone)
            let token = try #require(phone.webAuthToken)
            try await server.signOut("alice")
            // A device holding only the old web auth token (no password) is signed out.
            var configuration = server.configuration(of: nil, device: "token-only")
            configuration.webAuthToken = token
            let tokenOnly = CKContainer(configuration: configuration)
            let error = try #require(await Self.failure { _ = try await tokenOnly.privateCloudDatabase.allRecordZones() })
            expectEqual(error.code, .notAuthenticated)
            // The phone signs in again by itself.
            #expect(try await phone.privateCloudDatabase.allRecordZones().contains { $0.zoneID == Self.zone.zoneID })
            #expect(phone.webAuthToken != token)
        }
    }

    @Test("resetEncryptionKey: a device of the user reads encrypted fields saved before as zoneNotFound with userDidResetEncryptedDataKey")
    func encryptionKeyReset() async throws {
        try await NimbusTestServer.with { server in
            let phone = try await server.device(of: "alice")
            _ = try await phone.privateCloudDatabase.save(Self.zone)
            let record = Self.note("secret")
            record.encryptedValues["pin"] = "1234"
            _ = try await phone.privateCloudDatabase.save(record)
            try server.resetEncryptionKey(of: "alice")
            let after = try await server.device(of: "alice", named: "after-reset")
            let error = try #require(await Self.failure { _ = try await after.privateCloudDatabase.record(for: record.recordID) })
            expectEqual(error.code, .zoneNotFound)
            expectEqual((error.userInfo[CKErrorUserDidResetEncryptedDataKey] as? NSNumber)?.boolValue, true)
        }
    }

    @Test("pushDropped and pushDelayed: the change is in the feed, its push never comes or comes late")
    func pushes() async throws {
        try await NimbusTestServer.with { server in
            let listener = try await server.device(of: "alice")
            let writer = try await server.device(of: "alice", named: "writer")
            let reader = try await SubscriptionKitTests.connectedReader(listener, probe: writer)
            defer { reader.stop() }
            _ = try await listener.privateCloudDatabase.save(CKDatabaseSubscription(subscriptionID: "all"))

            try await server.switchOn(Fault(.pushDropped, user: "alice"))
            _ = try await writer.privateCloudDatabase.save(CKRecordZone(zoneName: "Dropped"))
            #expect(await reader.nothing(within: 1.5), "a dropped push never arrives")
            let changes = try await listener.privateCloudDatabase.databaseChanges(since: nil)
            #expect(changes.modifications.contains { $0.zoneID.zoneName == "Dropped" }, "the change itself is there to fetch")

            try await server.switchOn(Fault(.pushDelayed, delaySeconds: 2, user: "alice"))
            let sent = Date()
            _ = try await writer.privateCloudDatabase.save(CKRecordZone(zoneName: "Late"))
            #expect(await reader.nothing(within: 1.2))
            _ = try await reader.next(within: 5)
            #expect(Date().timeIntervalSince(sent) >= 1.9)
        }
    }

    @Test("the clock moves ahead: a session idle past its timeout has ended")
    func clock() async throws {
        try await NimbusTestServer.with(configure: { $0.service.sessionIdleTimeoutMilliseconds = 60_000 }) { server in
            let phone = try await server.device(of: "alice")
            _ = try await phone.privateCloudDatabase.save(Self.zone)
            var configuration = server.configuration(of: nil, device: "token-only")
            configuration.webAuthToken = phone.webAuthToken
            let tokenOnly = CKContainer(configuration: configuration)
            _ = try await tokenOnly.privateCloudDatabase.allRecordZones()
            server.advanceClock(by: .seconds(61))
            let error = try #require(await Self.failure { _ = try await tokenOnly.privateCloudDatabase.allRecordZones() })
            expectEqual(error.code, .notAuthenticated)
        }
    }
}
