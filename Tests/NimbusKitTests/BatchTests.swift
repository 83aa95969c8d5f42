import Foundation
import NimbusKit
import NimbusTestSupport
import Testing

@Suite("NimbusKit batches")
struct BatchTests {
    @Test("an atomic batch with one bad record writes nothing: partialFailure, the rest batchRequestFailed")
    func atomicBatch() async throws {
        try await TestServer.with { server in
            let database = try await server.signedInDevice("ann").privateCloudDatabase
            let zone = try await database.save(CKRecordZone(zoneName: "Receipts"))
            let existing = CKRecord(recordType: "Receipt", recordID: CKRecord.ID(recordName: "r0", zoneID: zone.zoneID))
            _ = try await database.save(existing)
            let stale = CKRecord(recordType: "Receipt", recordID: existing.recordID)  // create over an existing record
            let fresh = (1...3).map { CKRecord(recordType: "Receipt", recordID: CKRecord.ID(recordName: "r\($0)", zoneID: zone.zoneID)) }

            let operation = CKModifyRecordsOperation(recordsToSave: fresh + [stale], recordIDsToDelete: nil)
            let perRecord = Box<[CKRecord.ID: CKError.Code]>([:])
            let final = Box<(any Error)?>(nil)
            operation.perRecordSaveBlock = { id, result in
                if case .failure(let error) = result { perRecord.update { $0[id] = (error as? CKError)?.code } }
            }
            operation.modifyRecordsCompletionBlock = { saved, _, error in
                expectEqual(saved?.isEmpty, true)
                final.update { $0 = error }
            }
            await runOperation(operation, on: database)
            let error = try #require(final.value as? CKError)
            expectEqual(error.code, .partialFailure)
            let partial = try #require(error.partialErrorsByItemID)
            expectEqual(partial.count, 4)
            expectEqual((partial[existing.recordID] as? CKError)?.code, .serverRecordChanged)
            for record in fresh {
                expectEqual((partial[record.recordID] as? CKError)?.code, .batchRequestFailed)
                expectEqual(perRecord.value[record.recordID], .batchRequestFailed)
            }
            let lookups = try await database.records(for: fresh.map(\.recordID))
            for record in fresh {
                #expect((lookups[record.recordID].map { r -> CKError.Code? in
                    if case .failure(let e) = r { return (e as? CKError)?.code } else { return nil }
                } ?? nil) == .unknownItem)
            }
        }
    }

    @Test("non-atomic batches of 250 are split into requests of 200; an atomic one is limitExceeded")
    func oversizeBatches() async throws {
        try await TestServer.with { server in
            let database = try await server.signedInDevice("bob").privateCloudDatabase
            let zone = try await database.save(CKRecordZone(zoneName: "Bulk"))
            let records = (0..<250).map {
                let record = CKRecord(recordType: "Item", recordID: CKRecord.ID(recordName: "i\($0)", zoneID: zone.zoneID))
                record["n"] = $0
                return record
            }
            let atomic = await expectCKError(.limitExceeded) {
                _ = try await database.modifyRecords(saving: records, deleting: [], atomically: true)
            }
            expectEqual(atomic?.localizedDescription.contains("200"), true)

            let exactly200 = try await database.modifyRecords(saving: Array(records.prefix(200)), deleting: [], atomically: true)
            #expect(exactly200.saveResults.values.allSatisfy { (try? $0.get()) != nil })

            let (saves, _) = try await database.modifyRecords(saving: records, deleting: [], savePolicy: .allKeys, atomically: false)
            expectEqual(saves.count, 250)
            #expect(saves.values.allSatisfy { (try? $0.get()) != nil })
            let (_, deletes) = try await database.modifyRecords(saving: [], deleting: records.map(\.recordID), atomically: false)
            expectEqual(deletes.count, 250)
        }
    }

    @Test("records in several zones go one request per zone; a missing zone fails only its records")
    func severalZones() async throws {
        try await TestServer.with { server in
            let database = try await server.signedInDevice("cy").privateCloudDatabase
            let zone = try await database.save(CKRecordZone(zoneName: "Real"))
            let good = CKRecord(recordType: "Note", recordID: CKRecord.ID(recordName: "a", zoneID: zone.zoneID))
            let lost = CKRecord(recordType: "Note", recordID: CKRecord.ID(recordName: "b", zoneID: CKRecordZone.ID(zoneName: "Nowhere")))
            let (saves, _) = try await database.modifyRecords(saving: [good, lost], deleting: [])
            #expect((try? saves[good.recordID]?.get()) != nil)
            await expectCKError(.zoneNotFound) { _ = try saves[lost.recordID]!.get() }
        }
    }
}
