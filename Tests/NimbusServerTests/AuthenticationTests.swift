import NimbusTestSupport
import NimbusWire
import Testing

@Suite struct AuthenticationTests {
    @Test func requestWithoutAPITokenFailsAuthentication() async throws {
        try await TestServer.with { server in
            var client = server.client()
            client.apiToken = nil
            let response = try await client.get("public", "zones/list")
            #expect(response.status == 401)
            #expect(response.errorCode == "AUTHENTICATION_FAILED")
            #expect(response.reason.contains("ckAPIToken"))
            #expect(response.json["uuid"]?.stringValue != nil)
        }
    }

    @Test func unknownOrMismatchedAPITokenFailsAuthentication() async throws {
        try await TestServer.with { server in
            var client = server.client()
            client.apiToken = String(repeating: "a", count: 64)
            #expect(try await client.get("public", "zones/list").status == 401)
            // The production token does not open the development environment.
            client.apiToken = server.productionToken
            let response = try await client.get("public", "zones/list")
            #expect(response.status == 401)
            #expect(response.reason.contains("production"))
        }
    }

    @Test func revokedAPITokenFailsAuthentication() async throws {
        try await TestServer.with { server in
            #expect(try await server.client().get("public", "zones/list").status == 200)
            _ = try await server.service.revokeAPITokens(container: TestServer.container, environment: .development)
            #expect(try await server.client().get("public", "zones/list").status == 401)
        }
    }

    @Test func privateDatabaseWithoutSessionRequiresAuthentication() async throws {
        try await TestServer.with { server in
            let response = try await server.client().get("private", "zones/list")
            #expect(response.status == 421)
            #expect(response.errorCode == "AUTHENTICATION_REQUIRED")
            #expect(response.json["redirectURL"] != nil)
            #expect(try await server.client().get("shared", "zones/list").status == 421)
        }
    }

    @Test func signInWithWrongPasswordFails() async throws {
        try await TestServer.with { server in
            _ = try await server.service.createUser(name: "carol", password: "correct-horse")
            let wrong = try await server.client().signIn("carol", password: "battery-staple")
            #expect(wrong.status == 401)
            #expect(wrong.errorCode == "AUTHENTICATION_FAILED")
            let unknown = try await server.client().signIn("nobody", password: "battery-staple")
            #expect(unknown.status == 401)
            #expect(unknown.reason == wrong.reason)  // does not reveal which names exist
        }
    }

    @Test func userRecordNameIsStableOpaqueAndPerContainer() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let recordName = try #require(alice.userRecordName)
            #expect(recordName.count == 33 && recordName.hasPrefix("_"))
            #expect(recordName.dropFirst().allSatisfy { "0123456789abcdef".contains($0) })
            #expect(!recordName.contains("alice"))
            let again = try await server.client().signIn("alice", password: "password-alice")
            #expect(again.json["userRecordName"]?.stringValue == recordName)
            let other = server.service.userRecordName(container: "iCloud.other", userID: 1)
            #expect(other != recordName)
        }
    }

    @Test func callerAndCurrentUserAnswerWhoIsSignedIn() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let caller = try await alice.get("public", "users/caller")
            #expect(caller.status == 200)
            #expect(caller.json["userRecordName"]?.stringValue == alice.userRecordName)
            #expect(caller.json["users"]?.arrayValue?.first?["userRecordName"]?.stringValue == alice.userRecordName)
            #expect(caller.header("X-Apple-CloudKit-Web-Auth-Token") == alice.webAuthToken)
            let current = try await alice.get("public", "users/current")
            #expect(current.json["userRecordName"]?.stringValue == alice.userRecordName)
            #expect(try await server.client().get("public", "users/caller").status == 421)
        }
    }

    @Test func idleSessionExpires() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            server.clock.advance(milliseconds: 29 * 60 * 1000)
            #expect(try await alice.get("private", "zones/list").status == 200)
            // Use refreshed the idle clock: another 29 minutes is still fine.
            server.clock.advance(milliseconds: 29 * 60 * 1000)
            #expect(try await alice.get("private", "zones/list").status == 200)
            server.clock.advance(milliseconds: 31 * 60 * 1000)
            let expired = try await alice.get("private", "zones/list")
            #expect(expired.status == 421)
            #expect(expired.reason.contains("idle"))
        }
    }

    @Test func revokedAndSignedOutSessionsNoLongerWork() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            #expect(try await server.service.revokeSessions(userName: "alice") == 1)
            #expect(try await alice.get("private", "zones/list").status == 421)
            let bob = try await server.user("bob")
            let token = try #require(bob.webAuthToken)
            let out = try await bob.send(
                path: "/auth/1/\(TestServer.container)/development/signout", body: Array("{}".utf8),
                rawQuery: "?ckAPIToken=\(server.developmentToken)&ckWebAuthToken=\(token)")
            #expect(out.status == 200)
            #expect(try await bob.get("private", "zones/list").status == 421)
        }
    }

    @Test func forgedWebAuthTokenRequiresSigningInAgain() async throws {
        try await TestServer.with { server in
            var client = server.client()
            client.webAuthToken = "forged-token-value"
            let response = try await client.get("private", "zones/list")
            #expect(response.status == 421)
            #expect(response.header("X-Apple-CloudKit-Web-Auth-Token") == nil)
        }
    }

    @Test func sessionFromDevelopmentDoesNotOpenProduction() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            var production = server.client(environment: .production)
            production.webAuthToken = alice.webAuthToken
            #expect(try await production.get("private", "zones/list").status == 421)
        }
    }
}
