import NimbusTestSupport
import NimbusWire
import Testing

@Suite struct QueryTests {
    static func filter(_ comparator: String, _ field: String, _ value: JSON, type: String? = nil, distance: Double? = nil) -> JSON {
        var object: JSONObject = ["comparator": .string(comparator), "fieldName": .string(field), "fieldValue": Op.field(value, type)]
        if let distance { object["distance"] = .double(distance) }
        return .object(object)
    }

    /// `filter` under a short name, for tables of cases.
    static func f(_ comparator: String, _ field: String, _ value: JSON, type: String? = nil, distance: Double? = nil) -> JSON {
        filter(comparator, field, value, type: type, distance: distance)
    }

    static func query(_ type: String = "Item", filters: [JSON] = [], sorts: [JSON] = [], extra: JSONObject = [:]) -> JSON {
        var body = extra
        body["query"] = .object(["recordType": .string(type), "filterBy": .array(filters), "sortBy": .array(sorts)])
        return .object(body)
    }

    static func sort(_ field: String, ascending: Bool = true) -> JSON {
        .object(["fieldName": .string(field), "ascending": .bool(ascending)])
    }

    func names(_ response: APIResponse) -> [String] {
        response.records.compactMap { $0["recordName"]?.stringValue }
    }

    /// Five items with every kind of field, in the default zone of the private database.
    func seed(_ client: APIClient) async throws {
        let items: [(String, JSONObject)] = [
            ("a", ["name": Op.field("Apple pie"), "price": Op.field(3), "weight": Op.field(1.5), "tags": Op.field(["sweet", "baked"]),
                   "sizes": Op.field([1, 2]), "when": Op.field(1_000, "TIMESTAMP"), "place": Op.field(["latitude": 37.3349, "longitude": -122.0090]),
                   "owner": Op.field(["recordName": "shop1", "action": "NONE"], "REFERENCE"), "notes": Op.field("Crème brûlée style, très bon")]),
            ("b", ["name": Op.field("Banana bread"), "price": Op.field(5), "weight": Op.field(2.0), "tags": Op.field(["sweet"]),
                   "sizes": Op.field([2, 3]), "when": Op.field(2_000, "TIMESTAMP"), "place": Op.field(["latitude": 37.7749, "longitude": -122.4194]),
                   "owner": Op.field(["recordName": "shop2", "action": "NONE"], "REFERENCE"), "notes": Op.field("banana and walnut")]),
            ("c", ["name": Op.field("Carrot cake"), "price": Op.field(5), "weight": Op.field(0.5), "tags": Op.field(["baked", "vegetable"]),
                   "sizes": Op.field([3]), "when": Op.field(3_000, "TIMESTAMP"), "place": Op.field(["latitude": 40.7128, "longitude": -74.0060]),
                   "owner": Op.field(["recordName": "shop1", "action": "NONE"], "REFERENCE"), "notes": Op.field("CREME cheese frosting")]),
            ("d", ["name": Op.field("Date squares"), "price": Op.field(8), "weight": Op.field(1.0), "tags": Op.field(["sweet", "baked", "fruit"]),
                   "sizes": Op.field([1]), "when": Op.field(4_000, "TIMESTAMP"), "place": Op.field(["latitude": 37.3318, "longitude": -122.0312]),
                   "owner": Op.field(["recordName": "shop3", "action": "NONE"], "REFERENCE"), "notes": Op.field("dates, oats")]),
            ("e", ["name": Op.field("apricot jam"), "price": Op.field(2), "tags": Op.field(["fruit"]), "sizes": Op.field([4]),
                   "when": Op.field(5_000, "TIMESTAMP"), "notes": Op.field("no bake")]),
        ]
        let saved = try await client.modify(items.map { Op.create($0.0, type: "Item", $0.1) })
        #expect(saved.records.allSatisfy { $0.errorCode == nil }, "\(saved.text)")
    }

    func run(_ client: APIClient, _ filters: [JSON], sorts: [JSON] = [Self.sort("___recordID")]) async throws -> [String] {
        let response = try await client.post("private", "records/query", Self.query(filters: filters, sorts: sorts))
        expectEqual(response.status, 200, "\(response.text)")
        return names(response)
    }

    @Test func everyComparatorSelectsTheRightRecords() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            try await seed(alice)
            // Scalars: numbers, doubles, timestamps, strings, references.
            try await expectEqual(run(alice, [Self.f("EQUALS", "price", 5)]), ["b", "c"])
            try await expectEqual(run(alice, [Self.f("NOT_EQUALS", "price", 5)]), ["a", "d", "e"])
            try await expectEqual(run(alice, [Self.f("LESS_THAN", "price", 5)]), ["a", "e"])
            try await expectEqual(run(alice, [Self.f("LESS_THAN_OR_EQUALS", "price", 5)]), ["a", "b", "c", "e"])
            try await expectEqual(run(alice, [Self.f("GREATER_THAN", "weight", 1.0)]), ["a", "b"])
            try await expectEqual(run(alice, [Self.f("GREATER_THAN_OR_EQUALS", "when", 4_000, type: "TIMESTAMP")]), ["d", "e"])
            try await expectEqual(run(alice, [Self.f("LESS_THAN", "name", "C")]), ["a", "b"])
            try await expectEqual(run(alice, [Self.f("EQUALS", "owner", ["recordName": "shop1"], type: "REFERENCE")]), ["a", "c"])
            try await expectEqual(run(alice, [Self.f("IN", "price", [2, 8])]), ["d", "e"])
            try await expectEqual(run(alice, [Self.f("NOT_IN", "price", [2, 8])]), ["a", "b", "c"])
            try await expectEqual(run(alice, [Self.f("IN", "name", ["Apple pie", "nothing"])]), ["a"])
            try await expectEqual(run(alice, [Self.f("BEGINS_WITH", "name", "Ap")]), ["a"])
            try await expectEqual(run(alice, [Self.f("NOT_BEGINS_WITH", "name", "Ap")]), ["b", "c", "d", "e"])
            // Lists.
            try await expectEqual(run(alice, [Self.f("LIST_CONTAINS", "tags", "fruit")]), ["d", "e"])
            try await expectEqual(run(alice, [Self.f("NOT_LIST_CONTAINS", "tags", "sweet")]), ["c", "e"])
            try await expectEqual(run(alice, [Self.f("LIST_CONTAINS_ANY", "tags", ["vegetable", "fruit"])]), ["c", "d", "e"])
            try await expectEqual(run(alice, [Self.f("NOT_LIST_CONTAINS_ANY", "tags", ["vegetable", "fruit"])]), ["a", "b"])
            try await expectEqual(run(alice, [Self.f("LIST_CONTAINS_ALL", "tags", ["sweet", "baked"])]), ["a", "d"])
            try await expectEqual(run(alice, [Self.f("NOT_LIST_CONTAINS_ALL", "tags", ["sweet", "baked"])]), ["b", "c", "e"])
            try await expectEqual(run(alice, [Self.f("LIST_CONTAINS", "sizes", 3)]), ["b", "c"])
            try await expectEqual(run(alice, [Self.f("LIST_MEMBER_BEGINS_WITH", "tags", "veg")]), ["c"])
            try await expectEqual(run(alice, [Self.f("NOT_LIST_MEMBER_BEGINS_WITH", "tags", "sw")]), ["c", "e"])
            // Locations: within 10 km of Apple Park.
            let park: JSON = ["latitude": 37.3349, "longitude": -122.0090]
            try await expectEqual(run(alice, [Self.f("NEAR", "place", park, distance: 10_000)]), ["a", "d"])
            try await expectEqual(run(alice, [Self.f("NEAR", "place", park, distance: 100_000)]), ["a", "b", "d"])
            // Tokens: case and diacritics folded, on one field or on all.
            try await expectEqual(run(alice, [Self.f("CONTAINS_ALL_TOKENS", "notes", "creme")]), ["a", "c"])
            try await expectEqual(run(alice, [Self.f("CONTAINS_ALL_TOKENS", "notes", "Crème Brûlée")]), ["a"])
            try await expectEqual(run(alice, [Self.f("CONTAINS_ANY_TOKENS", "notes", "walnut oats")]), ["b", "d"])
            let allFields: JSON = ["comparator": "CONTAINS_ALL_TOKENS", "fieldValue": ["value": "bread"]]
            try await expectEqual(run(alice, [allFields]), ["b"])
            // System fields and AND-ed filters.
            let byName: JSON = ["comparator": "EQUALS", "systemFieldName": "recordName", "fieldValue": ["value": ["recordName": "c"]]]
            try await expectEqual(run(alice, [byName]), ["c"])
            try await expectEqual(run(alice, [Self.f("LIST_CONTAINS", "tags", "sweet"), Self.f("GREATER_THAN", "price", 3)]), ["b", "d"])
            try await expectEqual(run(alice, []), ["a", "b", "c", "d", "e"])
        }
    }

    @Test func sortsByOneOrMoreKeysAndByDistance() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            try await seed(alice)
            try await expectEqual(run(alice, [], sorts: [Self.sort("price", ascending: false), Self.sort("name")]), ["d", "b", "c", "a", "e"])
            try await expectEqual(run(alice, [], sorts: [Self.sort("price"), Self.sort("weight", ascending: false)]), ["a", "b", "c", "d"])
            let byCreation: JSON = ["systemFieldName": "createdTimestamp", "ascending": false]
            try await expectEqual(run(alice, [Self.filter("LESS_THAN", "price", 4)], sorts: [byCreation, Self.sort("___recordID")]).count, 2)
            let nearest: JSON = ["fieldName": "place", "relativeLocation": ["value": ["latitude": 37.7749, "longitude": -122.4194]]]
            // Date squares (d) lies a little west of Apple Park (a), so nearer San Francisco.
            try await expectEqual(run(alice, [], sorts: [nearest]), ["b", "d", "a", "c"])
        }
    }

    @Test func pagesWithCursorsStayCorrectWhileRecordsAreWritten() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            _ = try await alice.modify((0..<30).map { Op.create(String(format: "r%02d", $0), type: "Item", ["n": Op.field(.int(Int64($0)))]) })
            var seen: [String] = []
            var marker: String?
            var pages = 0
            repeat {
                var extra: JSONObject = ["resultsLimit": 7]
                if let marker { extra["continuationMarker"] = .string(marker) }
                let page = try await alice.post("private", "records/query", Self.query(sorts: [Self.sort("n")], extra: extra))
                expectEqual(page.status, 200, "\(page.text)")
                seen += names(page)
                marker = page.json["continuationMarker"]?.stringValue
                pages += 1
                if pages == 2 {
                    // Between pages: a new record sorts before the cursor, one after, and one already seen changes.
                    _ = try await alice.modify([
                        Op.create("early", type: "Item", ["n": Op.field(-1)]), Op.create("late", type: "Item", ["n": Op.field(100)]),
                        Op.make("forceUpdate", Op.record("r01", type: nil, fields: ["x": Op.field(1)])),
                    ])
                }
            } while marker != nil && pages < 20
            let expected = (0..<30).map { String(format: "r%02d", $0) } + ["late"]
            expectEqual(seen, expected)
            expectEqual(Set(seen).count, seen.count)
        }
    }

    @Test func zoneWideQueriesSearchEveryZone() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            _ = try await alice.createZone("Z1")
            _ = try await alice.createZone("Z2")
            _ = try await alice.modify(zone: "Z1", [Op.create("one", type: "Item", ["k": Op.field(1)])])
            _ = try await alice.modify(zone: "Z2", [Op.create("two", type: "Item", ["k": Op.field(1)])])
            _ = try await alice.modify([Op.create("zero", type: "Item", ["k": Op.field(1)])])
            let wide = try await alice.post("private", "records/query", Self.query(filters: [Self.filter("EQUALS", "k", 1)], extra: ["zoneWide": true]))
            expectEqual(Set(names(wide)), ["zero", "one", "two"])
            let zoned = try await alice.post(
                "private", "records/query", Self.query(filters: [Self.filter("EQUALS", "k", 1)], extra: ["zoneID": ["zoneName": "Z2"]]))
            expectEqual(names(zoned), ["two"])
            expectEqual(zoned.records.first?["zoneID"]?["zoneName"], "Z2")
            // Other users see none of it.
            let bob = try await server.user("bob")
            let theirs = try await bob.post("private", "records/query", Self.query(extra: ["zoneWide": true]))
            #expect(theirs.records.isEmpty)
        }
    }

    @Test func deletedAndUpdatedRecordsLeaveTheIndex() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let saved = try await alice.modify([Op.create("x", type: "Item", ["k": Op.field(1), "t": Op.field("old words")])])
            try await expectEqual(run(alice, [Self.filter("EQUALS", "k", 1)]), ["x"])
            _ = try await alice.modify([Op.update("x", tag: saved.records.first?.changeTag, ["k": Op.field(2), "t": Op.field("new words")])])
            #expect(try await run(alice, [Self.filter("EQUALS", "k", 1)]).isEmpty)
            #expect(try await run(alice, [Self.filter("CONTAINS_ALL_TOKENS", "t", "old")]).isEmpty)
            try await expectEqual(run(alice, [Self.filter("CONTAINS_ALL_TOKENS", "t", "new")]), ["x"])
            _ = try await alice.modify([Op.forceDelete("x")])
            #expect(try await run(alice, [Self.filter("EQUALS", "k", 2)]).isEmpty)
        }
    }

    @Test func productionQueriesNeedTheIndex() async throws {
        try await TestServer.with { server in
            let dev = try await server.user("bob")
            _ = try await dev.modify("public", [Op.create("p", type: "Item", ["k": Op.field(1), "s": Op.field("hello world")])])
            _ = try await server.service.deploySchema(container: TestServer.container)
            let prod = server.client(environment: .production)
            let ok = try await prod.post("public", "records/query", Self.query(filters: [Self.filter("EQUALS", "k", 1)]))
            expectEqual(ok.status, 200, "\(ok.text)")
            // Drop the queryable index of k in production.
            #expect(try await server.service.setFieldIndexes(
                container: TestServer.container, environment: .production, recordType: "Item", field: "k", indexes: 2))
            let refused = try await prod.post("public", "records/query", Self.query(filters: [Self.filter("EQUALS", "k", 1)]))
            expectEqual(refused.status, 400)
            #expect(refused.reason.contains("'k'") && refused.reason.contains("QUERYABLE"))
            #expect(refused.reason.contains("nimbus schema index --environment production --set queryable"))
            // Ranges still work: k is SORTABLE.
            try await expectEqual(prod.post("public", "records/query", Self.query(filters: [Self.filter("GREATER_THAN", "k", 0)])).status, 200)
            // Unknown fields and system fields not declared in production are refused too.
            try await expectEqual(prod.post("public", "records/query", Self.query(filters: [Self.filter("EQUALS", "zzz", 1)])).status, 400)
            try await expectEqual(prod.post("public", "records/query", Self.query(sorts: [["systemFieldName": "createdTimestamp"]])).status, 400)
            // Declaring the system field SORTABLE in production opens it.
            let writer = try await server.user("carol", environment: .production)
            #expect(try await writer.modify("public", [Op.create("p", type: "Item", ["k": Op.field(1)])]).records.first?.errorCode == nil)
            #expect(try await server.service.setFieldIndexes(
                container: TestServer.container, environment: .production, recordType: "Item", field: "___createTime", indexes: 2))
            try await expectEqual(prod.post("public", "records/query", Self.query(sorts: [["systemFieldName": "createdTimestamp"]])).records.count, 1)
            try await expectEqual(prod.post("public", "records/query", Self.query("Nope")).status, 400)
        }
    }

    /// Production records get index entries only for what the schema grants; granting an
    /// index later fills it in for the records already saved, before any query can use it.
    @Test func productionIndexesWhatTheSchemaGrantsAndFillsInNewIndexes() async throws {
        try await TestServer.with { server in
            let dev = try await server.user("bob")
            _ = try await dev.modify("public", [Op.create("d", type: "Item", ["k": Op.field(1), "s": Op.field("hello world")])])
            _ = try await server.service.deploySchema(container: TestServer.container)
            for (field, flags) in [("k", 0), ("s", 0)] {
                #expect(try await server.service.setFieldIndexes(
                    container: TestServer.container, environment: .production, recordType: "Item", field: field, indexes: flags))
            }
            let writer = try await server.user("carol", environment: .production)
            _ = try await writer.modify("public", [
                Op.create("p1", type: "Item", ["k": Op.field(7), "s": Op.field("crème brûlée")]),
                Op.create("p2", type: "Item", ["k": Op.field(8), "s": Op.field("plain words")]),
            ])
            let prod = server.client(environment: .production)
            func found(_ filters: [JSON], sorts: [JSON] = []) async throws -> [String] {
                let answer = try await prod.post("public", "records/query", Self.query(filters: filters, sorts: sorts))
                expectEqual(answer.status, 200, "\(answer.text)")
                return answer.records.compactMap { $0["recordName"]?.stringValue }.sorted()
            }
            // Granting QUERYABLE on k fills in the entries of the records saved without them.
            #expect(try await server.service.setFieldIndexes(
                container: TestServer.container, environment: .production, recordType: "Item", field: "k", indexes: 1))
            try await expectEqual(found([Self.filter("EQUALS", "k", 7)]), ["p1"])
            // So does SEARCHABLE on s, with the same folding as development.
            #expect(try await server.service.setFieldIndexes(
                container: TestServer.container, environment: .production, recordType: "Item", field: "s", indexes: 4))
            try await expectEqual(found([Self.filter("CONTAINS_ALL_TOKENS", "s", "creme")]), ["p1"])
            try await expectEqual(found([Self.filter("CONTAINS_ALL_TOKENS", "s", "words")]), ["p2"])
            // A system field declared in production: every record gets its entry.
            #expect(try await server.service.setFieldIndexes(
                container: TestServer.container, environment: .production, recordType: "Item", field: "___recordID", indexes: 3))
            try await expectEqual(found([Self.filter("EQUALS", "___recordID", "p2")]), ["p2"])
            // Records saved after the grant are indexed as they are saved.
            _ = try await writer.modify("public", [Op.create("p3", type: "Item", ["k": Op.field(7), "s": Op.field("more words")])])
            try await expectEqual(found([Self.filter("EQUALS", "k", 7)]), ["p1", "p3"])
            try await expectEqual(found([Self.filter("CONTAINS_ALL_TOKENS", "s", "words")]), ["p2", "p3"])
            // Development is untouched: every field is indexed there.
            let development = try await dev.post("public", "records/query", Self.query(filters: [Self.filter("CONTAINS_ALL_TOKENS", "s", "hello")]))
            expectEqual(names(development), ["d"])
        }
    }

    /// Production writes sorted pair entries for (QUERYABLE, SORTABLE) field pairs, and an
    /// equality filter with that sort reads them: right order across pages, records that move
    /// between categories or lose the sort field follow, and pairs granted later are filled in.
    @Test func productionEqualityAndSortFollowWritesThroughSortedPairs() async throws {
        try await TestServer.with { server in
            let dev = try await server.user("bob")
            _ = try await dev.modify("public", [
                Op.create("d", type: "Item", ["cat": Op.field("x"), "n": Op.field(1), "rank": Op.field(1)])
            ])
            _ = try await server.service.deploySchema(container: TestServer.container)
            for (field, flags) in [("cat", 1), ("n", 2), ("rank", 0)] {
                #expect(try await server.service.setFieldIndexes(
                    container: TestServer.container, environment: .production, recordType: "Item", field: field, indexes: flags))
            }
            let writer = try await server.user("carol", environment: .production)
            var values: [String: (cat: String, n: Int, rank: Int)] = [:]
            for number in 0..<12 {
                let value = (cat: number % 2 == 0 ? "x" : "y", n: (number * 7) % 12, rank: 11 - number)
                values["p\(number)"] = value
                let saved = try await writer.modify("public", [
                    Op.create("p\(number)", type: "Item", ["cat": Op.field(.string(value.cat)), "n": Op.field(.int(Int64(value.n))), "rank": Op.field(.int(Int64(value.rank)))])
                ])
                expectEqual(saved.status, 200, "\(saved.text)")
            }
            let prod = server.client(environment: .production)
            func listed(_ category: String, by field: String) async throws -> [String] {
                var names: [String] = []
                var marker: JSON?
                repeat {
                    var extra: JSONObject = ["resultsLimit": 2]
                    if let marker { extra["continuationMarker"] = marker }
                    let answer = try await prod.post(
                        "public", "records/query",
                        Self.query(filters: [Self.filter("EQUALS", "cat", .string(category))], sorts: [Self.sort(field, ascending: false)], extra: extra))
                    expectEqual(answer.status, 200, "\(answer.text)")
                    names += self.names(answer)
                    marker = answer.json["continuationMarker"]
                } while marker != nil && names.count < 100
                return names
            }
            func expected(_ category: String, by key: KeyPath<(cat: String, n: Int, rank: Int), Int>) -> [String] {
                values.filter { $0.value.cat == category }.sorted { $0.value[keyPath: key] > $1.value[keyPath: key] }.map(\.key)
            }
            try await expectEqual(listed("x", by: "n"), expected("x", by: \.n))
            try await expectEqual(listed("y", by: "n"), expected("y", by: \.n))

            // p0 moves to y with the largest n; p1 is deleted.
            let moved = try await writer.modify("public", [
                Op.make("forceUpdate", Op.record("p0", type: "Item", fields: ["cat": Op.field("y"), "n": Op.field(50), "rank": Op.field(-1)])),
                Op.forceDelete("p1"),
            ])
            expectEqual(moved.status, 200, "\(moved.text)")
            values["p0"] = (cat: "y", n: 50, rank: -1)
            values["p1"] = nil
            try await expectEqual(listed("x", by: "n"), expected("x", by: \.n))
            try await expectEqual(listed("y", by: "n").first, "p0")
            try await expectEqual(listed("y", by: "n"), expected("y", by: \.n))

            // rank becomes SORTABLE: the pair (cat, rank) is filled in for the records saved before.
            #expect(try await server.service.setFieldIndexes(
                container: TestServer.container, environment: .production, recordType: "Item", field: "rank", indexes: 2))
            try await expectEqual(listed("x", by: "rank"), expected("x", by: \.rank))
            try await expectEqual(listed("y", by: "rank"), expected("y", by: \.rank))
        }
    }

    @Test func badQueriesAreBadRequests() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            try await seed(alice)
            let cases: [(JSON, String)] = [
                (Self.query(filters: [Self.f("SIMILAR_TO", "price", 1)]), "not a comparator"),
                (Self.query(filters: [Self.f("EQUALS", "price", "five")]), "fieldValue.value"),
                (Self.query(filters: [Self.f("LESS_THAN", "tags", "x")]), "STRING_LIST"),
                (Self.query(filters: [Self.f("LIST_CONTAINS", "price", 5)]), "list fields"),
                (Self.query(filters: [Self.f("NEAR", "place", ["latitude": 1, "longitude": 2])]), "distance"),
                (Self.query(filters: [Self.f("NEAR", "price", ["latitude": 1, "longitude": 2], distance: 5)]), "NEAR"),
                (Self.query(filters: [Self.f("BEGINS_WITH", "price", "1")]), "BEGINS_WITH"),
                (Self.query(filters: [Self.f("IN", "price", 5)]), "list of values"),
                (Self.query(filters: [Self.f("CONTAINS_ALL_TOKENS", "price", "x")]), "STRING"),
                (Self.query(filters: [Self.f("CONTAINS_ALL_TOKENS", "notes", "!!!")]), "no words"),
                (Self.query(filters: [["comparator": "EQUALS", "systemFieldName": "bogus", "fieldValue": ["value": 1]]]), "system field"),
                (Self.query(sorts: [Self.sort("place")]), "relativeLocation"),
                (Self.query(sorts: [Self.sort("tags")]), "list field"),
                (.object(["query": ["filterBy": []]]), "recordType"),
                (Self.query(extra: ["continuationMarker": "garbage!"]), "garbled"),
            ]
            for (body, fragment) in cases {
                let response = try await alice.post("private", "records/query", body)
                expectEqual(response.status, 400, "\(body.text) → \(response.text)")
                #expect(response.reason.contains(fragment), "\(body.text) → \(response.reason)")
            }
        }
    }

    @Test func cursorsAreBoundToTheirQuery() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            try await seed(alice)
            let first = try await alice.post("private", "records/query", Self.query(sorts: [Self.sort("name")], extra: ["resultsLimit": 2]))
            let marker = try #require(first.json["continuationMarker"]?.stringValue)
            let other = try await alice.post(
                "private", "records/query", Self.query(sorts: [Self.sort("price")], extra: ["resultsLimit": 2, "continuationMarker": .string(marker)]))
            expectEqual(other.status, 400)
            #expect(other.reason.contains("another query"))
            var forged = Array(marker)
            forged[4] = forged[4] == "A" ? "B" : "A"
            let tampered = try await alice.post(
                "private", "records/query", Self.query(sorts: [Self.sort("name")], extra: ["continuationMarker": .string(String(forged))]))
            expectEqual(tampered.status, 400)
            let bob = try await server.user("bob")
            let stolen = try await bob.post(
                "private", "records/query", Self.query(sorts: [Self.sort("name")], extra: ["resultsLimit": 2, "continuationMarker": .string(marker)]))
            expectEqual(stolen.status, 400)
        }
    }

    @Test func resultsLimitCapsThePage() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            _ = try await alice.modify((0..<200).map { Op.create("q\($0)", type: "Item") })
            _ = try await alice.modify([Op.create("q200", type: "Item")])
            let page = try await alice.post("private", "records/query", Self.query(extra: ["resultsLimit": 500]))
            expectEqual(page.records.count, 200)
            #expect(page.json["continuationMarker"] != nil)
            let rest = try await alice.post(
                "private", "records/query", Self.query(extra: ["continuationMarker": page.json["continuationMarker"]!]))
            expectEqual(rest.records.count, 1)
            #expect(rest.json["continuationMarker"] == nil)
        }
    }

    @Test func aQueryPastItsTimeBudgetFailsClearly() async throws {
        let costly = Self.query(filters: [Self.filter("NOT_BEGINS_WITH", "t", "zzz")], sorts: [Self.sort("t")])
        func seed(_ server: TestServer) async throws -> APIClient {
            let alice = try await server.user("alice")
            _ = try await alice.modify((0..<200).map { Op.create("w\($0)", type: "Item", ["t": Op.field(.string("word \($0)"))]) })
            return alice
        }
        // A microsecond of processor time: the first check, a few thousand steps in, stops it.
        try await TestServer.with(configure: { $0.service.queryBudget = .microseconds(1) }) { server in
            let response = try await seed(server).post("private", "records/query", costly)
            expectEqual(response.status, 400)
            expectEqual(response.json["serverErrorCode"], "BAD_REQUEST")
            expectEqual(response.json["limit"], "queryMilliseconds")
            expectEqual(response.json["reason"]?.stringValue?.contains("budget"), true, "\(response.text)")
        }
        // The default budget serves the same query.
        try await TestServer.with { server in
            let response = try await seed(server).post("private", "records/query", costly)
            expectEqual(response.status, 200, "\(response.text)")
            expectEqual(response.records.count, 200)
        }
    }

    @Test func comparatorsApplyToEveryScalarAndListType() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let rows: [(String, JSONObject)] = [
                ("m", ["d": Op.field(1.25), "t": Op.field(10, "TIMESTAMP"), "b": Op.field("AAE=", "BYTES"),
                       "rl": Op.field([["recordName": "x", "action": "NONE"]], "REFERENCE_LIST"), "tl": Op.field([10, 20], "TIMESTAMP_LIST"),
                       "dl": Op.field([0.5, 1.5], "DOUBLE_LIST"), "il": Op.field([7], "INT64_LIST")]),
                ("n", ["d": Op.field(2.5), "t": Op.field(20, "TIMESTAMP"), "b": Op.field("AAI=", "BYTES"),
                       "rl": Op.field([["recordName": "y", "action": "NONE"], ["recordName": "x", "action": "NONE"]], "REFERENCE_LIST"),
                       "tl": Op.field([30], "TIMESTAMP_LIST"), "dl": Op.field([2.5], "DOUBLE_LIST"), "il": Op.field([8, 9], "INT64_LIST")]),
            ]
            _ = try await alice.modify(rows.map { Op.create($0.0, type: "Item", $0.1) })
            let cases: [(JSON, [String])] = [
                (Self.f("EQUALS", "d", 2.5), ["n"]), (Self.f("GREATER_THAN", "d", 1.25), ["n"]), (Self.f("IN", "d", [1.25, 9.0]), ["m"]),
                (Self.f("EQUALS", "t", 10, type: "TIMESTAMP"), ["m"]), (Self.f("LESS_THAN_OR_EQUALS", "t", 20, type: "TIMESTAMP"), ["m", "n"]),
                (Self.f("NOT_IN", "t", [10], type: "TIMESTAMP_LIST"), ["n"]),
                (Self.f("EQUALS", "b", "AAI=", type: "BYTES"), ["n"]), (Self.f("NOT_EQUALS", "b", "AAI=", type: "BYTES"), ["m"]),
                (Self.f("LIST_CONTAINS", "rl", ["recordName": "y"], type: "REFERENCE"), ["n"]),
                (Self.f("LIST_CONTAINS_ALL", "rl", [["recordName": "x"], ["recordName": "y"]], type: "REFERENCE_LIST"), ["n"]),
                (Self.f("NOT_LIST_CONTAINS", "rl", ["recordName": "y"], type: "REFERENCE"), ["m"]),
                (Self.f("LIST_CONTAINS", "tl", 30, type: "TIMESTAMP"), ["n"]),
                (Self.f("LIST_CONTAINS_ANY", "tl", [20, 30], type: "TIMESTAMP_LIST"), ["m", "n"]),
                (Self.f("LIST_CONTAINS", "dl", 0.5), ["m"]), (Self.f("NOT_LIST_CONTAINS_ANY", "dl", [2.5]), ["m"]),
                (Self.f("LIST_CONTAINS_ALL", "il", [8, 9]), ["n"]), (Self.f("NOT_LIST_CONTAINS_ALL", "il", [8, 9]), ["m"]),
            ]
            for (filter, expected) in cases {
                try await expectEqual(run(alice, [filter]), expected, "\(filter.text)")
            }
            // desiredKeys shape query results too.
            let shaped = try await alice.post("private", "records/query", Self.query(filters: [Self.f("EQUALS", "d", 2.5)], extra: ["desiredKeys": ["t"]]))
            expectEqual(shaped.records.first?["fields"]?.objectValue?.keys, ["t"])
        }
    }

    /// Enough matching records that the planner walks the sort index instead of starting from
    /// the filter: same answers, same order, cursors intact.
    @Test func sortDrivenPlanPagesCorrectlyThroughManyMatches() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let count = 4_400  // 2,200 matches: past QuerySQL.selectiveMatches
            for start in stride(from: 0, to: count, by: 200) {
                let batch = (start..<start + 200).map { index in
                    Op.create(String(format: "m%04d", index), type: "Item", [
                        "k": Op.field(.int(Int64(index % 2))), "n": Op.field(.int(Int64(index / 3))),
                    ])
                }
                #expect(try await alice.modify(batch).records.allSatisfy { $0.errorCode == nil })
            }
            var seen: [String] = []
            var marker: String?
            repeat {
                var extra: JSONObject = ["resultsLimit": 200]
                if let marker { extra["continuationMarker"] = .string(marker) }
                let page = try await alice.post(
                    "private", "records/query",
                    Self.query(filters: [Self.filter("EQUALS", "k", 0)], sorts: [Self.sort("n", ascending: false)], extra: extra))
                expectEqual(page.status, 200, "\(page.text)")
                seen += names(page)
                marker = page.json["continuationMarker"]?.stringValue
            } while marker != nil && seen.count <= count
            // Expected: even indexes, n descending, ties by record name descending.
            let expected = (0..<count).filter { $0 % 2 == 0 }
                .sorted { ($0 / 3, $0) > ($1 / 3, $1) }
                .map { String(format: "m%04d", $0) }
            expectEqual(seen, expected)
        }
    }
}
