import Foundation
import NimbusKit
import NimbusTestSupport
import Testing

/// The save policies of the seeds' table, and conflicts resolved by three-way merge.
@Suite("NimbusKit save policies")
struct SavePolicyTests {
    /// A profile record both devices have fetched.
    private func sharedProfile(_ server: TestServer) async throws -> (CKDatabase, CKDatabase, CKRecord.ID) {
        try await server.createUser("johnny")
        let phone = server.device(of: "johnny").privateCloudDatabase
        let mac = server.device(of: "johnny").privateCloudDatabase
        let zone = try await phone.save(CKRecordZone(zoneName: "Profiles"))
        let profile = CKRecord(recordType: "Profile", recordID: CKRecord.ID(recordName: "me", zoneID: zone.zoneID))
        profile["firstName"] = "Johnny"
        profile["lastName"] = "Appleseed"
        _ = try await phone.save(profile)
        return (phone, mac, profile.recordID)
    }

    private func save(_ record: CKRecord, on database: CKDatabase, policy: CKModifyRecordsOperation.RecordSavePolicy)
        async throws -> CKRecord
    {
        let (saves, _) = try await database.modifyRecords(saving: [record], deleting: [], savePolicy: policy)
        return try saves[record.recordID]!.get()
    }

    @Test("ifServerRecordUnchanged: a stale save fails with the server, client and ancestor records; merge and retry")
    func lockedConflictAndMerge() async throws {
        try await TestServer.with { server in
            let (phone, mac, id) = try await sharedProfile(server)
            let onPhone = try await phone.record(for: id)
            let onMac = try await mac.record(for: id)

            onPhone["hobby"] = "Horticulture"
            _ = try await phone.save(onPhone)

            onMac["hobby"] = "Geocaching"
            let error = await expectCKError(.serverRecordChanged) { _ = try await mac.save(onMac) }
            let serverRecord = try #require(error?.serverRecord)
            let clientRecord = try #require(error?.clientRecord)
            let ancestor = try #require(error?.ancestorRecord)
            #expect(serverRecord["hobby"] as? String == "Horticulture")
            #expect(clientRecord["hobby"] as? String == "Geocaching")
            #expect(ancestor["hobby"] == nil)
            #expect(ancestor["firstName"] as? String == "Johnny")
            expectEqual((error?.userInfo[CKRecordChangedErrorServerRecordKey] as? CKRecord)?.recordChangeTag, serverRecord.recordChangeTag)

            // Three-way merge: apply the client's changes (relative to the ancestor) to the
            // server record, then save that.
            for key in clientRecord.changedKeys() { serverRecord[key] = clientRecord[key] }
            let merged = try await mac.save(serverRecord)
            #expect(merged["hobby"] as? String == "Geocaching")
            #expect(merged["firstName"] as? String == "Johnny")
        }
    }

    @Test("changedKeys: the seeds' unlocked update gone bad (Johnny Appleseed + Paul Smith = John Smith)")
    func unlockedUpdateGoneBad() async throws {
        try await TestServer.with { server in
            let (phone, mac, id) = try await sharedProfile(server)
            let onPhone = try await phone.record(for: id)
            let onMac = try await mac.record(for: id)
            // The phone renames the card to Paul Smith; the Mac shortens Johnny to John.
            onPhone["firstName"] = "Paul"
            onPhone["lastName"] = "Smith"
            _ = try await save(onPhone, on: phone, policy: .changedKeys)
            onMac["firstName"] = "John"
            let result = try await save(onMac, on: mac, policy: .changedKeys)
            // Neither save was refused, and the card now names someone nobody entered.
            #expect(result["firstName"] as? String == "John")
            #expect(result["lastName"] as? String == "Smith")
        }
    }

    @Test("allKeys: a server field absent locally survives (the hometown), unless removed locally")
    func allKeysKeepsServerFields() async throws {
        try await TestServer.with { server in
            let (phone, mac, id) = try await sharedProfile(server)
            let onPhone = try await phone.record(for: id)
            onPhone["hometown"] = "Appleton, WI"
            _ = try await phone.save(onPhone)

            // The Mac only ever knew the record without a hometown.
            let onMac = CKRecord(recordType: "Profile", recordID: id)
            onMac["firstName"] = "Johnny"
            onMac["lastName"] = "Appleseed"
            onMac["lastTreePlanted"] = Date(timeIntervalSince1970: -3_933_619_200)
            let saved = try await save(onMac, on: mac, policy: .allKeys)
            #expect(saved["hometown"] as? String == "Appleton, WI")
            #expect(saved["lastTreePlanted"] != nil)

            onMac["hometown"] = nil
            let removed = try await save(onMac, on: mac, policy: .allKeys)
            #expect(removed["hometown"] == nil)
            #expect(removed["firstName"] as? String == "Johnny")
        }
    }

    @Test("a record made locally under an existing name: create is refused as serverRecordChanged")
    func createOverExisting() async throws {
        try await TestServer.with { server in
            let (_, mac, id) = try await sharedProfile(server)
            let duplicate = CKRecord(recordType: "Profile", recordID: id)
            duplicate["firstName"] = "Other"
            await expectCKError(.serverRecordChanged) { _ = try await mac.save(duplicate) }
            #expect(try await mac.record(for: id)["firstName"] as? String == "Johnny")
        }
    }

    @Test("saving the same object twice sends only new changes, with the new change tag")
    func saveTwice() async throws {
        try await TestServer.with { server in
            let (phone, _, id) = try await sharedProfile(server)
            let record = try await phone.record(for: id)
            record["firstName"] = "J"
            let first = try await phone.save(record)
            record["lastName"] = "A"
            let second = try await phone.save(record)
            #expect(second.recordChangeTag != first.recordChangeTag)
            #expect(second["firstName"] as? String == "J")
            #expect(second["lastName"] as? String == "A")
        }
    }
}
