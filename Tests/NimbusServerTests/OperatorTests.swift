import Crypto
import Foundation
import NimbusCore
import NimbusStorage
import NimbusTestSupport
import NimbusWire
import Testing

/// The dashboard's operators (issue 21, docs/dashboard.md) over real HTTP: sign-in to an
/// HttpOnly SameSite cookie, sessions that idle out and expire, CSRF on every change,
/// read-only operators, per-container access, and the audit log.
@Suite("operators and the admin API")
struct OperatorTests {
    /// A browser's view of the admin API: the cookie jar and the CSRF token.
    struct Browser {
        let client: APIClient
        var cookie: String?
        var csrf: String?

        init(_ server: TestServer) { client = server.client() }

        /// Passwords this helper chose for one-time ones (tests keep signing in with the one
        /// they were given): a one-time password must be replaced at the first sign-in.
        final class ChosenPasswords: @unchecked Sendable {
            private let lock = NSLock()
            private var chosen: [String: String] = [:]
            subscript(oneTime: String) -> String? {
                get { lock.withLock { chosen[oneTime] } }
                set { lock.withLock { chosen[oneTime] = newValue } }
            }
        }
        static let chosen = ChosenPasswords()

        /// Signs in; a one-time password is replaced by one of the helper's own at once (as the
        /// dashboard makes a person do), unless `choosingOwn` is false.
        mutating func signIn(_ name: String, _ password: String, code: String? = nil, choosingOwn: Bool = true) async throws -> APIResponse {
            var body: JSONObject = ["name": .string(name), "password": .string(Self.chosen[password] ?? password)]
            if let code { body["code"] = .string(code) }
            let response = try await client.send(path: "/admin/1/session", body: Array(JSON.object(body).serialized()))
            if response.status == 200 {
                cookie = response.header("Set-Cookie")?.split(separator: ";").first.map(String.init)
                csrf = response.json["csrfToken"]?.stringValue
                if choosingOwn, response.json["operator"]?["oneTimePasswordExpiresAt"] != nil {
                    let own = password + " (chosen)"
                    let changed = try await post("me/password", ["currentPassword": .string(password), "newPassword": .string(own)])
                    guard changed.status == 200 else { return changed }
                    Self.chosen[password] = own
                }
            }
            return response
        }

        /// A sign-in from a browser of its own, for its answer alone.
        static func attempt(_ server: TestServer, _ name: String, _ password: String, code: String? = nil) async throws -> APIResponse {
            var browser = Browser(server)
            return try await browser.signIn(name, password, code: code)
        }

        func get(_ path: String, query: String = "") async throws -> APIResponse {
            try await client.send(path: "/admin/1/\(path)", body: nil, rawQuery: query, headers: cookie.map { [("Cookie", $0)] } ?? [])
        }

        func post(_ path: String, _ body: JSON = [:], csrf: String? = nil, query: String = "") async throws -> APIResponse {
            var headers = cookie.map { [("Cookie", $0)] } ?? []
            if let token = csrf ?? self.csrf { headers.append(("X-Nimbus-CSRF", token)) }
            return try await client.send(path: "/admin/1/\(path)", body: Array(body.serialized()), rawQuery: query, headers: headers)
        }
    }

    @Test("the first-run link makes one administrator once: a wrong token or a refused password leaves it open; it expires; it closes once an operator exists")
    func firstRunSetup() async throws {
        try await TestServer.with { server in
            let service = server.service
            let closed = try await Browser(server).get("setup")
            expectEqual(closed.json["open"], false, "\(closed.text)")
            let token = try #require(try await service.openFirstRunSetup())
            try await expectEqual(Browser(server).get("setup").json["open"], true)
            func setUp(_ token: String, _ name: String, _ password: String) async throws -> APIResponse {
                try await Browser(server).post("setup", ["token": .string(token), "name": .string(name), "password": .string(password)])
            }
            let wrong = try await setUp("not-the-token", "root", "a long enough password")
            #expect(wrong.status == 401 && wrong.reason.contains("not the one the server printed"), "\(wrong.text)")
            let short = try await setUp(token, "root", "short")
            #expect(short.status == 400 && short.reason.contains("12 characters"), "\(short.text)")
            let badName = try await setUp(token, "root admin", "a long enough password")
            #expect(badName.status == 400 && badName.reason.contains("operator name"), "\(badName.text)")
            #expect(try await service.operators().isEmpty)

            let made = try await setUp(token, "root", "a long enough password")
            expectEqual(made.status, 200, "\(made.text)")
            expectEqual(made.header("Set-Cookie")?.hasPrefix("nimbus_operator="), true)
            #expect(made.json["operator"]?["role"] == "administrator" && made.json["operator"]?["containers"] == nil)
            let operators = try await service.operators()
            expectEqual(operators.map(\.name), ["root"])
            // Signed in by it: the session works, and the chosen password signs in later.
            var browser = Browser(server)
            browser.cookie = made.header("Set-Cookie")?.split(separator: ";").first.map(String.init)
            try await expectEqual(browser.get("operators").status, 200)
            try await expectEqual(Browser.attempt(server, "root", "a long enough password").status, 200)
            // Spent, and closed for good now that an operator exists.
            let again = try await setUp(token, "second", "a long enough password")
            #expect(again.status == 403 && again.reason.contains("an operator exists already"), "\(again.text)")
            try await expectEqual(Browser(server).get("setup").json["open"], false)
            #expect(try await service.openFirstRunSetup() == nil)
            let audit = try await browser.get("audit")
            #expect(audit.text.contains("operators.setup"), "\(audit.text)")
        }
        // An hour later the link no longer works.
        try await TestServer.with { server in
            let token = try #require(try await server.service.openFirstRunSetup())
            server.clock.advance(milliseconds: NimbusService.firstRunSetupMilliseconds + 1)
            let late = try await Browser(server).post(
                "setup", ["token": .string(token), "name": "root", "password": "a long enough password"])
            #expect(late.status == 401 && late.reason.contains("expired"), "\(late.text)")
            #expect(try await server.service.operators().isEmpty)
        }
    }

    @Test("sign-in sets an HttpOnly SameSite cookie; the session knows its operator; sign-out ends it")
    func signInAndOut() async throws {
        try await TestServer.with { server in
            let (_, password) = try await server.service.createOperator(name: "olga", role: .administrator, containers: nil, by: "cli")
            var browser = Browser(server)
            let wrong = try await browser.signIn("olga", "nope")
            #expect(wrong.status == 401 && wrong.errorCode == "AUTHENTICATION_FAILED", "\(wrong.text)")
            let unknown = try await browser.signIn("nobody", password)
            expectEqual(unknown.status, 401)

            let signedIn = try await browser.signIn("olga", password)
            expectEqual(signedIn.status, 200, "\(signedIn.text)")
            let cookie = try #require(signedIn.header("Set-Cookie"))
            #expect(cookie.hasPrefix("nimbus_operator=") && cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"))
            expectEqual(signedIn.json["operator"]?["role"]?.stringValue, "administrator")
            let whoami = try await browser.get("session")
            expectEqual(whoami.json["operator"]?["name"]?.stringValue, "olga", "\(whoami.text)")
            expectEqual(whoami.json["csrfToken"]?.stringValue, browser.csrf)

            let out = try await browser.post("session/end")
            expectEqual(out.status, 200, "\(out.text)")
            expectEqual(out.header("Set-Cookie")?.contains("Max-Age=0"), true)
            let after = try await browser.get("session")
            #expect(after.status == 421 && after.errorCode == "AUTHENTICATION_REQUIRED", "\(after.text)")
            let none = try await Browser(server).get("operators")
            #expect(none.status == 421 && none.reason.contains("sign in"))
        }
    }

    @Test("the one-time password is changed for one of at least 12 characters; the old one stops working")
    func passwordChange() async throws {
        try await TestServer.with { server in
            let (_, password) = try await server.service.createOperator(name: "olga", role: .readOnly, containers: nil, by: "cli")
            var browser = Browser(server)
            let first = try await browser.signIn("olga", password, choosingOwn: false)
            // A one-time password signs in only to choose one's own: who am I, sign out, choose.
            expectEqual(first.json["operator"]?["oneTimePasswordExpiresAt"]?.int64Value, server.clock.nowMilliseconds() + 24 * 3600 * 1000, "\(first.text)")
            try await expectEqual(browser.get("session").status, 200)
            let refused = try await browser.get("operators")
            #expect(refused.status == 403 && refused.reason.contains("one-time password"), "\(refused.text)")
            let same = try await browser.post("me/password", ["currentPassword": .string(password), "newPassword": .string(password)])
            #expect(same.status == 400 && same.reason.contains("is the current one"), "\(same.text)")
            let wrong = try await browser.post("me/password", ["currentPassword": "guess", "newPassword": "a long new password"])
            #expect(wrong.status == 401 && wrong.reason.contains("current password is wrong"), "\(wrong.text)")
            let short = try await browser.post("me/password", ["currentPassword": .string(password), "newPassword": "elevenchars"])
            #expect(short.status == 400 && short.reason.contains("at least 12"), "\(short.text)")
            let tooLong = try await browser.post(
                "me/password", ["currentPassword": .string(password), "newPassword": .string(String(repeating: "é", count: 512) + "x")])
            #expect(tooLong.status == 400 && tooLong.reason.contains("at most 1024 bytes"), "\(tooLong.text)")
            let noCSRF = try await browser.post("me/password", ["currentPassword": .string(password), "newPassword": "twelve chars"], csrf: "x")
            expectEqual(noCSRF.status, 403, "\(noCSRF.text)")
            // Read-only operators change their own password too: it is theirs, not the data's.
            let changed = try await browser.post("me/password", ["currentPassword": .string(password), "newPassword": "twelve chars"])
            expectEqual(changed.status, 200, "\(changed.text)")
            try await expectEqual(browser.get("operators").status, 200, "the whole admin API opens once the password is one's own")
            #expect(try await browser.get("session").json["operator"]?["oneTimePasswordExpiresAt"] == nil)
            try await expectEqual(Browser.attempt(server, "olga", password).status, 401)
            var again = Browser(server)
            try await expectEqual(again.signIn("olga", "twelve chars").status, 200)
            // At the bound: 1024 bytes (512 two-byte characters) are taken.
            let longest = String(repeating: "é", count: 512)
            let atBound = try await again.post("me/password", ["currentPassword": "twelve chars", "newPassword": .string(longest)])
            expectEqual(atBound.status, 200, "\(atBound.text)")
            try await expectEqual(Browser.attempt(server, "olga", longest).status, 200)
            let actions = try await again.get("audit").json["entries"]?.arrayValue?.compactMap { $0["action"]?.stringValue } ?? []
            expectEqual(actions.filter { $0 == "operators.password" }.count, 2, "\(actions)")
        }
    }

    @Test("operators disabled and enabled, limited and promoted, reset and deleted; one-time passwords expire; one administrator of everything always stays")
    func operatorLifecycle() async throws {
        try await TestServer.with { server in
            let service = server.service
            let (_, olgaPassword) = try await service.createOperator(name: "olga", role: .administrator, containers: nil, by: "cli")
            let (_, ritaPassword) = try await service.createOperator(name: "rita", role: .readOnly, containers: nil, by: "cli")
            var olga = Browser(server)
            _ = try await olga.signIn("olga", olgaPassword)
            var rita = Browser(server)
            _ = try await rita.signIn("rita", ritaPassword)
            try await expectEqual(rita.get("operators").status, 200)

            // Disabled: the session ends, sign-in is refused saying why; enabled: back.
            let disabled = try await olga.post("operators/rita", ["disabled": true])
            #expect(disabled.status == 200 && disabled.json["disabled"] == true, "\(disabled.text)")
            try await expectEqual(rita.get("operators").status, 421)
            let refused = try await Browser.attempt(server, "rita", ritaPassword)
            #expect(refused.status == 401 && refused.reason.contains("is disabled"), "\(refused.text)")
            try await expectEqual(Browser.attempt(server, "rita", "a wrong password").reason, "unknown operator or wrong password")
            try await expectEqual(olga.post("operators/rita", ["disabled": false]).status, 200)
            try await expectEqual(rita.signIn("rita", ritaPassword).status, 200)

            // Promoted, then limited to one container: the next request has the new rights.
            _ = try await service.createContainer(id: "iCloud.test.other")
            try await expectEqual(olga.post("operators/rita", ["role": "administrator"]).json["role"], "administrator")
            let limited = try await olga.post("operators/rita", ["containers": ["iCloud.test.other"]])
            expectEqual(limited.json["containers"], ["iCloud.test.other"], "\(limited.text)")
            try await expectEqual(rita.get("containers/\(TestServer.container)/keys").status, 403)
            try await expectEqual(olga.post("operators/rita", ["containers": ["iCloud.nowhere"]]).status, 404)
            try await expectEqual(olga.post("operators/rita", ["role": "owner"]).status, 400)
            // rita, limited, may not change operators.
            try await expectEqual(rita.post("operators/olga", ["disabled": true]).status, 403)

            // olga is the last administrator of everything: she may not disable, limit or demote herself.
            for change: JSON in [["disabled": true], ["containers": ["iCloud.test.other"]], ["role": "read-only"]] {
                let kept = try await olga.post("operators/olga", change)
                #expect(kept.status == 400 && kept.reason.contains("last administrator of every container"), "\(change): \(kept.text)")
            }
            try await expectEqual(olga.post("operators/olga/delete").status, 400)
            // Once rita administers everything again, olga may be demoted.
            #expect(try await olga.post("operators/rita", ["everyContainer": true]).json["containers"] == nil)
            try await expectEqual(olga.post("operators/nobody", ["disabled": true]).status, 404)

            // A reset: a new one-time password, rita's sessions end; it expires after 24 hours.
            let reset = try await olga.post("operators/rita/password")
            let oneTime = try #require(reset.json["password"]?.stringValue, "\(reset.text)")
            try await expectEqual(rita.get("operators").status, 421)
            server.clock.advance(milliseconds: 24 * 3600 * 1000)
            let expired = try await Browser.attempt(server, "rita", oneTime)
            #expect(expired.status == 401 && expired.reason.contains("expired") && expired.reason.contains("nimbus operators passwd rita"), "\(expired.text)")
            _ = try await olga.signIn("olga", olgaPassword)  // her session idled out meanwhile

            let deleted = try await olga.post("operators/rita/delete")
            expectEqual(deleted.status, 200, "\(deleted.text)")
            try await expectEqual(olga.get("operators").json["operators"]?.arrayValue?.compactMap { $0["name"]?.stringValue }, ["olga"])
            let actions = try await olga.get("audit").json["entries"]?.arrayValue?.compactMap { entry -> String? in
                guard let action = entry["action"]?.stringValue, let detail = entry["detail"]?.stringValue else { return nil }
                return "\(action): \(detail)"
            } ?? []
            for expected in [
                "operators.change: operator rita: disabled, sessions ended", "operators.change: operator rita: enabled",
                "operators.change: operator rita: role administrator", "operators.password-reset: operator rita: a new one-time password; sessions ended",
                "operators.delete: operator rita, administrator",
            ] {
                #expect(actions.contains(expected), "\(expected) not in \(actions)")
            }
        }
    }

    @Test("a second factor: enrolled with a confirming code, then asked at sign-in; wrong, missing and replayed codes refused")
    func secondFactor() async throws {
        try await TestServer.with { server in
            let (_, password) = try await server.service.createOperator(name: "olga", role: .administrator, containers: nil, by: "cli")
            var browser = Browser(server)
            _ = try await browser.signIn("olga", password)
            let begun = try await browser.post("me/second-factor")
            let secret = try #require(begun.json["secret"]?.stringValue, "\(begun.text)")
            expectEqual(begun.json["uri"]?.stringValue?.hasPrefix("otpauth://totp/Nimbus:olga?secret=\(secret)"), true)
            func code(stepsAhead: Int64 = 0, _ secret: String = secret) -> String {
                OneTimeCode.code(secret: secret, step: OneTimeCode.step(atMilliseconds: server.clock.nowMilliseconds()) + stepsAhead)!
            }
            // Not confirmed yet: the password alone still signs in.
            try await expectEqual(Browser.attempt(server, "olga", password).status, 200)
            let bad = try await browser.post("me/second-factor/confirm", ["code": "000000"])
            #expect(bad.status == 401 && bad.reason.contains("not the one"), "\(bad.text)")
            let malformed = try await browser.post("me/second-factor/confirm", ["code": "12ab56"])
            expectEqual(malformed.status, 401, "\(malformed.text)")
            let confirmed = try await browser.post("me/second-factor/confirm", ["code": .string(code())])
            expectEqual(confirmed.status, 200, "\(confirmed.text)")
            try await expectEqual(browser.get("session").json["operator"]?["secondFactor"]?.boolValue, true)

            var other = Browser(server)
            let missing = try await other.signIn("olga", password)
            #expect(missing.status == 401 && missing.reason.contains("6-digit code"), "\(missing.text)")
            // The confirming code's step is spent: the same code cannot sign in.
            let replayed = try await other.signIn("olga", password, code: code())
            #expect(replayed.status == 401 && replayed.reason.contains("used already"), "\(replayed.text)")
            let wrongPassword = try await other.signIn("olga", "nope", code: code(stepsAhead: 1))
            #expect(wrongPassword.status == 401 && wrongPassword.reason.contains("wrong password"), "\(wrongPassword.text)")
            // One step ahead (a phone's clock a little fast) is taken; two are not.
            let tooFar = try await other.signIn("olga", password, code: code(stepsAhead: 2))
            #expect(tooFar.status == 401 && tooFar.reason.contains("not the one"), "\(tooFar.text)")
            let signedIn = try await other.signIn("olga", password, code: code(stepsAhead: 1))
            expectEqual(signedIn.status, 200, "\(signedIn.text)")

            // Turning it off takes a current code; then the password alone signs in again.
            server.clock.advance(milliseconds: 60_000)
            let noCode = try await other.post("me/second-factor/remove", ["code": "123"])
            expectEqual(noCode.status, 401, "\(noCode.text)")
            let removed = try await other.post("me/second-factor/remove", ["code": .string(code())])
            expectEqual(removed.status, 200, "\(removed.text)")
            try await expectEqual(Browser.attempt(server, "olga", password).status, 200)
            let none = try await other.post("me/second-factor/remove", ["code": .string(code(stepsAhead: 1))])
            #expect(none.status == 400 && none.reason.contains("no second factor"), "\(none.text)")

            // A lost phone: the command line clears it.
            _ = try await other.post("me/second-factor")
            let second = try #require(try await server.service.operators().first?.pendingSecondFactor)
            server.clock.advance(milliseconds: 60_000)
            try await expectEqual(other.post("me/second-factor/confirm", ["code": .string(code(second))]).status, 200)
            try await expectEqual(Browser.attempt(server, "olga", password).status, 401)
            try await server.service.clearSecondFactor(operatorName: "olga", by: "cli")
            var last = Browser(server)
            try await expectEqual(last.signIn("olga", password).status, 200)
            let actions = try await last.get("audit").json["entries"]?.arrayValue?.compactMap { $0["action"]?.stringValue } ?? []
            #expect(
                actions.prefix(4) == [
                    "operators.second-factor.clear", "operators.second-factor.enable", "operators.second-factor.disable",
                    "operators.second-factor.enable",
                ], "\(actions)")
        }
    }

    @Test("a session idles out after 30 minutes and ends after 12 hours, with a message that says so")
    func sessionsExpire() async throws {
        try await TestServer.with { server in
            let (_, password) = try await server.service.createOperator(name: "olga", role: .administrator, containers: nil, by: "cli")
            var browser = Browser(server)
            _ = try await browser.signIn("olga", password)
            server.clock.advance(milliseconds: 29 * 60 * 1000)
            try await expectEqual(browser.get("session").status, 200)
            server.clock.advance(milliseconds: 31 * 60 * 1000)
            let idle = try await browser.get("session")
            #expect(idle.status == 421 && idle.reason.contains("expired"), "\(idle.text)")

            _ = try await browser.signIn("olga", password)
            var ended: APIResponse?
            var busy = 0
            while ended == nil, busy < 30 {  // busy all along: still over at 12 hours
                server.clock.advance(milliseconds: 29 * 60 * 1000)
                busy += 1
                let answer = try await browser.get("session")
                if answer.status != 200 { ended = answer }
            }
            expectEqual(busy, 25, "12 hours are 24 full steps of 29 minutes; the 25th is past")
            #expect(ended?.status == 421 && ended?.reason.contains("expired") == true, "\(ended?.text ?? "")")
        }
    }

    @Test("changes need the CSRF token; read-only operators and operators of some containers are refused; the audit log records")
    func accessAndAudit() async throws {
        try await TestServer.with { server in
            let (_, password) = try await server.service.createOperator(name: "olga", role: .administrator, containers: nil, by: "cli")
            var admin = Browser(server)
            _ = try await admin.signIn("olga", password)

            // No token, or another one: refused before anything changes.
            for forged in ["", "not-the-token"] {
                let csrf = try await admin.post("operators", ["name": "mallory"], csrf: forged)
                #expect(csrf.status == 403 && csrf.errorCode == "ACCESS_DENIED" && csrf.reason.contains("CSRF"), "\(csrf.text)")
            }
            try await expectEqual(server.service.operators().map(\.name), ["olga"])

            let reader = try await admin.post("operators", ["name": "rita", "role": "read-only"])
            #expect(reader.status == 200 && reader.json["role"]?.stringValue == "read-only", "\(reader.text)")
            let readerPassword = try #require(reader.json["password"]?.stringValue)
            let scoped = try await admin.post("operators", ["name": "sam", "containers": [.string(TestServer.container)]])
            expectEqual(scoped.status, 200, "\(scoped.text)")
            let badRole = try await admin.post("operators", ["name": "x", "role": "god"])
            #expect(badRole.status == 400 && badRole.reason.contains("read-only"), "\(badRole.text)")
            let badName = try await admin.post("operators", ["name": "<script>alert(1)</script>"])
            // Refused; the reason is JSON (application/json), never a page that would run it.
            #expect(badName.status == 400 && badName.header("Content-Type")?.hasPrefix("application/json") == true, "\(badName.text)")
            let taken = try await admin.post("operators", ["name": "rita"])
            expectEqual(taken.errorCode, "EXISTS")
            let unknownContainer = try await admin.post("operators", ["name": "u", "containers": ["iCloud.nope"]])
            expectEqual(unknownContainer.errorCode, "NOT_FOUND")

            var rita = Browser(server)
            _ = try await rita.signIn("rita", readerPassword)
            try await expectEqual(rita.get("operators").json["operators"]?.arrayValue?.count, 3)
            let readOnly = try await rita.post("operators", ["name": "eve"])
            #expect(readOnly.status == 403 && readOnly.reason.contains("read-only"), "\(readOnly.text)")

            var sam = Browser(server)
            _ = try await sam.signIn("sam", try #require(scoped.json["password"]?.stringValue))
            let limited = try await sam.post("operators", ["name": "eve"])
            #expect(limited.status == 403 && limited.reason.contains("limited"), "\(limited.text)")

            // (Each operator chose its own password at first sign-in: those lines aside.)
            let log = (try await admin.get("audit").json["entries"]?.arrayValue ?? []).filter { $0["action"] != "operators.password" }
            expectEqual(log.compactMap { $0["action"]?.stringValue }, ["operators.create", "operators.create", "operators.create"])
            expectEqual(log.first?["operator"]?.stringValue, "olga")
            expectEqual(log.first?["detail"]?.stringValue?.contains("sam"), true)
            expectEqual(log.last?["operator"]?.stringValue, "cli")
            // An operator of some containers sees the entries of those only (these name none).
            try await expectEqual(sam.get("audit").json["entries"]?.arrayValue?.isEmpty, true)
        }
    }
}

extension OperatorTests {
    @Test("containers, API tokens and server keys: made and revoked through the API, audited; read-only and other containers refused")
    func containersTokensAndKeys() async throws {
        try await TestServer.with { server in
            let service = server.service
            let (_, password) = try await service.createOperator(name: "olga", role: .administrator, containers: nil, by: "cli")
            let (_, samPassword) = try await service.createOperator(
                name: "sam", role: .administrator, containers: [TestServer.container], by: "cli")
            let (_, ritaPassword) = try await service.createOperator(name: "rita", role: .readOnly, containers: nil, by: "cli")
            var olga = Browser(server)
            _ = try await olga.signIn("olga", password)
            var sam = Browser(server)
            _ = try await sam.signIn("sam", samPassword)
            var rita = Browser(server)
            _ = try await rita.signIn("rita", ritaPassword)

            let created = try await olga.post("containers", ["id": "iCloud.com.example.notes"])
            expectEqual(created.status, 200, "\(created.text)")
            try await expectEqual(olga.post("containers", ["id": "iCloud.com.example.notes"]).errorCode, "EXISTS")
            try await expectEqual(olga.post("containers", ["id": "not a container"]).status, 400)
            try await expectEqual(sam.post("containers", ["id": "iCloud.sams"]).status, 403)
            let olgaSees = try await olga.get("containers").json["containers"]?.arrayValue?.compactMap { $0["id"]?.stringValue }
            expectEqual(Set(olgaSees ?? []), ["iCloud.com.example.notes", TestServer.container], "\(olgaSees ?? [])")
            let samSees = try await sam.get("containers").json["containers"]?.arrayValue?.compactMap { $0["id"]?.stringValue }
            expectEqual(samSees, [TestServer.container])

            // A token: answered once, and it works; the log keeps no token.
            let token = try await olga.post(
                "containers/iCloud.com.example.notes/tokens", ["environment": "development", "allowedOrigins": ["https://notes.example.com"]])
            let apiToken = try #require(token.json["apiToken"]?.stringValue, "\(token.text)")
            let client = APIClient(
                baseURL: server.baseURL, container: "iCloud.com.example.notes", environment: .development, apiToken: apiToken,
                webAuthToken: nil, userRecordName: nil)
            #expect(try await client.get("public", "zones/list").status != 401)
            try await expectEqual(olga.post("containers/iCloud.com.example.notes/tokens", ["environment": "staging"]).status, 400)
            try await expectEqual(sam.post("containers/iCloud.com.example.notes/tokens", ["environment": "development"]).status, 403)
            try await expectEqual(rita.post("containers/iCloud.com.example.notes/tokens", ["environment": "development"]).status, 403)
            let revoked = try await olga.post("containers/iCloud.com.example.notes/tokens/revoke", [:])
            expectEqual(revoked.json["revoked"], 1, "\(revoked.text)")
            try await expectEqual(client.get("public", "zones/list").status, 401)

            // A server-to-server key of sam's container; sam cannot see another's.
            let pem = P256.Signing.PrivateKey().publicKey.pemRepresentation
            let key = try await sam.post("containers/\(TestServer.container)/keys", ["environment": "development", "publicKeyPEM": .string(pem)])
            let keyID = try #require(key.json["keyID"]?.stringValue, "\(key.text)")
            let keys = try await sam.get("containers/\(TestServer.container)/keys").json["keys"]?.arrayValue ?? []
            #expect(keys.first?["keyID"]?.stringValue == keyID && keys.first?["revoked"] == false)
            try await expectEqual(sam.get("containers/iCloud.com.example.notes/keys").status, 403)
            try await expectEqual(olga.post("containers/iCloud.com.example.notes/keys/\(keyID)/revoke").errorCode, "NOT_FOUND")
            try await expectEqual(sam.post("containers/\(TestServer.container)/keys/\(keyID)/revoke").status, 200)
            try await expectEqual(sam.get("containers/\(TestServer.container)/keys").json["keys"]?.arrayValue?.first?["revoked"], true)

            let log = try await olga.get("audit").json["entries"]?.arrayValue ?? []
            let actions = log.compactMap { $0["action"]?.stringValue }
            expectEqual(Array(actions.prefix(5)), ["keys.revoke", "keys.add", "tokens.revoke", "tokens.create", "containers.create"], "\(actions)")
            #expect(!log.contains { $0["detail"]?.stringValue?.contains(apiToken) == true })
            // Sam sees the entries of his container only.
            let samsLog = try await sam.get("audit").json["entries"]?.arrayValue?.compactMap { $0["action"]?.stringValue }
            expectEqual(samsLog, ["keys.revoke", "keys.add"], "\(samsLog ?? [])")
        }
    }
}

/// The route table: one authentication in front of every route.
extension OperatorTests {
    /// The admin API's routes as the route files declare them (`OperatorRoutes.get` and `post`),
    /// and the ones registered around the route table, each as (method, path).
    static func declaredRoutes() throws -> (authenticated: [(String, String)], unauthenticated: [(String, String)]) {
        let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Sources/NimbusServer/Routes")
        let table = try Regex(#"routes\.(get|post)\((?:RouterPath\()?"([^"]+)""#)
        let around = try Regex(#"admin\.(get|post)\("([^"]+)""#)
        var authenticated: [(String, String)] = []
        var unauthenticated: [(String, String)] = []
        for file in try FileManager.default.contentsOfDirectory(atPath: folder.path) where file.hasSuffix(".swift") {
            let text = try String(contentsOf: folder.appendingPathComponent(file), encoding: .utf8)
            for match in text.matches(of: table) {
                authenticated.append((String(match.output[1].substring!), String(match.output[2].substring!)))
            }
            for match in text.matches(of: around) {
                unauthenticated.append((String(match.output[1].substring!), String(match.output[2].substring!)))
            }
        }
        return (authenticated, unauthenticated)
    }

    @Test("every admin route but signing in and the first run's setup needs a session, and every POST also the session's CSRF token")
    func everyRouteIsBehindOneAuthentication() async throws {
        let routes = try Self.declaredRoutes()
        #expect(routes.authenticated.count >= 50, "the scan found \(routes.authenticated.count) routes")
        #expect(
            Set(routes.unauthenticated.map { "\($0.0) \($0.1)" }) == ["post session", "get setup", "post setup"],
            "a route registered around the route table: \(routes.unauthenticated)")
        try await TestServer.with { server in
            let (_, password) = try await server.service.createOperator(name: "olga", role: .administrator, containers: nil, by: "cli")
            var browser = Browser(server)
            try await expectEqual(browser.signIn("olga", password).status, 200)
            for (method, declared) in routes.authenticated {
                // Parameters filled with names that exist nowhere: authentication comes first.
                let path = declared.split(separator: "/").map { $0.hasPrefix(":") ? "nothing" : String($0) }
                    .joined(separator: "/").replacingOccurrences(of: "\\(call.path)", with: "records/query")
                let anonymous = method == "get" ? try await Browser(server).get(path) : try await Browser(server).post(path)
                #expect(anonymous.status == 421 && anonymous.errorCode == "AUTHENTICATION_REQUIRED", "\(method) \(path): \(anonymous.text)")
                if method == "post" {
                    let forged = try await browser.post(path, csrf: "forged")
                    #expect(forged.status == 403 && forged.reason.contains("CSRF"), "\(method) \(path): \(forged.text)")
                }
            }
            // The session still works: nothing above signed it out.
            try await expectEqual(browser.get("session").status, 200)
        }
    }
}

@Suite struct OperatorCommandTests {
    @Test("nimbus operators create prints a one-time password that signs in to the served admin API")
    func createdOnTheCommandLine() async throws {
        let directory = NSTemporaryDirectory() + "nimbus-operators-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let data = try await NimbusProcess.dataArguments(directory)
        let printed = try NimbusProcess.run(["operators", "create", "olga", "--read-only", "--create"] + data)
        let password = try #require(printed.components(separatedBy: "one-time password: ").last?.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(printed.hasPrefix("operator olga (read-only)"), "\(printed)")
        #expect(try NimbusProcess.run(["operators", "list"] + data).contains("olga\tread-only\tevery container"))
        #expect(throws: (any Error).self) { try NimbusProcess.run(["operators", "create", "olga"] + data) }

        let server = try await NimbusProcess.serve(dataDirectory: directory)
        defer { server.stop() }
        let client = APIClient(
            baseURL: server.baseURL, container: "iCloud.nimbus.default", environment: .development, apiToken: nil, webAuthToken: nil,
            userRecordName: nil)
        let signedIn = try await client.send(
            path: "/admin/1/session", body: Array(JSON.object(["name": "olga", "password": .string(password)]).serialized()))
        #expect(signedIn.status == 200 && signedIn.json["operator"]?["role"]?.stringValue == "read-only", "\(signedIn.text)")

        // `nimbus admin`: the same API from a shell, the request log included (it lives in the
        // server's memory, so only the server can answer).
        let admin = ["admin", "--server", server.baseURL, "--operator", "olga"]
        // The one-time password opens nothing but choosing one's own, from a shell too.
        #expect(throws: (any Error).self) {
            try NimbusProcess.run(admin + ["GET", "operators"], environment: ["NIMBUS_OPERATOR_PASSWORD": password])
        }
        let own = "olga's own password"
        _ = try NimbusProcess.run(
            admin + ["POST", "me/password", "--body", #"{"currentPassword":"\#(password)","newPassword":"\#(own)"}"#],
            environment: ["NIMBUS_OPERATOR_PASSWORD": password])
        _ = try await client.post("public", "records/query", ["query": ["recordType": "Note"]])  // no API token: refused, logged
        // (A request is logged once answered: on a busy machine the answer can beat the entry.)
        var log = ""
        var entries: [JSON] = []
        for _ in 0..<20 where entries.isEmpty {
            log = try NimbusProcess.run(admin + ["GET", "requests?error=AUTHENTICATION_FAILED"], environment: ["NIMBUS_OPERATOR_PASSWORD": own])
            entries = try JSON.parse(Array(log.utf8))["requests"]?.arrayValue ?? []
            if entries.isEmpty { try await Task.sleep(for: .milliseconds(250)) }
        }
        #expect(entries.count == 1 && entries.first?["route"]?.stringValue?.hasSuffix("records/query") == true, "\(log)")
        let diff = try NimbusProcess.run(admin + ["GET", "containers/iCloud.nimbus.default/schema/deploy"], environment: ["NIMBUS_OPERATOR_PASSWORD": own])
        try expectEqual(JSON.parse(Array(diff.utf8))["conflicts"]?.arrayValue?.isEmpty, true, "\(diff)")
        // A read-only operator's change is refused: the exit status says so.
        #expect(throws: (any Error).self) {
            try NimbusProcess.run(
                admin + ["POST", "containers", "--body", #"{"id":"iCloud.nope"}"#], environment: ["NIMBUS_OPERATOR_PASSWORD": own])
        }
        #expect(throws: (any Error).self) {
            try NimbusProcess.run(admin + ["GET", "requests"], environment: ["NIMBUS_OPERATOR_PASSWORD": "wrong"])
        }
        // Nobody there: one line naming the address tried and how to name another.
        let closed = try ChildProcess(
            NimbusProcess.binary, ["admin", "--server", "http://127.0.0.1:9", "--operator", "olga", "GET", "operators"],
            environment: NimbusProcess.environment.merging(["NIMBUS_OPERATOR_PASSWORD": password]) { $1 }, output: .discard, error: .pipe)
        let said = String(decoding: closed.standardError!.readDataToEndOfFile(), as: UTF8.self)
        expectEqual(closed.terminationStatus, 1, "\(said)")
        expectEqual(said, "nimbus: no Nimbus server answered at http://127.0.0.1:9 (connection refused); start one, or name it with --server URL (a local one on another port: NIMBUS_PORT)\n", "\(said)")
    }

    @Test("operators delete and passwd; users list and passwd: each does what it says, and refuses what it should")
    func accountVerbs() async throws {
        let directory = NSTemporaryDirectory() + "nimbus-account-verbs-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let data = try await NimbusProcess.dataArguments(directory)
        func run(_ arguments: [String], environment: [String: String] = [:], input: String? = nil) throws -> (Int32, String, String) {
            try NimbusProcess.answer(arguments + data, environment: environment, input: input)
        }
        _ = try NimbusProcess.run(["operators", "create", "olga", "--create"] + data)
        _ = try NimbusProcess.run(["operators", "create", "rita", "--read-only"] + data)
        // The last administrator of every container stays.
        let last = try run(["operators", "delete", "olga"])
        #expect(last.0 == 1 && last.2.contains("last administrator"), "\(last)")
        let reset = try run(["operators", "passwd", "rita"])
        let password = try #require(reset.1.components(separatedBy: "one-time password: ").last?.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(reset.0 == 0 && password.count >= 20, "\(reset)")
        #expect(try run(["operators", "passwd", "nobody"]).2.contains("no operator 'nobody'"))
        // Disabled and enabled, changed; never the last administrator of every container.
        let lastOne = try run(["operators", "disable", "olga"])
        #expect(lastOne.0 == 1 && lastOne.2.contains("last administrator of every container"), "\(lastOne)")
        #expect(try run(["operators", "disable", "rita"]).1.contains("operator rita disabled"))
        func state(_ name: String) throws -> String? {
            try NimbusProcess.run(["operators", "list"] + data).split(separator: "\n")
                .map { $0.split(separator: "\t").map(String.init) }.first { $0.first == name }?[3]
        }
        try expectEqual(state("rita"), "disabled")
        try expectEqual(run(["operators", "enable", "rita"]).0, 0)
        try expectEqual(state("rita"), "one-time password")
        let promoted = try run(["operators", "set", "rita", "--role", "administrator", "--container", "iCloud.nowhere"])
        #expect(promoted.0 == 1 && promoted.2.contains("'iCloud.nowhere' does not exist"), "\(promoted)")
        #expect(try run(["operators", "set", "rita", "--role", "administrator"]).1.contains("operator rita: administrator, every container"))
        #expect(try run(["operators", "set", "rita"]).0 != 0, "a set that changes nothing is refused")
        try expectEqual(run(["operators", "delete", "rita"]).0, 0)
        try expectEqual(NimbusProcess.run(["operators", "list"] + data).split(separator: "\n").map { $0.split(separator: "\t").first }, ["olga"])
        #expect(try run(["operators", "delete", "rita"]).2.contains("no operator 'rita'"))

        _ = try NimbusProcess.run(["users", "create", "ada", "--password", "first-password", "--email", "ada@example.com"] + data)
        _ = try NimbusProcess.run(["users", "create", "bob", "--password", "first-password"] + data)
        let listed = try NimbusProcess.run(["users", "list"] + data).split(separator: "\n").map { $0.split(separator: "\t").map(String.init) }
        #expect(listed.map(\.first) == ["ada", "bob"] && listed.first?[2] == "ada@example.com" && listed.last?[2] == "-", "\(listed)")
        #expect(try run(["users", "passwd", "ada"], input: "short\n").2.contains("8 to 1024 bytes"))
        #expect(try run(["users", "passwd", "nobody"], environment: ["NIMBUS_USER_PASSWORD": "second-password"]).2.contains("no user 'nobody'"))
        let changed = try run(["users", "passwd", "ada"], input: "second-password\n")
        #expect(changed.0 == 0 && changed.1.contains("signed out everywhere"), "\(changed)")
        // Disabled and enabled (the list says which); deleted, which wants --yes.
        #expect(try run(["users", "disable", "bob"]).1.contains("user bob disabled"))
        func userState(_ name: String) throws -> String? {
            try NimbusProcess.run(["users", "list"] + data).split(separator: "\n").map { $0.split(separator: "\t").map(String.init) }
                .first { $0.first == name }?.last
        }
        try expectEqual(userState("bob"), "disabled")
        try expectEqual(userState("ada"), "active")
        try expectEqual(run(["users", "enable", "bob"]).0, 0)
        try expectEqual(userState("bob"), "active")
        let unasked = try run(["users", "delete", "bob"])
        #expect(unasked.0 != 0 && unasked.2.contains("--yes"), "\(unasked)")
        try expectEqual(userState("bob"), "active")
        let deleted = try run(["users", "delete", "bob", "--yes"])
        #expect(deleted.0 == 0 && deleted.1.contains("user bob deleted"), "\(deleted)")
        #expect(try userState("bob") == nil)
        #expect(try run(["users", "delete", "bob", "--yes"]).2.contains("no user 'bob'"))
        #expect(try run(["users", "disable", "bob"]).2.contains("no user 'bob'"))

        // The new password signs in; the old one does not.
        let server = try await NimbusProcess.serve(dataDirectory: directory)
        defer { server.stop() }
        let token = try #require(server.output.split(separator: "\n").first { $0.hasPrefix("development API token: ") }?.split(separator: " ").last)
        let client = APIClient(
            baseURL: server.baseURL, container: "iCloud.nimbus.default", environment: .development, apiToken: String(token), webAuthToken: nil,
            userRecordName: nil)
        try await expectEqual(client.signIn("ada", password: "first-password").status, 401)
        let signedIn = try await client.signIn("ada", password: "second-password")
        expectEqual(signedIn.status, 200)

        // The sync doctor on the command line: a device that fetched a zone, read back from the
        // store the running server writes a second later.
        var phone = client.onDevice("ada-phone")
        phone.webAuthToken = signedIn.json["ckWebAuthToken"]?.stringValue
        try await expectEqual(phone.createZone("Notes").status, 200)
        try await expectEqual(phone.zoneChanges("Notes").status, 200)
        var devices = ""
        for _ in 0..<50 where !devices.contains("device ada-phone") {
            try await Task.sleep(for: .milliseconds(100))
            devices = try NimbusProcess.run(["users", "devices", "ada", "--container", "iCloud.nimbus.default"] + data)
        }
        #expect(devices.contains("device ada-phone") && devices.contains("  zone Notes\tcurrent\t"), "\(devices)")
        #expect(devices.contains("  pushes\tnone missed"), "\(devices)")
        #expect(try run(["users", "devices", "nobody", "--container", "iCloud.nimbus.default"]).2.contains("no user 'nobody'"))
        #expect(try run(["users", "devices", "ada", "--container", "iCloud.nimbus.default", "--environment", "staging"]).0 != 0)

        // One convention for the container (--container), and sizes people read (defects 27, 29).
        let quotas = try NimbusProcess.run(["quotas", "show", "--container", "iCloud.nimbus.default", "--user", "ada"] + data)
        #expect(quotas.contains("privateDatabaseBytes = 1073741824 = 1.0 GB  (default)"), "\(quotas)")
        #expect(quotas.contains("ada's private database (development): ") && quotas.contains(" of 1.0 GB"), "\(quotas)")
        #expect(try run(["quotas", "show", "iCloud.nimbus.default"]).0 != 0)
        #expect(try NimbusProcess.run(["limits", "show", "--container", "iCloud.nimbus.default"] + data).contains("userRequestsPerMinute"))

        // API tokens listed by id, name and last use (never the token itself); one revoked by its id.
        let container = ["--container", "iCloud.nimbus.default"]
        let named = try NimbusProcess.run(["tokens", "create", "--name", "CI job"] + container + data)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let listing = try NimbusProcess.run(["tokens", "list"] + container + data)
        #expect(!listing.contains(named) && !listing.contains(String(token)), "a token itself is listed")
        let rows = listing.split(separator: "\n").map { $0.split(separator: "\t").map(String.init) }
        let ci = try #require(rows.first { $0.count == 6 && $0[2] == "CI job" }, "\(listing)")
        #expect(ci[1] == "development" && ci[4] == "never" && ci[5] == "active", "\(ci)")
        #expect(rows.contains { $0.count == 6 && $0[2] == "-" && $0[4] != "never" }, "the banner's token, used to sign in: \(listing)")
        let revoked = try run(["tokens", "revoke", "--id", ci[0]] + container)
        #expect(revoked.0 == 0 && revoked.1.contains("revoked \(ci[0]) 'CI job'"), "\(revoked)")
        #expect(try run(["tokens", "revoke", "--id", ci[0]] + container).2.contains("no live API token"))
        #expect(try run(["tokens", "revoke", "--id", ci[0], "--environment", "development"] + container).0 != 0)
        #expect(try NimbusProcess.run(["tokens", "list"] + container + data).contains("CI job\t"))
    }

    @Test("nimbus schema diff, remove and reset-development work on the data directly; each refuses what it should")
    func schemaVerbs() async throws {
        let directory = NSTemporaryDirectory() + "nimbus-schema-verbs-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let data = try await NimbusProcess.dataArguments(directory)
        let container = "iCloud.verbs"
        _ = try NimbusProcess.run(["containers", "create", container, "--create"] + data)
        #expect(try NimbusProcess.run(["schema", "diff", "--container", container] + data).contains("production has everything"))
        #expect(throws: (any Error).self) {
            try NimbusProcess.run(["schema", "remove", "--container", container, "--record-type", "Nope"] + data)
        }
        #expect(throws: (any Error).self) {
            try NimbusProcess.run(["schema", "reset-development", "--container", container, "--confirm", "iCloud.other"] + data)
        }
        let reset = try NimbusProcess.run(["schema", "reset-development", "--container", container, "--confirm", container] + data)
        #expect(reset.hasPrefix("development reset:"), "\(reset)")
    }

}
