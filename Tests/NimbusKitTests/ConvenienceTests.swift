import Foundation
import NimbusKit
import NimbusTestSupport
import Testing

/// The completion-handler forms of the convenience API not covered elsewhere, and the zone
/// operations' older blocks.
@Suite("NimbusKit convenience callbacks")
struct ConvenienceTests {
    @Test("zones and batches through completion handlers")
    func zoneAndBatchCallbacks() async throws {
        try await TestServer.with { server in
            let database = try await server.signedInDevice("ann").privateCloudDatabase
            let (zone, saveError) = await awaitCallback { done in database.save(CKRecordZone(zoneName: "Z")) { done(($0, $1)) } }
            #expect(saveError == nil)
            let zoneID = try #require(zone?.zoneID)
            let (fetched, _) = await awaitCallback { done in database.fetch(withRecordZoneID: zoneID) { done(($0, $1)) } }
            expectEqual(fetched?.zoneID, zoneID)

            let records = (0..<3).map { CKRecord(recordType: "Item", recordID: CKRecord.ID(recordName: "i\($0)", zoneID: zoneID)) }
            let batch = await awaitCallback { done in
                database.modifyRecords(saving: records, deleting: [], savePolicy: .ifServerRecordUnchanged, atomically: true) { done($0) }
            }
            let results = try batch.get()
            expectEqual(results.saveResults.count, 3)

            let query = CKQuery(recordType: "Item", predicate: NSPredicate(value: true))
            let page = await awaitCallback { done in database.fetch(withQuery: query, inZoneWith: zoneID, resultsLimit: 2) { done($0) } }
            let (matches, cursor) = try page.get()
            #expect(matches.count == 2 && cursor != nil)
            let rest = try await database.records(continuingMatchFrom: try #require(cursor))
            #expect(rest.matchResults.count == 1 && rest.queryCursor == nil)

            let (deleted, deleteError) = await awaitCallback { done in database.delete(withRecordZoneID: zoneID) { done(($0, $1)) } }
            #expect(deleteError == nil && deleted == zoneID)
            let (_, gone) = await awaitCallback { done in database.fetch(withRecordZoneID: zoneID) { done(($0, $1)) } }
            expectEqual((gone as? CKError)?.code, .zoneNotFound)
        }
    }

    @Test("CKModifyRecordZonesOperation and CKFetchRecordZonesOperation report per zone, old and new blocks")
    func zoneOperations() async throws {
        try await TestServer.with { server in
            let database = try await server.signedInDevice("bo").privateCloudDatabase
            let save = CKModifyRecordZonesOperation(
                recordZonesToSave: [CKRecordZone(zoneName: "One"), CKRecordZone(zoneName: "Two")], recordZoneIDsToDelete: nil)
            let perZone = Box<[String]>([])
            let final = Box<([CKRecordZone]?, [CKRecordZone.ID]?, (any Error)?)>((nil, nil, nil))
            save.perRecordZoneSaveBlock = { id, result in if case .success = result { perZone.update { $0.append(id.zoneName) } } }
            save.modifyRecordZonesCompletionBlock = { saved, deleted, error in final.update { $0 = (saved, deleted, error) } }
            await runOperation(save, on: database)
            expectEqual(perZone.value, ["One", "Two"])
            #expect(final.value.0?.count == 2 && final.value.2 == nil)

            let fetch = CKFetchRecordZonesOperation(recordZoneIDs: [CKRecordZone.ID(zoneName: "One"), CKRecordZone.ID(zoneName: "Nope")])
            let found = Box<([CKRecordZone.ID: CKRecordZone]?, (any Error)?)>((nil, nil))
            fetch.fetchRecordZonesCompletionBlock = { zones, error in found.update { $0 = (zones, error) } }
            await runOperation(fetch, on: database)
            expectEqual(found.value.0?.keys.map(\.zoneName), ["One"])
            let error = try #require(found.value.1 as? CKError)
            expectEqual(error.code, .partialFailure)
            expectEqual((error.partialErrorsByItemID?[CKRecordZone.ID(zoneName: "Nope")] as? CKError)?.code, .zoneNotFound)

            let delete = CKModifyRecordZonesOperation(recordZonesToSave: nil, recordZoneIDsToDelete: [CKRecordZone.ID(zoneName: "Two")])
            let deletedIDs = Box<[CKRecordZone.ID]>([])
            delete.perRecordZoneDeleteBlock = { id, result in if case .success = result { deletedIDs.update { $0.append(id) } } }
            await runOperation(delete, on: database)
            expectEqual(deletedIDs.value, [CKRecordZone.ID(zoneName: "Two")])
        }
    }
}
