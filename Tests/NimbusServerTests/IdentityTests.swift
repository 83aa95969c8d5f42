import Foundation
import NimbusCore
import NimbusStorage
import NimbusTestSupport
import NimbusWire
import Testing

/// Users as people (issue 16, docs/identities.md): profiles, each user's record in the public
/// database, identities, discoverability and discovery, over HTTP.
@Suite struct IdentityTests {
    /// Creates an account with a profile and signs it in.
    static func person(
        _ server: TestServer, _ name: String, email: String? = nil, phone: String? = nil, given: String? = nil,
        family: String? = nil, environment: NimbusStorage.Environment = .development
    ) async throws -> APIClient {
        _ = try await server.service.createUser(
            name: name, password: "password-\(name)",
            profile: UserProfile(
                emailAddress: email, phoneNumber: phone, nameComponents: NameComponents(givenName: given, familyName: family)))
        let response = try await server.client(environment: environment).signIn(name, password: "password-\(name)")
        guard response.status == 200, let token = response.json["ckWebAuthToken"]?.stringValue,
            let recordName = response.json["userRecordName"]?.stringValue
        else { throw TestFailure("sign-in failed: \(response.text)") }
        return APIClient(
            baseURL: server.baseURL, container: TestServer.container, environment: environment,
            apiToken: environment == .development ? server.developmentToken : server.productionToken, webAuthToken: token,
            userRecordName: recordName)
    }

    static func discoverability(_ client: APIClient, _ discoverable: Bool?) async throws -> String? {
        let body: JSON = discoverable.map { ["discoverable": .bool($0)] } ?? [:]
        let response = try await client.post("public", "users/discoverability", body)
        expectEqual(response.status, 200, "\(response.text)")
        return response.json["status"]?.stringValue
    }

    /// `users/lookup/participants` (share invitations) names each lookup's member or fails it;
    /// `users/lookup/contacts` lists the discoverable users in the legacy form; a GET of
    /// `users/discoverability` asks and never sets.
    @Test func participantsAndContactsLookUps() async throws {
        try await TestServer.with { server in
            let ann = try await Self.person(server, "ann", email: "ann@example.com", given: "Ann", family: "Lee")
            let bob = try await Self.person(server, "bob", email: "bob@example.com", given: "Bob", family: "Ray")
            let lookups: JSON = [
                "lookupInfos": [["emailAddress": "Bob@Example.com"], ["emailAddress": "nobody@example.com"], ["phoneNumber": "x"], [:]]
            ]
            let before = try await ann.post("public", "users/lookup/participants", lookups)
            expectEqual(before.status, 200, "\(before.text)")
            let users = before.json["users"]?.arrayValue ?? []
            expectEqual(users.count, 4)
            #expect(users.first?["userRecordName"]?.stringValue == bob.userRecordName && users.first?["nameComponents"] == nil, "\(before.text)")
            #expect(users[1]["serverErrorCode"] == "NOT_FOUND" && users[1]["reason"]?.stringValue?.contains("nobody@example.com") == true)
            #expect(users[2]["serverErrorCode"] == "BAD_REQUEST" && users[2]["reason"]?.stringValue?.contains("phone number x") == true)
            #expect(users[3]["serverErrorCode"] == "BAD_REQUEST" && users[3]["reason"]?.stringValue?.contains("say who") == true, "\(before.text)")

            let sneaky = try await bob.send(
                path: "/database/1/\(TestServer.container)/development/public/users/discoverability",
                body: Array(#"{"discoverable":true}"#.utf8), method: "GET")
            #expect(sneaky.status == 400 && sneaky.text.contains("takes POST"), "\(sneaky.text)")
            try await expectEqual(Self.discoverability(bob, nil), "initialState")
            try await expectEqual(Self.discoverability(bob, true), "granted")

            let after = try await ann.post("public", "users/lookup/participants", ["lookupInfos": [["emailAddress": "bob@example.com"]]])
            expectEqual(after.json["users"]?[0]?["nameComponents"]?["givenName"], "Bob", "\(after.text)")
            let contacts = try await ann.get("public", "users/lookup/contacts")
            expectEqual(contacts.status, 200, "\(contacts.text)")
            expectEqual(contacts.json["users"]?.arrayValue?.compactMap { $0["firstName"]?.stringValue }, ["Bob"], "\(contacts.text)")
            let anonymous = try await server.client().post("public", "users/lookup/participants", lookups)
            expectEqual(anonymous.status, 421, "\(anonymous.text)")
        }
    }

    @Test func theCallersIdentityCarriesTheirProfile() async throws {
        try await TestServer.with { server in
            let ann = try await Self.person(server, "ann", email: "Ann@Example.com ", phone: "+1 (555) 010-0100", given: "Ann", family: "Lee")
            let caller = try await ann.get("public", "users/caller")
            expectEqual(caller.status, 200, "\(caller.text)")
            let expected: JSON = [
                "userRecordName": .string(ann.userRecordName!),
                "lookupInfo": [
                    "emailAddress": "ann@example.com", "phoneNumber": "+15550100100", "userRecordName": .string(ann.userRecordName!),
                ],
                "nameComponents": ["givenName": "Ann", "familyName": "Lee"],
            ]
            for key in ["userRecordName", "lookupInfo", "nameComponents"] {
                expectEqual(caller.json[key], expected[key], "\(key): \(caller.text)")
                expectEqual(caller.json["users"]?.arrayValue?.first?[key], expected[key], "users[0].\(key): \(caller.text)")
            }
            // users/current names the caller only once they are discoverable.
            try await expectEqual(ann.get("public", "users/current").json, ["userRecordName": .string(ann.userRecordName!)])
            try await expectEqual(Self.discoverability(ann, true), "granted")
            let current = try await ann.get("public", "users/current")
            #expect(current.json["firstName"] == "Ann" && current.json["lastName"] == "Lee", "\(current.text)")
            // Without a session: sign in first.
            try await expectEqual(server.client().get("public", "users/caller").status, 421)
        }
    }

    @Test func accountsRefuseBadAndTakenProfiles() async throws {
        try await TestServer.with { server in
            _ = try await server.service.createUser(
                name: "ann", password: "password-ann", profile: UserProfile(emailAddress: "ann@example.com", phoneNumber: "+15550100"))
            let cases: [(UserProfile, ServerErrorCode, String)] = [
                (UserProfile(emailAddress: "not-an-address"), .badRequest, "not an email address"),
                (UserProfile(emailAddress: "a@nodot"), .badRequest, "not an email address"),
                (UserProfile(phoneNumber: "12"), .badRequest, "not a phone number"),
                (UserProfile(phoneNumber: "+1 555 CALL NOW"), .badRequest, "not a phone number"),
                (UserProfile(nameComponents: NameComponents(givenName: String(repeating: "a", count: 257))), .badRequest, "at most 256 bytes"),
                (UserProfile(emailAddress: "ANN@example.com"), .exists, "email address ann@example.com"),
                (UserProfile(phoneNumber: "+1-555-0100"), .exists, "phone number +15550100"),
            ]
            for (profile, code, words) in cases {
                do {
                    _ = try await server.service.createUser(name: "bob", password: "password-bob", profile: profile)
                    Issue.record("accepted \(profile)")
                } catch let error as CloudKitError {
                    #expect(error.code == code && error.reason.contains(words), "\(error.reason)")
                }
            }
            // At the name limit: 256 bytes is a name.
            _ = try await server.service.createUser(
                name: "bob", password: "password-bob", profile: UserProfile(nameComponents: NameComponents(givenName: String(repeating: "a", count: 256))))
        }
    }

    @Test func everyUserHasARecordOnlyTheyMayWrite() async throws {
        try await TestServer.with { server in
            let ann = try await Self.person(server, "ann")
            let bob = try await Self.person(server, "bob")
            let annRecord = ann.userRecordName!
            // World-readable: the API token alone reads it.
            let read = try await server.client().lookup("public", [annRecord])
            let record = try #require(read.records.first)
            expectEqual(record["recordType"], "Users", "\(read.text)")
            let tag = try #require(record["recordChangeTag"]?.stringValue)
            // Its owner adds the app's fields to it.
            let update = Op.make("update", Op.record(annRecord, type: "Users", tag: tag, fields: ["partyName": ["value": "Ann's"]]))
            let saved = try await ann.modify("public", [update])
            expectEqual(saved.records.first?["fields"]?["partyName"]?["value"], "Ann's", "\(saved.text)")
            let newTag = try #require(saved.records.first?["recordChangeTag"]?.stringValue)
            // Nobody else may change it, make a user record of another's name, or delete one.
            let byBob = try await bob.modify(
                "public", [Op.make("update", Op.record(annRecord, type: "Users", tag: newTag, fields: ["partyName": ["value": "Bob's"]]))])
            expectEqual(byBob.records.first?["serverErrorCode"], "ACCESS_DENIED", "\(byBob.text)")
            let forged = try await bob.modify("public", [Op.make("create", Op.record("_0123456789abcdef0123456789abcdef", type: "Users"))])
            expectEqual(forged.records.first?["serverErrorCode"], "ACCESS_DENIED", "\(forged.text)")
            expectEqual(forged.records.first?["reason"]?.stringValue?.contains("users' own"), true)
            let deleted = try await ann.modify("public", [Op.make("forceDelete", Op.record(annRecord, type: nil))])
            expectEqual(deleted.records.first?["serverErrorCode"], "ACCESS_DENIED", "\(deleted.text)")
            // The directory is not listable: Users is queryable only where an index is granted.
            let query: JSON = [
                "query": ["recordType": "Users", "filterBy": [["comparator": "EQUALS", "fieldName": "partyName", "fieldValue": ["value": "Ann's"]]]]
            ]
            let refused = try await bob.post("public", "records/query", query)
            #expect(refused.status == 400 && refused.reason.contains("no QUERYABLE index"), "\(refused.text)")
            let listAll = try await bob.post("public", "records/query", ["query": ["recordType": "Users"]])
            #expect(listAll.status == 400 && listAll.reason.contains("needs a filter"), "\(listAll.text)")
            #expect(
                try await server.service.setFieldIndexes(
                    container: TestServer.container, environment: .development, recordType: "Users", field: "partyName",
                    indexes: SchemaFieldRow.Indexes.queryable))
            let granted = try await bob.post("public", "records/query", query)
            expectEqual(granted.records.map { $0["recordName"]?.stringValue }, [annRecord], "\(granted.text)")
        }
    }

    @Test func productionHasUserRecordsWithoutADeployedSchema() async throws {
        try await TestServer.with { server in
            let ann = try await Self.person(server, "ann", environment: .production)
            let read = try await server.client(environment: .production).lookup("public", [ann.userRecordName!])
            expectEqual(read.records.first?["recordType"], "Users", "\(read.text)")
        }
    }

    @Test func discoveryFindsOnlyMembersWhoOptedIn() async throws {
        try await TestServer.with { server in
            let ann = try await Self.person(server, "ann", email: "ann@example.com", phone: "+15550100", given: "Ann", family: "Lee")
            let bob = try await Self.person(server, "bob", email: "bob@example.com", given: "Bob")
            let cy = try await Self.person(server, "cy", email: "cy@example.com", given: "Cy")
            // Dee has an account but never used this container.
            _ = try await server.service.createUser(
                name: "dee", password: "password-dee", profile: UserProfile(emailAddress: "dee@example.com"))
            try await expectEqual(Self.discoverability(ann, nil), "initialState")
            try await expectEqual(Self.discoverability(ann, true), "granted")
            try await expectEqual(Self.discoverability(cy, false), "denied")
            let lookups: [JSON] = [
                ["emailAddress": "ANN@example.com"], ["emailAddress": "bob@example.com"], ["emailAddress": "cy@example.com"],
                ["emailAddress": "dee@example.com"], ["emailAddress": "nobody@example.com"], ["phoneNumber": "+1 555 0100"],
                ["userRecordName": .string(ann.userRecordName!)], ["userRecordName": .string(bob.userRecordName!)],
            ]
            let discovered = try await cy.post("public", "users/discover", ["lookupInfos": .array(lookups)])
            expectEqual(discovered.status, 200, "\(discovered.text)")
            let users = discovered.json["users"]?.arrayValue ?? []
            expectEqual(users.count, lookups.count)
            for (index, identity) in users.enumerated() {
                if [0, 5, 6].contains(index) {  // Ann, by email, phone and record name
                    expectEqual(identity["userRecordName"], .string(ann.userRecordName!), "\(index): \(identity)")
                    expectEqual(identity["nameComponents"], ["givenName": "Ann", "familyName": "Lee"])
                    expectEqual(identity["lookupInfo"]?["userRecordName"], .string(ann.userRecordName!))
                } else {  // everyone else: just what was asked
                    expectEqual(identity, ["lookupInfo": lookups[index]], "\(index): \(identity)")
                }
            }
            let all = try await bob.get("public", "users/discover")
            expectEqual(all.json["users"]?.arrayValue?.map { $0["userRecordName"] }, [.string(ann.userRecordName!)], "\(all.text)")
            let byEmail = try await bob.post(
                "public", "users/lookup/email", ["users": [["emailAddress": "ann@example.com"], ["emailAddress": "cy@example.com"]]])
            #expect(
                byEmail.json["users"] == [
                    [
                        "userRecordName": .string(ann.userRecordName!), "firstName": "Ann", "lastName": "Lee",
                        "emailAddress": "ann@example.com",
                    ]
                ], "\(byEmail.text)")
            let byID = try await bob.post(
                "public", "users/lookup/id",
                ["users": [["userRecordName": .string(cy.userRecordName!)], ["userRecordName": .string(ann.userRecordName!)]]])
            expectEqual(byID.json["users"]?.arrayValue?.map { $0["userRecordName"] }, [.string(ann.userRecordName!)], "\(byID.text)")
            let missingKey = try await bob.post("public", "users/lookup/id", ["users": [["emailAddress": "ann@example.com"]]])
            #expect(missingKey.status == 400 && missingKey.reason.contains("users[0].userRecordName"), "\(missingKey.text)")

            // Withdrawn: found no more.
            try await expectEqual(Self.discoverability(ann, false), "denied")
            let after = try await bob.post("public", "users/discover", ["lookupInfos": [["emailAddress": "ann@example.com"]]])
            expectEqual(after.json["users"], [["lookupInfo": ["emailAddress": "ann@example.com"]]], "\(after.text)")
        }
    }

    @Test func discoveryCanBeTurnedOffForAContainer() async throws {
        try await TestServer.with { server in
            let ann = try await Self.person(server, "ann", email: "ann@example.com", given: "Ann")
            let bob = try await Self.person(server, "bob")
            try await expectEqual(Self.discoverability(ann, true), "granted")
            try await server.service.setUserDiscovery(container: TestServer.container, enabled: false)
            try await expectEqual(Self.discoverability(ann, nil), "denied")
            let lookup: JSON = ["lookupInfos": [["emailAddress": "ann@example.com"]]]
            try await expectEqual(bob.post("public", "users/discover", lookup).json["users"], [["lookupInfo": ["emailAddress": "ann@example.com"]]])
            try await expectEqual(bob.get("public", "users/discover").json["users"], [])
            // Turned on again, Ann's own choice holds.
            try await server.service.setUserDiscovery(container: TestServer.container, enabled: true)
            try await expectEqual(bob.post("public", "users/discover", lookup).json["users"]?.arrayValue?.first?["userRecordName"], .string(ann.userRecordName!))
            await #expect(throws: CloudKitError.self) { try await server.service.setUserDiscovery(container: "iCloud.nowhere", enabled: false) }
        }
    }

    @Test func discoveryNeedsACallerAndHoldsItsLimit() async throws {
        try await TestServer.with { server in
            let ann = try await Self.person(server, "ann")
            let anonymous = try await server.client().post("public", "users/discover", ["lookupInfos": []])
            expectEqual(anonymous.status, 421, "\(anonymous.text)")
            try await expectEqual(server.client().post("public", "users/discoverability", [:]).status, 421)
            let lookup: JSON = ["emailAddress": "x@example.com"]
            let atLimit = try await ann.post("public", "users/discover", ["lookupInfos": .array(Array(repeating: lookup, count: 200))])
            #expect(atLimit.status == 200 && atLimit.json["users"]?.arrayValue?.count == 200, "\(atLimit.status)")
            let past = try await ann.post("public", "users/discover", ["lookupInfos": .array(Array(repeating: lookup, count: 201))])
            #expect(past.status == 400 && past.reason.contains("the limit is 200"), "\(past.text)")
            let malformed = try await ann.post("public", "users/discover", ["lookupInfos": "ann@example.com"])
            #expect(malformed.status == 400 && malformed.reason.contains("lookupInfos"), "\(malformed.text)")
        }
    }

    @Test func selfServiceSignUpIsOffUntilTurnedOn() async throws {
        try await TestServer.with { server in
            let client = server.client()
            let path = "/auth/1/\(TestServer.container)/development/signup"
            let body: JSON = [
                "username": "zoe", "password": "correct-horse", "emailAddress": "zoe@example.com",
                "nameComponents": ["givenName": "Zoe"],
            ]
            let closed = try await client.send(path: path, body: Array(body.serialized()))
            #expect(closed.status == 403 && closed.errorCode == "ACCESS_DENIED" && closed.reason.contains("nimbus users create"), "\(closed.text)")
            try await expectEqual(client.signIn("zoe", password: "correct-horse").status, 401, "no account was made")
            try await server.service.setSignUp(container: TestServer.container, enabled: true)
            let opened = try await client.send(path: path, body: Array(body.serialized()))
            expectEqual(opened.status, 200, "\(opened.text)")
            let token = try #require(opened.json["ckWebAuthToken"]?.stringValue)
            var zoe = client
            zoe.webAuthToken = token
            let caller = try await zoe.get("public", "users/caller")
            expectEqual(caller.json["lookupInfo"]?["emailAddress"], "zoe@example.com", "\(caller.text)")
            expectEqual(caller.json["nameComponents"], ["givenName": "Zoe"])
            // Taken names and addresses, bad input: refused with the reason, nothing made.
            let again = try await client.send(path: path, body: Array(body.serialized()))
            #expect(again.status == 409 || again.errorCode == "EXISTS", "\(again.text)")
            var other = body
            if case .object(var object) = other { object["username"] = "zed"; other = .object(object) }
            let sameEmail = try await client.send(path: path, body: Array(other.serialized()))
            #expect(sameEmail.errorCode == "EXISTS" && sameEmail.reason.contains("zoe@example.com"), "\(sameEmail.text)")
            let weak = try await client.send(path: path, body: Array(JSON.object(["username": "amy", "password": "short"]).serialized()))
            #expect(weak.status == 400 && weak.reason.contains("8 to 1024 bytes"), "\(weak.text)")
            let noName = try await client.send(path: path, body: Array(JSON.object(["password": "correct-horse"]).serialized()))
            #expect(noName.status == 400 && noName.reason.contains("username"), "\(noName.text)")
            try await expectEqual(server.client().signIn("amy", password: "short").status, 401)
            // Without the API token: refused before anything.
            let anonymous = try await client.send(path: path, body: Array(body.serialized()), rawQuery: "")
            expectEqual(anonymous.status, 401, "\(anonymous.text)")
        }
    }
}
