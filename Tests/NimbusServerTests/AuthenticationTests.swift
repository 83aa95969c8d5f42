import NimbusTestSupport
import NimbusWire
import Testing

@Suite struct AuthenticationTests {
    @Test func requestWithoutAPITokenFailsAuthentication() async throws {
        try await TestServer.with { server in
            var client = server.client()
            client.apiToken = nil
            let response = try await client.get("public", "zones/list")
            expectEqual(response.status, 401)
            expectEqual(response.errorCode, "AUTHENTICATION_FAILED")
            #expect(response.reason.contains("ckAPIToken"))
            #expect(response.json["uuid"]?.stringValue != nil)
        }
    }

    @Test func unknownOrMismatchedAPITokenFailsAuthentication() async throws {
        try await TestServer.with { server in
            var client = server.client()
            client.apiToken = String(repeating: "a", count: 64)
            try await expectEqual(client.get("public", "zones/list").status, 401)
            // The production token does not open the development environment.
            client.apiToken = server.productionToken
            let response = try await client.get("public", "zones/list")
            expectEqual(response.status, 401)
            #expect(response.reason.contains("production"))
        }
    }

    @Test func revokedAPITokenFailsAuthentication() async throws {
        try await TestServer.with { server in
            try await expectEqual(server.client().get("public", "zones/list").status, 200)
            _ = try await server.service.revokeAPITokens(container: TestServer.container, environment: .development)
            try await expectEqual(server.client().get("public", "zones/list").status, 401)
        }
    }

    @Test func privateDatabaseWithoutSessionRequiresAuthentication() async throws {
        try await TestServer.with { server in
            let response = try await server.client().get("private", "zones/list")
            expectEqual(response.status, 421)
            expectEqual(response.errorCode, "AUTHENTICATION_REQUIRED")
            #expect(response.json["redirectURL"] != nil)
            try await expectEqual(server.client().get("shared", "zones/list").status, 421)
        }
    }

    @Test func signInWithWrongPasswordFails() async throws {
        try await TestServer.with { server in
            _ = try await server.service.createUser(name: "carol", password: "correct-horse")
            let wrong = try await server.client().signIn("carol", password: "battery-staple")
            expectEqual(wrong.status, 401)
            expectEqual(wrong.errorCode, "AUTHENTICATION_FAILED")
            let unknown = try await server.client().signIn("nobody", password: "battery-staple")
            expectEqual(unknown.status, 401)
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
            expectEqual(again.json["userRecordName"]?.stringValue, recordName)
            let other = server.service.userRecordName(container: "iCloud.other", userID: 1)
            #expect(other != recordName)
        }
    }

    @Test func callerAndCurrentUserAnswerWhoIsSignedIn() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let caller = try await alice.get("public", "users/caller")
            expectEqual(caller.status, 200)
            expectEqual(caller.json["userRecordName"]?.stringValue, alice.userRecordName)
            expectEqual(caller.json["users"]?.arrayValue?.first?["userRecordName"]?.stringValue, alice.userRecordName)
            expectEqual(caller.header("X-Apple-CloudKit-Web-Auth-Token"), alice.webAuthToken)
            let current = try await alice.get("public", "users/current")
            expectEqual(current.json["userRecordName"]?.stringValue, alice.userRecordName)
            try await expectEqual(server.client().get("public", "users/caller").status, 421)
        }
    }

    @Test func idleSessionExpires() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            server.clock.advance(milliseconds: 29 * 60 * 1000)
            try await expectEqual(alice.get("private", "zones/list").status, 200)
            // Use refreshed the idle clock: another 29 minutes is still fine.
            server.clock.advance(milliseconds: 29 * 60 * 1000)
            try await expectEqual(alice.get("private", "zones/list").status, 200)
            server.clock.advance(milliseconds: 31 * 60 * 1000)
            let expired = try await alice.get("private", "zones/list")
            expectEqual(expired.status, 421)
            #expect(expired.reason.contains("idle"))
        }
    }

    @Test func revokedAndSignedOutSessionsNoLongerWork() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            try await expectEqual(server.service.revokeSessions(userName: "alice"), 1)
            try await expectEqual(alice.get("private", "zones/list").status, 421)
            let bob = try await server.user("bob")
            let token = try #require(bob.webAuthToken)
            let out = try await bob.send(
                path: "/auth/1/\(TestServer.container)/development/signout", body: Array("{}".utf8),
                rawQuery: "?ckAPIToken=\(server.developmentToken)&ckWebAuthToken=\(token)")
            expectEqual(out.status, 200)
            try await expectEqual(bob.get("private", "zones/list").status, 421)
        }
    }

    @Test func forgedWebAuthTokenRequiresSigningInAgain() async throws {
        try await TestServer.with { server in
            var client = server.client()
            client.webAuthToken = "forged-token-value"
            let response = try await client.get("private", "zones/list")
            expectEqual(response.status, 421)
            #expect(response.header("X-Apple-CloudKit-Web-Auth-Token") == nil)
        }
    }

    @Test func sessionFromDevelopmentDoesNotOpenProduction() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            var production = server.client(environment: .production)
            production.webAuthToken = alice.webAuthToken
            try await expectEqual(production.get("private", "zones/list").status, 421)
        }
    }
}
