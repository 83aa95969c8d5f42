import Foundation
import GRDB
import NimbusTestSupport
import NimbusWire
import Testing

/// INT64 values past 2^53 (where doubles stop holding every integer) stay exact in filters,
/// sorts and continuation markers, also in a store upgraded from when the index held doubles.
@Suite struct IntegerPrecisionTests {
    static let twoTo53: Int64 = 9_007_199_254_740_992

    /// Neighbours a double cannot tell apart, and the ends of the range.
    static let values: [(String, Int64)] = [
        ("min", .min), ("lo", twoTo53), ("hi", twoTo53 + 1), ("higher", twoTo53 + 3), ("max", .max),
    ]

    func seed(_ client: APIClient) async throws {
        let saved = try await client.modify(
            Self.values.map { Op.create($0.0, type: "Item", ["big": Op.field(.int($0.1)), "stamp": Op.field(.int($0.1 / 1_000), "TIMESTAMP")]) })
        #expect(saved.records.allSatisfy { $0.errorCode == nil }, "\(saved.text)")
    }

    func names(_ client: APIClient, _ filters: [JSON], sort: String = "big", ascending: Bool = true) async throws -> [String] {
        let response = try await client.post(
            "private", "records/query", QueryTests.query(filters: filters, sorts: [QueryTests.sort(sort, ascending: ascending)]))
        expectEqual(response.status, 200, "\(response.text)")
        return response.records.compactMap { $0["recordName"]?.stringValue }
    }

    /// Every record in `big` order, one per page, following continuation markers.
    func pagedOneByOne(_ client: APIClient, ascending: Bool) async throws -> [String] {
        var seen: [String] = []
        var marker: String?
        repeat {
            var extra: JSONObject = ["resultsLimit": 1]
            if let marker { extra["continuationMarker"] = .string(marker) }
            let page = try await client.post(
                "private", "records/query", QueryTests.query(sorts: [QueryTests.sort("big", ascending: ascending)], extra: extra))
            expectEqual(page.status, 200, "\(page.text)")
            seen += page.records.compactMap { $0["recordName"]?.stringValue }
            marker = page.json["continuationMarker"]?.stringValue
        } while marker != nil && seen.count < 10
        return seen
    }

    func expectExact(_ client: APIClient) async throws {
        let f = QueryTests.f
        try await expectEqual(names(client, [f("EQUALS", "big", .int(Self.twoTo53 + 1), nil, nil)]), ["hi"])
        try await expectEqual(names(client, [f("EQUALS", "big", .int(Self.twoTo53), nil, nil)]), ["lo"])
        try await expectEqual(names(client, [f("NOT_EQUALS", "big", .int(Self.twoTo53), nil, nil)]), ["min", "hi", "higher", "max"])
        try await expectEqual(names(client, [f("GREATER_THAN", "big", .int(Self.twoTo53), nil, nil)]), ["hi", "higher", "max"])
        try await expectEqual(names(client, [f("LESS_THAN_OR_EQUALS", "big", .int(Self.twoTo53 + 1), nil, nil)]), ["min", "lo", "hi"])
        try await expectEqual(names(client, [f("IN", "big", .array([.int(Self.twoTo53 + 3), .int(.max)]), nil, nil)]), ["higher", "max"])
        // A double filter on an INT64 field compares by exact value too: 2^53 as a double is lo.
        try await expectEqual(names(client, [f("EQUALS", "big", .double(9_007_199_254_740_992.0), "INT64", nil)]), ["lo"])
        try await expectEqual(names(client, [], ascending: false), ["max", "higher", "hi", "lo", "min"])
        try await expectEqual(pagedOneByOne(client, ascending: true), ["min", "lo", "hi", "higher", "max"])
        try await expectEqual(pagedOneByOne(client, ascending: false), ["max", "higher", "hi", "lo", "min"])
    }

    @Test func integersPast2To53KeepEveryDigitInFiltersSortsAndMarkers() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            try await seed(alice)
            try await expectExact(alice)
        }
    }

    /// A store whose index entries were written as doubles (before migration v8) is upgraded:
    /// the column loses its REAL type and every record's entries are written again at start.
    @Test(.enabled(if: TestStorage.isSQLiteFile, "rewrites the SQLite file"))
    func anUpgradedStoreIndexesItsIntegersExactlyAgain() async throws {
        let first = try await TestServer.start()
        let alice = try await first.user("alice")
        try await seed(alice)
        // Put the file back as v7 left it: `num REAL`, every number a rounded double.
        let upgraded = try await first.restarted { dataDirectory in
            let queue = try DatabaseQueue(path: dataDirectory + "/nimbus.sqlite")
            try await queue.write { db in
                // Entries spelled out by name (before v34), with v7's `num REAL`.
                try db.execute(sql: EntryKeyMigrationTests.entriesBeforeV34(numColumn: "num REAL"))
                try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier = 'v8-exact-integers'")
                let collapsed = try Int.fetchOne(
                    db, sql: "SELECT COUNT(*) FROM field_index WHERE field = 'big' AND num = ?", arguments: [Self.twoTo53])
                expectEqual(collapsed, 2, "the v7 shape rounds 2^53 + 1 onto 2^53")
            }
            try queue.close()
        }
        do {
            // Sessions survive a restart: alice's client still works.
            try await expectExact(alice)
            try await upgraded.stop()
        } catch {
            try? await upgraded.stop()
            throw error
        }
    }
}
