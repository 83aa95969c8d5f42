import NimbusTestSupport
import NimbusWire
import Testing

/// `subscriptions/list`, `lookup` and `modify`, and what they refuse.
@Suite struct SubscriptionTests {
    static func querySubscription(
        _ id: String, type: String = "Note", filters: [JSON] = [], firesOn: [String]? = nil, firesOnce: Bool? = nil,
        zone: String? = nil, info: JSONObject = ["shouldSendContentAvailable": true]
    ) -> JSON {
        var subscription: JSONObject = [
            "subscriptionID": .string(id), "subscriptionType": "query",
            "query": ["recordType": .string(type), "filterBy": .array(filters)], "notificationInfo": .object(info),
        ]
        if let firesOn { subscription["firesOn"] = .array(firesOn.map(JSON.string)) }
        if let firesOnce { subscription["firesOnce"] = .bool(firesOnce) }
        if let zone { subscription["zoneID"] = ["zoneName": .string(zone)] }
        return .object(subscription)
    }

    static func operation(_ type: String, _ subscription: JSON) -> JSON {
        ["operationType": .string(type), "subscription": subscription]
    }

    @Test func subscriptionsAreCreatedListedLookedUpUpdatedAndDeleted() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            _ = try await alice.modify([Op.create("n1", ["stars": Op.field(3)])])
            let filter: JSON = ["comparator": "GREATER_THAN", "fieldName": "stars", "fieldValue": ["value": 2]]
            let created = try await alice.post(
                "private", "subscriptions/modify",
                ["operations": [Self.operation("create", Self.querySubscription("s1", filters: [filter], firesOn: ["create"]))]])
            expectEqual(created.status, 200)
            let saved = try #require(created.json["subscriptions"]?.arrayValue?.first)
            expectEqual(saved["subscriptionID"], "s1")
            expectEqual(saved["firesOn"], ["create"])
            expectEqual(saved["zoneWide"], true)

            let duplicate = try await alice.post(
                "private", "subscriptions/modify", ["operations": [Self.operation("create", Self.querySubscription("s1"))]])
            expectEqual(duplicate.json["subscriptions"]?[0]?["serverErrorCode"], "EXISTS")
            expectEqual(duplicate.json["subscriptions"]?[0]?["subscriptionID"], "s1")

            let updated = try await alice.post(
                "private", "subscriptions/modify",
                ["operations": [Self.operation("update", Self.querySubscription("s1", firesOn: ["update", "delete"]))]])
            expectEqual(updated.json["subscriptions"]?[0]?["firesOn"], ["update", "delete"])

            let list = try await alice.post("private", "subscriptions/list", [:])
            expectEqual(list.json["subscriptions"]?.arrayValue?.map { $0["subscriptionID"] }, ["s1"])
            let lookup = try await alice.post("private", "subscriptions/lookup", ["subscriptions": [["subscriptionID": "s1"], "nope"]])
            expectEqual(lookup.json["subscriptions"]?[0]?["subscriptionID"], "s1")
            expectEqual(lookup.json["subscriptions"]?[1]?["serverErrorCode"], "NOT_FOUND")

            // Another user sees none of them.
            let bob = try await server.user("bob")
            try await expectEqual(bob.post("private", "subscriptions/list", [:]).json["subscriptions"], [])

            let deleted = try await alice.post(
                "private", "subscriptions/modify",
                ["operations": [["operationType": "delete", "subscription": ["subscriptionID": "s1"]]]])
            expectEqual(deleted.json["subscriptions"]?[0]?["deleted"], true)
            let again = try await alice.post(
                "private", "subscriptions/modify",
                ["operations": [["operationType": "delete", "subscription": ["subscriptionID": "s1"]]]])
            expectEqual(again.json["subscriptions"]?[0]?["serverErrorCode"], "NOT_FOUND")
            try await expectEqual(alice.post("private", "subscriptions/list", [:]).json["subscriptions"], [])
        }
    }

    @Test func badSubscriptionsGetClearErrorsAndSaveNothing() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            _ = try await alice.modify([Op.create("n1", ["stars": Op.field(3)])])
            _ = try await alice.createZone("Z")
            func item(_ database: String, _ subscription: JSON) async throws -> JSON? {
                try await alice.post(database, "subscriptions/modify", ["operations": [Self.operation("create", subscription)]])
                    .json["subscriptions"]?[0]
            }
            let unknownType = try await item("private", Self.querySubscription("a", type: "Nope"))
            expectEqual(unknownType?["serverErrorCode"], "BAD_REQUEST")
            expectEqual(unknownType?["reason"]?.stringValue?.contains("'Nope' does not exist"), true)
            let wrongValue: JSON = ["comparator": "LESS_THAN", "fieldName": "stars", "fieldValue": ["value": "many"]]
            try await expectEqual(item("private", Self.querySubscription("b", filters: [wrongValue]))?["serverErrorCode"], "BAD_REQUEST")
            #expect(
                try await item("public", ["subscriptionID": "c", "subscriptionType": "zone", "zoneID": ["zoneName": "Z"]])?["reason"]?
                    .stringValue?.contains("not supported in the public database") == true)
            try await expectEqual(item("public", ["subscriptionID": "d", "subscriptionType": "database"])?["serverErrorCode"], "BAD_REQUEST")
            #expect(
                try await item("private", ["subscriptionID": "e", "subscriptionType": "zone", "zoneID": ["zoneName": "Missing"]])?[
                    "serverErrorCode"] == "ZONE_NOT_FOUND")
            #expect(
                try await item("private", ["subscriptionID": "f", "subscriptionType": "zone", "zoneID": ["zoneName": "_defaultZone"]])?[
                    "serverErrorCode"] == "BAD_REQUEST")

            // Whole-request errors: shapes the protocol does not allow.
            let badShapes: [JSON] = [
                ["operations": [Self.operation("create", ["subscriptionID": "g", "subscriptionType": "bogus"])]],
                ["operations": [Self.operation("create", Self.querySubscription("h", firesOn: ["explode"]))]],
                ["operations": [Self.operation("create", Self.querySubscription("i", info: ["shouldBadge": "yes"]))]],
                ["operations": [Self.operation("upsert", Self.querySubscription("j"))]],
                ["operations": "all of them"],
            ]
            for body in badShapes {
                let response = try await alice.post("private", "subscriptions/modify", body)
                expectEqual(response.status, 400, "\(body)")
                expectEqual(response.errorCode, "BAD_REQUEST")
            }
            let twice = try await alice.post(
                "private", "subscriptions/modify",
                ["operations": [Self.operation("create", Self.querySubscription("k")), Self.operation("create", Self.querySubscription("k"))]])
            expectEqual(twice.json["subscriptions"]?[1]?["reason"]?.stringValue?.contains("more than once"), true)
            // Without a signed-in user there is nobody to notify.
            let anonymous = try await server.client().post("public", "subscriptions/list", [:])
            expectEqual(anonymous.status, 421)
            #expect(try await alice.post("private", "subscriptions/list", [:]).json["subscriptions"]?.arrayValue?.map {
                $0["subscriptionID"]
            } == ["k"])
        }
    }

    @Test func subscriptionsPerDatabaseAreLimitedAtOneThousand() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            _ = try await alice.modify([Op.create("n1")])
            let limit = Limits.subscriptionsPerDatabase.value
            for start in stride(from: 0, to: limit, by: 200) {
                let batch = (start..<start + 200).map { Self.operation("create", Self.querySubscription("s\($0)")) }
                let response = try await alice.post("private", "subscriptions/modify", ["operations": .array(batch)])
                expectEqual(response.json["subscriptions"]?.arrayValue?.allSatisfy { $0["serverErrorCode"] == nil }, true)
            }
            let past = try await alice.post(
                "private", "subscriptions/modify", ["operations": [Self.operation("create", Self.querySubscription("one-more"))]])
            expectEqual(past.json["subscriptions"]?[0]?["limit"], "subscriptionsPerDatabase")
            // Replacing one at the limit is fine; so is the public database, counted apart.
            let update = try await alice.post(
                "private", "subscriptions/modify", ["operations": [Self.operation("update", Self.querySubscription("s0"))]])
            #expect(update.json["subscriptions"]?[0]?["serverErrorCode"] == nil)
            let tooMany = (0...Limits.operationsPerRequest.value).map { Self.operation("create", Self.querySubscription("t\($0)")) }
            let oversize = try await alice.post("public", "subscriptions/modify", ["operations": .array(tooMany)])
            expectEqual(oversize.status, 400)
            expectEqual(oversize.json["limit"], "operationsPerRequest")
        }
    }

    @Test func pushTokensRegisterInEverySpellingAndMalformedOnesAreRefused() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let created = try await alice.device("tokens/create", ["apnsEnvironment": "development"])
            expectEqual(created.status, 200)
            let courier = try #require(created.json["apnsToken"]?.stringValue)
            expectEqual(created.json["webcourierURL"]?.stringValue?.contains("/webcourier/aps?tok=\(courier)&ttl=43200"), true)
            let hex = String(repeating: "ab", count: 32)
            for path in ["/device/1/\(TestServer.container)/development/tokens/register",
                "/database/1/\(TestServer.container)/development/tokens/register",
                "/database/1/\(TestServer.container)/development/private/tokens/register"]
            {
                let response = try await alice.send(
                    path: path, body: Array(JSON.object(["apnsEnvironment": "production", "apnsToken": .string(hex)]).serialized()))
                expectEqual(response.status, 200, "\(path)")
                expectEqual(response.json["apnsToken"]?.stringValue, hex)
            }
            try await expectEqual(alice.device("tokens/register", ["apnsToken": .string(courier)]).status, 200)
            for bad: JSON in ["abc", .string(String(repeating: "zz", count: 32)), .string(String(repeating: "ab", count: 33)), 42] {
                let response = try await alice.device("tokens/register", ["apnsToken": bad])
                expectEqual(response.status, 400, "\(bad)")
            }
            try await expectEqual(alice.device("tokens/register", ["apnsToken": .string(hex), "apnsEnvironment": "staging"]).status, 400)
            let bob = try await server.user("bob")
            try await expectEqual(bob.device("tokens/register", ["apnsToken": .string(courier)]).errorCode, "ACCESS_DENIED")
        }
    }
}
