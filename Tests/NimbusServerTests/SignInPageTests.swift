import Foundation
import NimbusCore
import NimbusTestSupport
import NimbusWire
import Testing

/// CloudKit JS's sign-in flow (issue 16, reference §12.2) in a real headless Chromium
/// (`Tests/Scripts/sign_in_flow.py`, selenium): a 421's `redirectURL` opens Nimbus's sign-in
/// page as a popup, which hands the session to the app page that opened it; with a sign-in
/// callback on the API token, the browser lands on the callback with `ckWebAuthToken`.
@Suite struct SignInPageTests {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Scripts/sign_in_flow.py").path

    @Test func cloudKitJSSignsInThroughThePageInChromium() async throws {
        try await TestServer.with { server in
            _ = try await server.service.createUser(name: "ann", password: "password-ann")
            // The callback is any page the browser can land on: this server's /health will do
            // (a port picked by the test could be taken by another test's server meanwhile).
            let callback = "\(server.baseURL)/health?app=1"
            let callbackToken = try await server.service.createAPIToken(
                container: TestServer.container, environment: .development, signInCallback: callback)
            // The redirectURLs a client gets with each token when it needs a user.
            func redirectURL(_ apiToken: String) async throws -> String {
                var client = server.client()
                client.apiToken = apiToken
                let answer = try await client.get("private", "zones/list")
                expectEqual(answer.status, 421, "\(answer.text)")
                return try #require(answer.json["redirectURL"]?.stringValue, "\(answer.text)")
            }
            let config: JSON = [
                "signInURL": .string(try await redirectURL(server.developmentToken)),
                "callbackSignInURL": .string(try await redirectURL(callbackToken)),
                "callback": .string(callback), "username": "ann", "password": "password-ann", "wrongPassword": "not-the-password",
            ]
            let configFile = NSTemporaryDirectory() + "nimbus-signin-" + UUID().uuidString + ".json"
            try Data(config.serialized()).write(to: URL(fileURLWithPath: configFile))
            defer { try? FileManager.default.removeItem(atPath: configFile) }
            let (status, printed) = try await ExternalProcess.run(["python3", Self.script, configFile])
            expectEqual(status, 0, "sign_in_flow.py failed")
            let result = try JSON.parse(printed)
            expectEqual(result["wrongPasswordText"]?.stringValue?.contains("wrong password"), true, "\(result)")
            let session = try #require(result["openerSession"]?.stringValue)
            expectEqual(result["openerWebAuthToken"]?.stringValue, session)
            let fromCallback = try #require(result["callbackToken"]?.stringValue)
            // Both are live sessions of Ann's.
            for token in [session, fromCallback] {
                var client = server.client()
                client.webAuthToken = token
                let caller = try await client.get("public", "users/caller")
                #expect(caller.status == 200 && caller.json["nameComponents"]?["nickname"] == "ann", "\(caller.text)")
            }
        }
    }

    @Test func aSignInCallbackMustBeAnAbsoluteWebURL() async throws {
        try await TestServer.with { server in
            for bad in ["/relative", "javascript:alert(1)", "ftp://example.com/x", "https://example.com/#frag", "not a url"] {
                await #expect(throws: CloudKitError.self, "\(bad)") {
                    _ = try await server.service.createAPIToken(
                        container: TestServer.container, environment: .development, signInCallback: bad)
                }
            }
            // The page carries the callback as a script literal that cannot close the script.
            let token = try await server.service.createAPIToken(
                container: TestServer.container, environment: .development, signInCallback: "https://example.com/a?b=</script>")
            var client = server.client()
            client.apiToken = token
            let page = try await client.send(path: "/auth/1/\(TestServer.container)/development/signin", body: nil)
            expectEqual(page.status, 200)
            #expect(!page.text.contains("b=</script>") && page.text.contains("b=\\u003c/script>"), "\(page.text)")
        }
    }
}
