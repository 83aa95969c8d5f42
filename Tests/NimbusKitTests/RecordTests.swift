import Foundation
import NimbusKit
import NimbusTestSupport
import Testing

@Suite("NimbusKit records")
struct RecordTests {
    @Test("every value type saves and comes back with the type CloudKit gives")
    func valueTypesRoundTrip() async throws {
        try await TestServer.with { server in
            let database = try await server.signedInDevice("ann").privateCloudDatabase
            let zone = try await database.save(CKRecordZone(zoneName: "Types"))
            let target = CKRecord(recordType: "Target", recordID: CKRecord.ID(recordName: "t1", zoneID: zone.zoneID))
            _ = try await database.save(target)

            let record = CKRecord(recordType: "Everything", recordID: CKRecord.ID(recordName: "e1", zoneID: zone.zoneID))
            let date = Date(timeIntervalSince1970: 1_700_000_000.123)
            record["text"] = "héllo 🎈"
            record["int"] = 42
            record["double"] = 2.5
            record["flag"] = true
            record["date"] = date
            record["data"] = Data([0, 1, 2, 255])
            record["ref"] = CKRecord.Reference(record: target, action: .deleteSelf)
            record["where"] = CLLocation(latitude: 37.783, longitude: -122.404)
            record["tags"] = ["a", "b"]
            record["scores"] = [1, 2, 3]
            record.setParent(target)
            expectEqual(Set(record.changedKeys()), ["text", "int", "double", "flag", "date", "data", "ref", "where", "tags", "scores"])

            let saved = try await database.save(record)
            #expect(saved.recordChangeTag != nil)
            #expect(saved.creationDate != nil)
            #expect(saved.changedKeys().isEmpty)
            #expect(record.changedKeys().isEmpty, "a saved record has nothing left to send")

            let fetched = try await database.record(for: record.recordID)
            #expect(fetched["text"] as? String == "héllo 🎈")
            #expect(fetched["int"] as? Int == 42)
            #expect(fetched["int"] as? Int64 == 42)
            #expect(fetched["double"] as? Double == 2.5)
            #expect(fetched["flag"] as? Bool == true)
            expectEqual((fetched["date"] as? Date).map { abs($0.timeIntervalSince(date)) < 0.001 }, true)
            #expect(fetched["data"] as? Data == Data([0, 1, 2, 255]))
            let reference = try #require(fetched["ref"] as? CKRecord.Reference)
            expectEqual(reference.recordID, target.recordID)
            expectEqual(reference.action, .deleteSelf)
            let location = try #require(fetched["where"] as? CLLocation)
            #expect(abs(location.coordinate.latitude - 37.783) < 1e-9)
            #expect(fetched["tags"] as? [String] == ["a", "b"])
            #expect(fetched["scores"] as? [Int] == [1, 2, 3])
            expectEqual(fetched.parent?.recordID, target.recordID)
            expectEqual(fetched.recordChangeTag, saved.recordChangeTag)
            expectEqual(fetched.creatorUserRecordID?.recordName, CKCurrentUserDefaultName)
            expectEqual(Set(fetched.allKeys()), Set(record.allKeys()))
            #expect(fetched.changedKeys().isEmpty)
        }
    }

    @Test("completion-handler forms report results and errors")
    func completionHandlers() async throws {
        try await TestServer.with { server in
            let database = try await server.signedInDevice("bea").publicCloudDatabase
            let party = CKRecord(recordType: "Party", recordID: CKRecord.ID(recordName: "WellKnownParty"))
            party["summary"] = "Post Presentation Beers"
            let (saved, saveError) = await awaitCallback { done in database.save(party) { done(($0, $1)) } }
            #expect(saveError == nil)
            #expect(saved?["summary"] as? String == "Post Presentation Beers")

            let (fetched, _) = await awaitCallback { done in database.fetch(withRecordID: party.recordID) { done(($0, $1)) } }
            expectEqual(fetched?.recordID, party.recordID)

            let (deleted, _) = await awaitCallback { done in database.delete(withRecordID: party.recordID) { done(($0, $1)) } }
            expectEqual(deleted, party.recordID)

            let (missing, missingError) = await awaitCallback { done in
                database.fetch(withRecordID: party.recordID) { done(($0, $1)) }
            }
            #expect(missing == nil)
            expectEqual((missingError as? CKError)?.code, .unknownItem)
        }
    }

    @Test("a value that is not a CloudKit type is invalidArguments, nothing is sent")
    func unsupportedValue() async throws {
        struct Clown: CKRecordValue {}
        try await TestServer.with { server in
            let database = try await server.signedInDevice("cal").publicCloudDatabase
            let record = CKRecord(recordType: "Party")
            record["clown"] = Clown()
            let error = await expectCKError(.invalidArguments) { _ = try await database.save(record) }
            expectEqual(error?.localizedDescription.contains("clown"), true)
            await expectCKError(.unknownItem) { _ = try await database.record(for: record.recordID) }
        }
    }

    @Test("encodeSystemFields keeps what a later save needs; full coding keeps fields too")
    func secureCoding() async throws {
        try await TestServer.with { server in
            let database = try await server.signedInDevice("dee").privateCloudDatabase
            let zone = try await database.save(CKRecordZone(zoneName: "Notes"))
            let party = CKRecord(recordType: "Party", recordID: CKRecord.ID(recordName: "p", zoneID: zone.zoneID))
            party["PartyName"] = "My Party"
            let saved = try await database.save(party)

            let archiver = NSKeyedArchiver(requiringSecureCoding: true)
            saved.encodeSystemFields(with: archiver)
            archiver.finishEncoding()
            let unarchiver = try NSKeyedUnarchiver(forReadingFrom: archiver.encodedData)
            unarchiver.requiresSecureCoding = true
            let restored = try #require(CKRecord(coder: unarchiver))
            expectEqual(restored.recordID, saved.recordID)
            expectEqual(restored.recordChangeTag, saved.recordChangeTag)
            #expect(restored.allKeys().isEmpty)

            restored["PartyName"] = "WWDC Bash"
            let resaved = try await database.save(restored)
            #expect(resaved["PartyName"] as? String == "WWDC Bash")
            #expect(resaved.recordChangeTag != saved.recordChangeTag)

            let full = try NSKeyedArchiver.archivedData(withRootObject: resaved, requiringSecureCoding: true)
            let copy = try #require(try NSKeyedUnarchiver.unarchivedObject(ofClass: CKRecord.self, from: full))
            #expect(copy["PartyName"] as? String == "WWDC Bash")
            expectEqual(copy.recordChangeTag, resaved.recordChangeTag)
        }
    }
}
