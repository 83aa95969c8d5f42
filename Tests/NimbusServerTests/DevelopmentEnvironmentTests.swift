import Foundation
import NimbusCore
import NimbusStorage
import NimbusTestSupport
import NimbusWire
import Testing

/// What only development allows, through the console API (issue 21, docs/dashboard.md): taking
/// fields and record types out of the schema, and resetting the environment to production's
/// schema with no data. Each refusal too: records that hold values, production, the Users
/// type, no confirmation, a read-only operator.
@Suite("the development environment: removing from the schema, and reset")
struct DevelopmentEnvironmentTests {
    typealias Browser = OperatorTests.Browser
    static let container = TestServer.container
    static let schema = "containers/\(TestServer.container)/schema/development"

    static func fieldNames(_ server: TestServer, _ environment: NimbusStorage.Environment, type: String) async throws -> Set<String> {
        Set(try await server.service.schema(container: container, environment: environment).fields.filter { $0.recordType == type }.map(\.fieldName))
    }

    @Test("a field goes once no record holds a value of it, a type once it has no records; a saved value brings a field back")
    func removingFromTheSchema() async throws {
        try await TestServer.with { server in
            let browser = try await ConsoleTests.administrator(server)
            let alice = try await server.user("alice")
            let saved = try await alice.modify("public", [Op.create("n1", type: "Note", ["title": Op.field("a"), "due": Op.field(.int(5))])])
            expectEqual(saved.status, 200, "\(saved.text)")

            let held = try await browser.post("\(Self.schema)/remove", ["recordType": "Note", "field": "due"])
            #expect(held.status == 400 && held.reason.contains("1 development record(s) of type Note hold values of 'due'"), "\(held.text)")
            let typeHeld = try await browser.post("\(Self.schema)/remove", ["recordType": "Note"])
            #expect(typeHeld.status == 400 && typeHeld.reason.contains("exist"), "\(typeHeld.text)")
            try await expectEqual(Self.fieldNames(server, .development, type: "Note"), ["title", "due"], "a refusal changed the schema")

            // The record lets go of the value: the field can go.
            let tag = try #require(saved.records.first?["recordChangeTag"]?.stringValue)
            let cleared = try await alice.modify("public", [Op.update("n1", tag: tag, ["due": .null])])
            #expect(cleared.status == 200 && cleared.records.first?["serverErrorCode"] == nil, "\(cleared.text)")
            let removed = try await browser.post("\(Self.schema)/remove", ["recordType": "Note", "field": "due"])
            expectEqual(removed.status, 200, "\(removed.text)")
            try await expectEqual(Self.fieldNames(server, .development, type: "Note"), ["title"])
            let again = try await browser.post("\(Self.schema)/remove", ["recordType": "Note", "field": "due"])
            #expect(again.status == 404 && again.reason.contains("not in the development schema"), "\(again.text)")

            // Development's schema is just in time: saving the field makes it again, any type.
            let back = try await alice.modify("public", [Op.create("n2", type: "Note", ["due": Op.field("tomorrow")])])
            #expect(back.status == 200 && back.records.first?["serverErrorCode"] == nil, "\(back.text)")
            let due = try await server.service.schema(container: Self.container, environment: .development).fields.first { $0.fieldName == "due" }
            expectEqual(due?.fieldType, "STRING")

            // A declared system field holds indexes only: it goes with records there.
            let declared = try await browser.post(
                "\(Self.schema)/indexes", ["recordType": "Note", "field": "___createTime", "indexes": ["QUERYABLE"]])
            expectEqual(declared.status, 200, "\(declared.text)")
            let system = try await browser.post("\(Self.schema)/remove", ["recordType": "Note", "field": "___createTime"])
            expectEqual(system.status, 200, "\(system.text)")

            // The type goes once its records do, with every field.
            let found = try await alice.lookup("public", ["n1", "n2"])
            let deletions = found.records.compactMap { record -> JSON? in
                guard let name = record["recordName"]?.stringValue else { return nil }
                return Op.delete(name, tag: record["recordChangeTag"]?.stringValue)
            }
            try await expectEqual(alice.modify("public", deletions).status, 200)
            let typeRemoved = try await browser.post("\(Self.schema)/remove", ["recordType": "Note"])
            expectEqual(typeRemoved.status, 200, "\(typeRemoved.text)")
            let types = try await server.service.schema(container: Self.container, environment: .development)
            #expect(!types.recordTypes.contains("Note") && !types.fields.contains { $0.recordType == "Note" })

            let users = try await browser.post("\(Self.schema)/remove", ["recordType": "Users"])
            #expect(users.status == 400 && users.reason.contains("belongs to the server"), "\(users.text)")
            let shares = try await browser.post("\(Self.schema)/remove", ["recordType": "cloudkit.share"])
            #expect(shares.status == 400 && shares.reason.contains("belongs to the server"), "\(shares.text)")
            let production = try await browser.post(
                "containers/\(Self.container)/schema/production/remove", ["recordType": "Note", "field": "title"])
            #expect(production.status == 400 && production.reason.contains("deploying"), "\(production.text)")
            let unknownType = try await browser.post("\(Self.schema)/remove", ["recordType": "Nope"])
            expectEqual(unknownType.status, 404, "\(unknownType.text)")

            let (_, password) = try await server.service.createOperator(name: "rita", role: .readOnly, containers: nil, by: "cli")
            var rita = Browser(server)
            _ = try await rita.signIn("rita", password)
            let readOnly = try await rita.post("\(Self.schema)/remove", ["recordType": "Users", "field": "x"])
            expectEqual(readOnly.status, 403, "\(readOnly.text)")
            let actions = try await browser.get("audit").json["entries"]?.arrayValue?.compactMap { $0["action"]?.stringValue } ?? []
            expectEqual(actions.filter { $0 == "schema.remove" }.count, 3, "\(actions)")
        }
    }

    @Test("a reset empties development (records, zones, subscriptions), makes its schema and grants production's, keeps production and users")
    func resetDevelopment() async throws {
        try await TestServer.with { server in
            let browser = try await ConsoleTests.administrator(server)
            let alice = try await server.user("alice")
            // Production gets Place (title, stars) by a deploy; then development grows past it.
            try await expectEqual(alice.modify("public", [Op.create("p1", type: "Place", ["title": Op.field("Cafe"), "stars": Op.field(.int(4))])]).status, 200)
            try await expectEqual(browser.post("containers/\(Self.container)/schema/deploy").status, 200)
            let producer = try await server.user("paula", environment: .production)
            let kept = try await producer.modify("public", [Op.create("prod1", type: "Place", ["title": Op.field("Kept")])])
            #expect(kept.status == 200 && kept.records.first?["serverErrorCode"] == nil, "\(kept.text)")
            try await expectEqual(alice.modify("public", [Op.create("t1", type: "Temp", ["scratch": Op.field("x")])]).status, 200)
            try await expectEqual(alice.modify("public", [Op.create("p2", type: "Place", ["extra": Op.field("x")])]).status, 200)
            try await expectEqual(browser.post("\(Self.schema)/indexes", ["recordType": "Place", "field": "stars", "indexes": []]).status, 200)
            try await expectEqual(browser.post("containers/\(Self.container)/roles/development", ["name": "editor"]).status, 200)
            let granted = try await browser.post(
                "containers/\(Self.container)/grants/development",
                ["recordType": "Place", "role": "editor", "permissions": ["WRITE"], "granting": true])
            expectEqual(granted.status, 200, "\(granted.text)")
            try await expectEqual(alice.createZone("Work").status, 200)
            try await expectEqual(alice.modify(zone: "Work", [Op.create("w1", ["body": Op.field("draft")])]).status, 200)
            try await expectEqual(alice.modify([Op.create("d1", ["body": Op.field("draft")])]).status, 200)
            let subscribed = try await alice.post(
                "private", "subscriptions/modify",
                ["operations": [["operationType": "create", "subscription": ["subscriptionID": "all", "subscriptionType": "database"]]]])
            expectEqual(subscribed.status, 200, "\(subscribed.text)")
            let databaseToken = try #require(try await alice.databaseChanges().json["syncToken"]?.stringValue)
            let zoneFeed = try await alice.zoneChanges("Work")
            let zoneToken = try #require(zoneFeed.zones.first?["syncToken"]?.stringValue, "\(zoneFeed.text)")

            let unconfirmed = try await browser.post("containers/\(Self.container)/reset/development", [:])
            #expect(unconfirmed.status == 400 && unconfirmed.reason.contains("confirm"), "\(unconfirmed.text)")
            let production = try await browser.post("containers/\(Self.container)/reset/production", ["confirm": .string(Self.container)])
            #expect(production.status == 400 && production.reason.contains("only the development"), "\(production.text)")
            #expect(try await alice.lookup("public", ["p1"]).records.first?["serverErrorCode"] == nil, "a refused reset deleted data")

            let reset = try await browser.post("containers/\(Self.container)/reset/development", ["confirm": .string(Self.container)])
            expectEqual(reset.status, 200, "\(reset.text)")
            #expect(reset.json["zones"]?.int64Value == 3 && reset.json["subscriptions"]?.int64Value == 1, "\(reset.text)")

            // Data: gone from development, kept in production.
            try await expectEqual(alice.lookup("public", ["p1"]).records.first?["serverErrorCode"]?.stringValue, "NOT_FOUND")
            try await expectEqual(alice.lookup(["d1"]).records.first?["serverErrorCode"]?.stringValue, "NOT_FOUND")
            let zones = try await alice.post("private", "zones/list", [:]).zones.compactMap { $0["zoneID"]?["zoneName"]?.stringValue }
            expectEqual(zones, ["_defaultZone"], "\(zones)")
            try await expectEqual(producer.lookup("public", ["prod1"]).records.first?["fields"]?["title"]?["value"]?.stringValue, "Kept")
            let subscriptions = try await alice.post("private", "subscriptions/list", [:])
            expectEqual(subscriptions.json["subscriptions"]?.arrayValue?.isEmpty, true, "\(subscriptions.text)")
            // The user keeps the account, the session and a user record.
            let me = try await alice.lookup("public", [try #require(alice.userRecordName)])
            expectEqual(me.records.first?["recordType"]?.stringValue, "Users", "\(me.text)")

            // Devices find out: the database feed says the custom zone was deleted (the default
            // zone keeps no change feed), and the old zone token is not taken as if nothing
            // had happened.
            let changes = try await alice.databaseChanges(token: databaseToken)
            expectEqual(changes.status, 200, "\(changes.text)")
            let work = changes.zones.first { $0["zoneID"]?["zoneName"]?.stringValue == "Work" }
            expectEqual(work?["deleted"]?.boolValue, true, "\(changes.text)")
            let stale = try await alice.zoneChanges("Work", token: zoneToken)
            expectEqual(stale.zones.first?["serverErrorCode"]?.stringValue, "ZONE_NOT_FOUND", "\(stale.text)")
            // Made again under the same name, the zone is new: the old token does not read it.
            try await expectEqual(alice.createZone("Work").status, 200)
            let remade = try await alice.zoneChanges("Work", token: zoneToken)
            expectEqual(remade.zones.first?["serverErrorCode"]?.stringValue, "CHANGE_TOKEN_EXPIRED", "\(remade.text)")

            // Schema and grants: production's.
            try await expectEqual(Self.fieldNames(server, .development, type: "Place"), ["title", "stars"])
            let types = try await server.service.schema(container: Self.container, environment: .development)
            #expect(!types.recordTypes.contains("Temp"), "\(types.recordTypes)")
            let stars = types.fields.first { $0.recordType == "Place" && $0.fieldName == "stars" }
            let productionStars = try await server.service.schema(container: Self.container, environment: .production).fields.first {
                $0.recordType == "Place" && $0.fieldName == "stars"
            }
            #expect(stars?.indexes == productionStars?.indexes && stars?.indexes != 0)
            let security = try await server.service.security(container: Self.container, environment: .development)
            #expect(security.grants["Place"]?["editor"] ?? [] == [], "\(security.grants)")
            expectEqual(security.grants["Place"]?["_world"], .read)
            let plan = try await browser.get("containers/\(Self.container)/schema/deploy")
            #expect(plan.json["newFields"]?.arrayValue?.isEmpty == true && plan.json["newRecordTypes"]?.arrayValue?.isEmpty == true, "\(plan.text)")

            // And development works on: just in time again.
            let fresh = try await alice.modify("public", [Op.create("p3", type: "Place", ["extra": Op.field("again")])])
            #expect(fresh.status == 200 && fresh.records.first?["serverErrorCode"] == nil, "\(fresh.text)")
            let audit = try await browser.get("audit").json["entries"]?.arrayValue?.first?["action"]?.stringValue
            expectEqual(audit, "environment.reset")
        }
    }
}
