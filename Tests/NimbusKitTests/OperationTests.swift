import Foundation
import NimbusKit
import NimbusTestSupport
import Testing

@Suite("NimbusKit operations")
struct OperationTests {
    @Test("dependencies: the second fetch starts after the first's CloudKit completion block, across queues")
    func dependencies() async throws {
        try await TestServer.with { server in
            let database = try await server.signedInDevice("ann").publicCloudDatabase
            let first = CKRecord(recordType: "Party", recordID: CKRecord.ID(recordName: "first"))
            let second = CKRecord(recordType: "Party", recordID: CKRecord.ID(recordName: "second"))
            _ = try await database.modifyRecords(saving: [first, second], deleting: [])

            let events = Box<[String]>([])
            let firstFetch = CKFetchRecordsOperation(recordIDs: [first.recordID])
            firstFetch.database = database
            firstFetch.fetchRecordsCompletionBlock = { records, error in
                #expect(error == nil && records?.count == 1)
                events.update { $0.append("first done") }
            }
            let secondFetch = CKFetchRecordsOperation(recordIDs: [second.recordID])
            secondFetch.database = database
            secondFetch.perRecordResultBlock = { _, _ in events.update { $0.append("second result") } }
            secondFetch.addDependency(firstFetch)
            let queue = OperationQueue()
            let other = OperationQueue()
            other.addOperation(secondFetch)
            queue.addOperation(firstFetch)
            await withCheckedContinuation { continuation in
                DispatchQueue.global().async {
                    other.waitUntilAllOperationsAreFinished()
                    continuation.resume()
                }
            }
            expectEqual(events.value, ["first done", "second result"])
            #expect(firstFetch.isFinished && secondFetch.isFinished)
            #expect(firstFetch.operationID != secondFetch.operationID)
        }
    }

    @Test("cancellation: an operation cancelled before it runs reports operationCancelled and sends nothing")
    func cancelBeforeStart() async throws {
        try await TestServer.with { server in
            let database = try await server.signedInDevice("bo").publicCloudDatabase
            let record = CKRecord(recordType: "Party")
            let operation = CKModifyRecordsOperation(recordsToSave: [record], recordIDsToDelete: nil)
            let outcome = Box<(any Error)?>(nil)
            operation.modifyRecordsResultBlock = { result in
                if case .failure(let error) = result { outcome.update { $0 = error } }
            }
            operation.cancel()
            await runOperation(operation, on: database)
            expectEqual((outcome.value as? CKError)?.code, .operationCancelled)
            await expectCKError(.unknownItem) { _ = try await database.record(for: record.recordID) }
        }
    }

    @Test("cancelling the awaiting task cancels the operation")
    func cancelTask() async throws {
        try await TestServer.with { server in
            let database = try await server.signedInDevice("cy").publicCloudDatabase
            let task = Task {
                try await Task.sleep(nanoseconds: 50_000_000)
                return try await database.records(matching: CKQuery(recordType: "Party", predicate: NSPredicate(value: true)))
            }
            task.cancel()
            do {
                _ = try await task.value
                Issue.record("a cancelled task should not succeed")
            } catch {
                #expect(error is CancellationError || (error as? CKError)?.code == .operationCancelled)
            }
        }
    }

    @Test("a group's default configuration fills in what an operation leaves unset, and only that")
    func groups() async throws {
        try await TestServer.with { server in
            let container = try await server.signedInDevice("gus")
            let zone = try await container.privateCloudDatabase.save(CKRecordZone(zoneName: "Grouped"))
            let group = CKOperationGroup()
            group.name = "Initial sync"
            group.defaultConfiguration.container = container
            group.defaultConfiguration.qualityOfService = .background
            let operation = CKFetchRecordZonesOperation(recordZoneIDs: [zone.zoneID])
            operation.group = group
            operation.configuration.timeoutIntervalForRequest = 30
            // No database and no container of its own: the group's container answers.
            let zones = Box<[CKRecordZone.ID: CKRecordZone]?>(nil)
            operation.fetchRecordZonesCompletionBlock = { found, _ in zones.update { $0 = found } }
            await withCheckedContinuation { continuation in
                operation.completionBlock = { continuation.resume() }
                OperationQueue().addOperation(operation)
            }
            #expect(zones.value?[zone.zoneID] != nil)
            // The operation's own settings are its own; the group's are not copied into them.
            #expect(operation.configuration.container == nil)
            expectEqual(operation.qualityOfService, .utility)
            operation.qualityOfService = .userInitiated
            expectEqual(operation.configuration.qualityOfService, .userInitiated)
        }
    }

    @Test("configuration, priorities and QoS are kept; isLongLived is reserved; the default database is private")
    func configuration() async throws {
        try await TestServer.with { server in
            let container = try await server.signedInDevice("dee")
            let zone = try await container.privateCloudDatabase.save(CKRecordZone(zoneName: "Mine"))
            let operation = CKFetchRecordZonesOperation(recordZoneIDs: [zone.zoneID])
            operation.configuration.container = container
            operation.configuration.qualityOfService = .userInitiated
            operation.configuration.isLongLived = true
            operation.queuePriority = .veryHigh
            operation.qualityOfService = .userInitiated
            let zones = Box<[CKRecordZone.ID: CKRecordZone]?>(nil)
            operation.fetchRecordZonesCompletionBlock = { found, _ in zones.update { $0 = found } }
            // No database set: the configuration's container's private database.
            let queue = OperationQueue()
            await withCheckedContinuation { continuation in
                operation.completionBlock = { continuation.resume() }
                queue.addOperation(operation)
            }
            #expect(zones.value?[zone.zoneID] != nil)
            expectEqual(operation.queuePriority, .veryHigh)
        }
    }
}
