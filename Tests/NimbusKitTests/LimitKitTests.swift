import Foundation
import NimbusCore
import NimbusKit
import NimbusServer
import NimbusTestSupport
import Testing

/// The server's limits as an app meets them (issue 17): a user-initiated call gets
/// `requestRateLimited` with `retryAfterSeconds`; a discretionary operation (utility or
/// background quality of service) waits as asked and succeeds; a full quota is `quotaExceeded`.
@Suite("NimbusKit limits")
struct LimitKitTests {
    /// A server on the real clock (budgets refill as time passes) where a user may make 60
    /// requests a minute: one a second once the burst is spent.
    static func oneASecond(_ configuration: inout ServerConfiguration) {
        configuration.service.clock = SystemClock()
        configuration.service.containerLimits[.userRequestsPerMinute] = 60
    }

    /// Spends the device's budget: fetches until one is refused; returns that error.
    static func exhaust(_ database: CKDatabase) async throws -> CKError {
        let id = CKRecord.ID(recordName: "missing")
        for _ in 0..<500 {
            do {
                if case .failure(let error as CKError)? = try await database.records(for: [id])[id], error.code != .unknownItem {
                    return error
                }
            } catch let error as CKError {
                return error
            }
        }
        throw TestFailure("60 requests a minute were never refused")
    }

    @Test("a user-initiated call over budget surfaces requestRateLimited with its delay")
    func userInitiated() async throws {
        try await TestServer.with(configure: Self.oneASecond) { server in
            let database = try await server.signedInDevice("alice").privateCloudDatabase
            let refused = try await Self.exhaust(database)
            expectEqual(refused.code, .requestRateLimited, "\(refused)")
            expectEqual(refused.retryAfterSeconds, 1)
            #expect(refused.localizedDescription.contains("userRequestsPerMinute"))
        }
    }

    @Test("a discretionary operation waits retryAfterSeconds and succeeds")
    func discretionary() async throws {
        try await TestServer.with(configure: Self.oneASecond) { server in
            let database = try await server.signedInDevice("alice").privateCloudDatabase
            let saved = try await database.save(CKRecord(recordType: "Note", recordID: CKRecord.ID(recordName: "n1")))
            // On a loaded machine a second can pass between spending the budget and the
            // operation's first request, and the budget refills: then the operation had no
            // reason to wait. It must wait, and succeed, in one of three tries.
            var waited = false
            for _ in 0..<3 where !waited {
                _ = try await Self.exhaust(database)
                let operation = CKFetchRecordsOperation(recordIDs: [saved.recordID])
                operation.configuration.qualityOfService = .utility
                let started = ContinuousClock.now
                let outcome = Box<Result<Void, any Error>?>(nil)
                operation.fetchRecordsResultBlock = { result in outcome.update { $0 = result } }
                await runOperation(operation, on: database)
                if case .failure(let error)? = outcome.value { Issue.record("the operation failed: \(error)") }
                #expect(outcome.value != nil)
                waited = ContinuousClock.now - started >= .milliseconds(500)
            }
            #expect(waited, "it did not wait for the budget")
        }
    }

    @Test("a save past the quota is quotaExceeded and writes nothing")
    func quota() async throws {
        try await TestServer.with { server in
            let database = try await server.signedInDevice("alice").privateCloudDatabase
            try await server.service.setLimits(container: TestServer.container, [.privateDatabaseBytes: 10])
            let record = CKRecord(recordType: "Note", recordID: CKRecord.ID(recordName: "n1"))
            record["text"] = "more than ten bytes"
            let error = await expectCKError(.quotaExceeded) { _ = try await database.save(record) }
            expectEqual(error?.localizedDescription.contains("delete records to make room"), true)
            await expectCKError(.unknownItem) { _ = try await database.record(for: record.recordID) }
        }
    }
}
