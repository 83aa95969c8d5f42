import Foundation
import NimbusPostgres
import NimbusStorage
import NimbusTestSupport
import Synchronization
import Testing

/// A node given a primary and its standby (libpq's several-host URL with
/// `target_session_attrs=read-write`) uses the primary, and when the primary dies and the
/// standby is promoted it follows without a restart: requests in the gap get `TRY_AGAIN_LATER`
/// with `retryAfter`, and every write it acknowledged is there afterwards (the pair replicates
/// synchronously). The clusters are this suite's own (`PostgresStandbyPair`), killed
/// and promoted for real; one pair at a time, so the suite runs serialized.
@Suite(.serialized, .enabled(if: PostgresTestCluster.url != nil))
struct PostgresFailoverTests {
    static let port = 25431

    @Test func aNodeUsesTheFirstHostThatTakesWritesAndSaysWhyWhenNoneDoes() async throws {
        try await PostgresStandbyPair.with(primaryPort: Self.port) { pair in
            // The standby written first: the node passes over it to the primary.
            let primary = try pair.primary
            let standbyFirst = try PostgresLocation(
                url: "postgres://postgres@127.0.0.1:\(pair.standbyPort),127.0.0.1:\(pair.primaryPort)/postgres?sslmode=disable&target_session_attrs=read-write")
            let storage = try await PostgresStorage(standbyFirst, deadline: .seconds(5), maximumConnections: 2)
            expectEqual(storage.serverHost, primary.endpoints[0])
            await storage.close()
            // The standby alone, asked for writes: refused with what each host said.
            var standbyOnly = try pair.standby
            standbyOnly.sessionAttributes = .readWrite
            await #expect {
                _ = try await PostgresStorage(standbyOnly, deadline: .seconds(5), maximumConnections: 2)
            } throws: { error in
                guard case StorageError.unavailable(let detail) = error else { return false }
                return detail.contains("127.0.0.1:\(pair.standbyPort) is a standby")
            }
            // Without session attributes a standby is a server like any other (libpq's `any`),
            // and its refusal to write is an unavailable server, not an engine error.
            let any = try pair.standby
            #expect(!any.followsPrimary)
            await #expect {
                _ = try await PostgresStorage(any, deadline: .seconds(5), maximumConnections: 2)
            } throws: { error in
                guard case StorageError.unavailable(let detail) = error else { return false }
                return detail.contains("takes no writes")
            }
        }
    }

    @Test func aNodeFollowsThePromotedStandbyAndLosesNoAcknowledgedWrite() async throws {
        try await PostgresStandbyPair.with(primaryPort: Self.port) { pair in
            try await PostgresTestCluster.execute("CREATE DATABASE nimbus_failover", on: try pair.primary)
            var pairLocation = try pair.location
            pairLocation.database = "nimbus_failover"
            let location = pairLocation
            try await TestServer.with(configure: { configuration in
                configuration.storage = StorageOpener(description: { _ in "PostgreSQL pair \(location)" }) { _ in
                    UnitOfWorkDriver(PostgresCoarseStorage(try await PostgresStorage(location, deadline: .seconds(2), maximumConnections: 4)))
                }
            }) { server in
                let alice = try await server.user("alice")
                let outcomes = Outcomes()
                for index in 0..<10 {
                    let response = try await alice.modify([Op.create("before-\(index)")])
                    #expect(response.status == 200 && response.records.first?.errorCode == nil, "\(response.text)")
                    outcomes.acknowledged("before-\(index)")
                }
                // One writer keeps writing through the failover, a new record each time.
                let writer = Task {
                    var index = 0
                    while !Task.isCancelled {
                        index += 1
                        let name = "during-\(index)"
                        let response: APIResponse
                        do {
                            response = try await alice.modify([Op.create(name)])
                        } catch {
                            if !Task.isCancelled { outcomes.other("no response for \(name): \(error)") }
                            continue
                        }
                        if response.status == 200, response.records.first?.errorCode == nil {
                            outcomes.acknowledged(name)
                        } else if response.status == 503, response.errorCode == "TRY_AGAIN_LATER",
                            response.json["retryAfter"]?.int64Value ?? 0 > 0
                        {
                            outcomes.refused()
                            try? await Task.sleep(for: .milliseconds(100))
                        } else {
                            outcomes.other("\(name): \(response.status) \(response.text)")
                        }
                    }
                }
                while outcomes.count < 20 { try await Task.sleep(for: .milliseconds(20)) }
                try await pair.run("kill-primary")
                let killed = ContinuousClock.now
                let beforePromotion = outcomes.count
                try await Task.sleep(for: .milliseconds(500))
                try await pair.run("promote")
                // Writes are acknowledged again, on the promoted standby, within seconds.
                while outcomes.acknowledgedSince(beforePromotion) < 10, ContinuousClock.now - killed < .seconds(30) {
                    try await Task.sleep(for: .milliseconds(50))
                }
                writer.cancel()
                _ = await writer.value
                let gap = ContinuousClock.now - killed
                #expect(outcomes.acknowledgedSince(beforePromotion) >= 10, "no writes after the promotion within \(gap)")
                #expect(outcomes.refusals > 0, "the gap's requests were answered TRY_AGAIN_LATER")
                #expect(outcomes.others.isEmpty, "every answer was a save or TRY_AGAIN_LATER: \(outcomes.others.prefix(3))")
                // Every acknowledged write is on the new primary.
                let names = outcomes.names
                for chunk in stride(from: 0, to: names.count, by: 100).map({ Array(names[$0..<min($0 + 100, names.count)]) }) {
                    let found = try await alice.lookup(chunk)
                    expectEqual(found.status, 200, "\(found.text)")
                    let missing = found.records.filter { $0.errorCode != nil }.compactMap { $0["recordName"]?.stringValue }
                    #expect(missing.isEmpty, "acknowledged and lost: \(missing)")
                }
                // The new primary is the standby's host.
                let rows = try await PostgresTestCluster.rows("SELECT pg_is_in_recovery()::text", on: try pair.standby)
                expectEqual(rows.first?.first, "false")
            }
        }
    }

    /// What the writer saw, in order.
    final class Outcomes: Sendable {
        private struct State {
            var names: [String] = []
            var answers = 0
            var acknowledgedAt: [Int] = []
            var refusals = 0
            var others: [String] = []
        }
        private let state = Mutex(State())
        func acknowledged(_ name: String) {
            state.withLock {
                $0.names.append(name)
                $0.acknowledgedAt.append($0.answers)
                $0.answers += 1
            }
        }
        func refused() { state.withLock { $0.refusals += 1; $0.answers += 1 } }
        func other(_ text: String) { state.withLock { $0.others.append(text); $0.answers += 1 } }
        var count: Int { state.withLock { $0.answers } }
        var names: [String] { state.withLock { $0.names } }
        var refusals: Int { state.withLock { $0.refusals } }
        var others: [String] { state.withLock { $0.others } }
        func acknowledgedSince(_ answer: Int) -> Int { state.withLock { $0.acknowledgedAt.filter { $0 > answer }.count } }
    }
}
