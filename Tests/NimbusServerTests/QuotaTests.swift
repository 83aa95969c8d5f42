import Foundation
import GRDB
import NimbusCore
import NimbusServer
import NimbusStorage
import NimbusTestSupport
import NimbusWire
import Testing

/// Quotas (issue 17): the bytes of live records per database, counted in the write's own
/// transaction; a save that would pass the quota by one byte writes nothing, deletions free
/// space, and batches fail whole (atomic) or item by item.
@Suite struct QuotaTests {
    /// The caller's private database as `users/caller` reports it: (used, quota).
    static func privateUsage(_ client: APIClient) async throws -> (used: Int64, quota: Int64) {
        let caller = try await client.post("private", "users/caller", [:])
        guard let used = caller.json["quota"]?["usedBytes"]?.int64Value, let quota = caller.json["quota"]?["quotaBytes"]?.int64Value
        else { throw TestFailure("users/caller has no quota: \(caller.text)") }
        return (used, quota)
    }

    static func note(_ name: String, _ text: String) -> JSON { Op.create(name, ["text": Op.field(.string(text))]) }

    static func setQuota(_ server: TestServer, _ limit: ContainerLimit, _ bytes: Int64) async throws {
        try await server.service.setLimits(container: TestServer.container, [limit: bytes])
    }

    static func expectQuotaExceeded(_ item: JSON?, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(item?["serverErrorCode"] == "QUOTA_EXCEEDED", "\(String(describing: item))", sourceLocation: sourceLocation)
        #expect(item?["reason"]?.stringValue?.contains("delete records to make room") == true, sourceLocation: sourceLocation)
    }

    @Test func aPrivateDatabaseTakesItsQuotaToTheByteAndNoFurther() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            #expect(try await Self.privateUsage(alice) == (0, ContainerLimit.defaults[.privateDatabaseBytes]!))
            try await expectEqual(alice.modify([Self.note("n1", "twelve bytes")]).status, 200)
            let one = try await Self.privateUsage(alice).used
            // name + type + the stored fields, in bytes
            #expect(one > Int64("n1Note".utf8.count + "twelve bytes".utf8.count))

            // A quota one byte short of a second record of the same size: refused, nothing written.
            try await Self.setQuota(server, .privateDatabaseBytes, 2 * one - 1)
            let refused = try await alice.modify([Self.note("n2", "twelve bytes")])
            #expect(refused.status == 200)  // the default zone: per-item results
            Self.expectQuotaExceeded(refused.records.first)
            try await expectEqual(alice.lookup(["n2"]).records.first?["serverErrorCode"], "NOT_FOUND")
            #expect(try await Self.privateUsage(alice) == (one, 2 * one - 1))

            // At the quota exactly: saved.
            try await Self.setQuota(server, .privateDatabaseBytes, 2 * one)
            try await expectEqual(alice.modify([Self.note("n2", "twelve bytes")]).records.first?["recordName"], "n2")
            try await expectEqual(Self.privateUsage(alice).used, 2 * one)

            // Full: growing a record is refused, shrinking it is not, and a deletion frees its bytes.
            let tag = try await alice.lookup(["n1"]).records.first?["recordChangeTag"]?.stringValue
            let grown = try await alice.modify([Op.update("n1", tag: tag, ["text": Op.field(.string("thirteen byte"))])])
            Self.expectQuotaExceeded(grown.records.first)
            let shrunk = try await alice.modify([Op.update("n1", tag: tag, ["text": Op.field(.string("eleven byte"))])])
            expectEqual(shrunk.records.first?["recordName"], "n1", "\(shrunk.text)")
            try await expectEqual(Self.privateUsage(alice).used, 2 * one - 1)
            try await expectEqual(alice.modify([Op.forceDelete("n2")]).status, 200)
            try await expectEqual(Self.privateUsage(alice).used, one - 1)
            try await expectEqual(alice.modify([Self.note("n3", "twelve bytes")]).records.first?["recordName"], "n3")

            // Each user's private database has its own quota.
            let bob = try await server.user("bob")
            try await expectEqual(Self.privateUsage(bob).used, 0)
            try await expectEqual(bob.modify([Self.note("n1", "twelve bytes")]).records.first?["recordName"], "n1")
        }
    }

    @Test func aBatchThatFitsOnlyInPartWritesNothingWhenAtomicAndItemByItemWhenNot() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            try await expectEqual(alice.createZone("Notes").status, 200)
            try await expectEqual(alice.modify(zone: "Notes", [Self.note("a0", "twelve bytes")]).status, 200)
            let one = try await Self.privateUsage(alice).used
            // Room for two more records of that size.
            try await Self.setQuota(server, .privateDatabaseBytes, 3 * one)

            let batch = ["a1", "a2", "a3"].map { Self.note($0, "twelve bytes") }
            let atomic = try await alice.modify(zone: "Notes", batch)
            expectEqual(atomic.status, 200)
            let codes = atomic.records.map { $0["serverErrorCode"]?.stringValue }
            expectEqual(codes, ["ATOMIC_ERROR", "ATOMIC_ERROR", "QUOTA_EXCEEDED"], "\(atomic.text)")
            try await expectEqual(Self.privateUsage(alice).used, one)
            let absent = try await alice.lookup(zone: "Notes", ["a1", "a2", "a3"]).records.map { $0["serverErrorCode"]?.stringValue }
            expectEqual(absent, ["NOT_FOUND", "NOT_FOUND", "NOT_FOUND"])

            let separate = try await alice.modify(zone: "Notes", atomic: false, batch)
            expectEqual(separate.records.map { $0["serverErrorCode"]?.stringValue }, [nil, nil, "QUOTA_EXCEEDED"], "\(separate.text)")
            try await expectEqual(Self.privateUsage(alice).used, 3 * one)

            // Deleting the zone frees what its records held.
            try await expectEqual(alice.deleteZone("Notes").status, 200)
            try await expectEqual(Self.privateUsage(alice).used, 0)
        }
    }

    @Test func thePublicQuotaGrowsWithEachUserWhoJoins() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let baseline = try await server.service.publicUsage(container: TestServer.container, environment: .development)
            // Alice's own Users record, made when she joined.
            expectEqual(baseline.usedBytes, Int64(33 + "Users".utf8.count + "{}".utf8.count))
            try await expectEqual(alice.modify("public", [Self.note("p1", "twelve bytes")]).status, 200)
            let afterOne = try await server.service.publicUsage(container: TestServer.container, environment: .development)
            let one = afterOne.usedBytes - baseline.usedBytes

            // No base quota; each member brings room for their Users record and one note.
            try await Self.setQuota(server, .publicDatabaseBytes, 0)
            try await Self.setQuota(server, .publicBytesPerUser, baseline.usedBytes + one)
            Self.expectQuotaExceeded(try await alice.modify("public", [Self.note("p2", "twelve bytes")]).records.first)

            // Bob joins: the quota grows by his allowance (counted within the caches' 2 s).
            let bob = try await server.user("bob")
            server.clock.advance(milliseconds: 3_000)
            let grown = try await server.service.publicUsage(container: TestServer.container, environment: .development)
            expectEqual(grown.quotaBytes, 2 * (baseline.usedBytes + one))
            try await expectEqual(alice.modify("public", [Self.note("p2", "twelve bytes")]).records.first?["recordName"], "p2")
            // One user filling the public database fills it for everyone.
            Self.expectQuotaExceeded(try await bob.modify("public", [Self.note("p3", "twelve bytes")]).records.first)
            // The private databases are counted apart.
            try await expectEqual(bob.modify([Self.note("p3", "twelve bytes")]).records.first?["recordName"], "p3")
        }
    }

    /// A store from before quotas (SQLite v17) has its usage counted when it is upgraded.
    @Test(.enabled(if: TestStorage.isSQLiteFile, "rewrites the SQLite file"))
    func anUpgradedStoreCountsWhatItHeldBefore() async throws {
        let first = try await TestServer.start()
        let alice = try await first.user("alice")
        try await expectEqual(alice.createZone("Notes").status, 200)
        try await expectEqual(alice.modify([Self.note("n1", "twelve bytes")]).status, 200)
        try await expectEqual(alice.modify(zone: "Notes", [Self.note("n2", "a longer text here")]).status, 200)
        try await expectEqual(alice.modify([Self.note("gone", "deleted")]).status, 200)
        try await expectEqual(alice.modify([Op.forceDelete("gone")]).status, 200)
        let counted = try await Self.privateUsage(alice).used
        let upgraded = try await first.restarted { dataDirectory in
            let queue = try DatabaseQueue(path: dataDirectory + "/nimbus.sqlite")
            try await queue.write { db in
                try db.execute(
                    sql: """
                        ALTER TABLE databases DROP COLUMN used_bytes;
                        ALTER TABLE container_settings DROP COLUMN limits;
                        DELETE FROM grdb_migrations WHERE identifier = 'v18-limits-and-usage';
                        """)
            }
            try queue.close()
        }
        do {
            try await expectEqual(Self.privateUsage(alice).used, counted)
            try await upgraded.stop()
        } catch {
            try? await upgraded.stop()
            throw error
        }
    }
}
