import Foundation
import NimbusKit
import NimbusTestSupport
import Testing

@Suite("NimbusKit zones and change feeds")
struct SyncTests {
    @Test("zones: save, fetch one, fetch all, delete; an unknown zone is zoneNotFound")
    func zones() async throws {
        try await TestServer.with { server in
            let database = try await server.signedInDevice("ann").privateCloudDatabase
            let notes = try await database.save(CKRecordZone(zoneName: "Notes"))
            expectEqual(notes.zoneID.ownerName, CKCurrentUserDefaultName)
            _ = try await database.save(CKRecordZone(zoneName: "Photos"))
            try await expectEqual(database.recordZone(for: notes.zoneID).zoneID, notes.zoneID)
            let all = try await database.allRecordZones().map(\.zoneID.zoneName)
            #expect(all.contains("Notes") && all.contains("Photos"))

            let (zones, error) = await awaitCallback { done in database.fetchAllRecordZones { done(($0, $1)) } }
            #expect(error == nil && zones?.count == all.count)

            try await database.deleteRecordZone(withID: notes.zoneID)
            await expectCKError(.zoneNotFound) { _ = try await database.recordZone(for: notes.zoneID) }
            let orphan = CKRecord(recordType: "Note", recordID: CKRecord.ID(recordName: "n", zoneID: notes.zoneID))
            await expectCKError(.zoneNotFound) { _ = try await database.save(orphan) }
        }
    }

    @Test("CKFetchRecordZoneChangesOperation: fetchAllChanges continues page by page with token updates")
    func zoneChangesContinue() async throws {
        try await TestServer.with { server in
            try await server.createUser("bea")
            let phone = server.device(of: "bea").privateCloudDatabase
            let zone = try await phone.save(CKRecordZone(zoneName: "Notes"))
            let records = (0..<7).map { index -> CKRecord in
                let record = CKRecord(recordType: "Note", recordID: CKRecord.ID(recordName: "n\(index)", zoneID: zone.zoneID))
                record["title"] = "note \(index)"
                return record
            }
            _ = try await phone.modifyRecords(saving: records, deleting: [])
            try await phone.deleteRecord(withID: records[0].recordID)

            let mac = server.device(of: "bea").privateCloudDatabase
            let configuration = CKFetchRecordZoneChangesOperation.ZoneConfiguration()
            configuration.resultsLimit = 2
            let operation = CKFetchRecordZoneChangesOperation(
                recordZoneIDs: [zone.zoneID], configurationsByRecordZoneID: [zone.zoneID: configuration])
            let changed = Box<[String]>([])
            let deleted = Box<[String]>([])
            let tokenUpdates = Box<Int>(0)
            let finalToken = Box<CKServerChangeToken?>(nil)
            operation.recordWasChangedBlock = { id, result in changed.update { $0.append(id.recordName) } }
            operation.recordWithIDWasDeletedBlock = { id, type in
                expectEqual(type, "Note")
                deleted.update { $0.append(id.recordName) }
            }
            operation.recordZoneChangeTokensUpdatedBlock = { _, token, _ in
                #expect(token != nil)
                tokenUpdates.update { $0 += 1 }
            }
            operation.recordZoneFetchResultBlock = { _, result in
                let (token, _, moreComing) = try! result.get()
                #expect(!moreComing)
                finalToken.update { $0 = token }
            }
            await runOperation(operation, on: mac)
            expectEqual(Set(changed.value), Set((1..<7).map { "n\($0)" }))
            expectEqual(deleted.value, ["n0"])
            #expect(tokenUpdates.value >= 3)

            // From the final token: only what changed since.
            let record = try await phone.record(for: records[3].recordID)
            record["title"] = "edited"
            _ = try await phone.save(record)
            let since = try #require(finalToken.value)
            let data = try NSKeyedArchiver.archivedData(withRootObject: since, requiringSecureCoding: true)
            let restored = try #require(try NSKeyedUnarchiver.unarchivedObject(ofClass: CKServerChangeToken.self, from: data))
            let page = try await mac.recordZoneChanges(inZoneWith: zone.zoneID, since: restored)
            expectEqual(page.modificationResultsByID.keys.map(\.recordName), ["n3"])
            #expect(try page.modificationResultsByID[records[3].recordID]?.get().record["title"] as? String == "edited")
            #expect(page.deletions.isEmpty)
            #expect(!page.moreComing)

            // Without fetchAllChanges: one page, moreComing, and the caller continues.
            let first = try await mac.recordZoneChanges(inZoneWith: zone.zoneID, since: nil, resultsLimit: 4)
            #expect(first.moreComing)
            expectEqual(first.modificationResultsByID.count + first.deletions.count, 4)
        }
    }

    @Test("CKFetchDatabaseChangesOperation: zones changed and deleted, token updates while more is coming")
    func databaseChanges() async throws {
        try await TestServer.with { server in
            let database = try await server.signedInDevice("cy").privateCloudDatabase
            for name in ["A", "B", "C", "D", "E"] { _ = try await database.save(CKRecordZone(zoneName: name)) }
            let start = try await database.databaseChanges(since: nil)
            expectEqual(start.modifications.count, 5)
            try await database.deleteRecordZone(withID: CKRecordZone.ID(zoneName: "B"))
            _ = try await database.save(CKRecordZone(zoneName: "F"))

            let operation = CKFetchDatabaseChangesOperation(previousServerChangeToken: nil)
            operation.resultsLimit = 2
            let changed = Box<[String]>([])
            let deleted = Box<[String]>([])
            let updates = Box<Int>(0)
            let result = Box<(CKServerChangeToken?, Bool, (any Error)?)>((nil, true, nil))
            operation.recordZoneWithIDChangedBlock = { id in changed.update { $0.append(id.zoneName) } }
            operation.recordZoneWithIDWasDeletedBlock = { id in deleted.update { $0.append(id.zoneName) } }
            operation.changeTokenUpdatedBlock = { _ in updates.update { $0 += 1 } }
            operation.fetchDatabaseChangesCompletionBlock = { token, more, error in result.update { $0 = (token, more, error) } }
            await runOperation(operation, on: database)
            expectEqual(Set(changed.value), ["A", "C", "D", "E", "F"])
            expectEqual(deleted.value, ["B"])
            #expect(updates.value >= 2)
            #expect(result.value.0 != nil && result.value.1 == false && result.value.2 == nil)

            let since = try await database.databaseChanges(since: result.value.0)
            #expect(since.modifications.isEmpty && since.deletions.isEmpty)
        }
    }

    @Test("a forged change token is invalidArguments; a token from before the zone was re-created is changeTokenExpired")
    func badTokens() async throws {
        try await TestServer.with { server in
            let database = try await server.signedInDevice("dan").privateCloudDatabase
            let zone = try await database.save(CKRecordZone(zoneName: "Z"))
            let token = try await database.recordZoneChanges(inZoneWith: zone.zoneID, since: nil).changeToken
            try await database.deleteRecordZone(withID: zone.zoneID)
            _ = try await database.save(CKRecordZone(zoneName: "Z"))
            await expectCKError(.changeTokenExpired) { _ = try await database.recordZoneChanges(inZoneWith: zone.zoneID, since: token) }

            let archiver = NSKeyedArchiver(requiringSecureCoding: true)
            archiver.encode("forged-token" as NSString, forKey: "syncToken")
            archiver.finishEncoding()
            let forged = try #require(CKServerChangeToken(coder: try NSKeyedUnarchiver(forReadingFrom: archiver.encodedData)))
            await expectCKError(.invalidArguments) { _ = try await database.recordZoneChanges(inZoneWith: zone.zoneID, since: forged) }
        }
    }
}
