import Foundation
import NimbusSQLite
import NimbusStorage
import NimbusTestSupport
import NimbusWire
import Testing

/// A store that fails for a while: clients get `TRY_AGAIN_LATER` with `retryAfter`, nothing is
/// half-written, and the server serves again as soon as the store does, without a restart.
@Suite struct StorageFaultTests {
    final class Holder: @unchecked Sendable {
        private let lock = NSLock()
        private var value: FaultyStorage?
        var storage: FaultyStorage { lock.withLock { value! } }
        func set(_ storage: FaultyStorage) { lock.withLock { value = storage } }
    }

    @Test func aFailingStoreAnswersTryAgainLaterWritesNothingAndRecovers() async throws {
        let holder = Holder()
        let sqlite = SQLiteStorage.opener(synchronous: .normal)
        try await TestServer.with(configure: { configuration in
            configuration.storage = StorageOpener(description: sqlite.description) { directory in
                let faulty = FaultyStorage(try await sqlite.open(directory))
                holder.set(faulty)
                return faulty
            }
        }) { server in
            let alice = try await server.user("alice")
            let faulty = holder.storage
            func expectTryAgain(_ response: APIResponse, after seconds: Int64) {
                expectEqual(response.status, 503, "\(response.text)")
                expectEqual(response.json["serverErrorCode"], "TRY_AGAIN_LATER")
                expectEqual(response.json["retryAfter"], .int(seconds))
                expectEqual(response.json["reason"]?.stringValue?.contains("nothing was written"), true)
                #expect(!response.text.contains("disk"), "storage details stay in the log")
            }

            // The store is gone for one write.
            faulty.failWrites([.unavailable("disk full")])
            expectTryAgain(try await alice.modify([Op.create("a")]), after: 5)
            try await expectEqual(alice.lookup(["a"]).records.first?.errorCode, "NOT_FOUND")

            // Collisions past RetryingStorage's bound.
            faulty.failWrites(Array(repeating: .serializationFailure("collision"), count: 5))
            expectTryAgain(try await alice.modify([Op.create("a")]), after: 1)
            try await expectEqual(alice.lookup(["a"]).records.first?.errorCode, "NOT_FOUND")

            // A few collisions are absorbed: the client never sees them.
            faulty.failWrites(Array(repeating: .serializationFailure("collision"), count: 3))
            let saved = try await alice.modify([Op.create("a")])
            #expect(saved.status == 200 && saved.records.first?.errorCode == nil, "\(saved.text)")

            // A query while the store is busy.
            faulty.failScans([.busy("locked")])
            let query: JSON = ["query": ["recordType": "Note"]]
            expectTryAgain(try await alice.post("private", "records/query", query), after: 1)
            // And the store is back: no restart needed.
            try await expectEqual(alice.post("private", "records/query", query).records.count, 1)
        }
    }
}
