import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import NIOSSL
import NimbusCore
import NimbusStorage
import NimbusTestSupport
import NimbusWire
import Testing

/// APNs delivery against a local HTTP/2 stand-in, and the web-courier long poll.
@Suite struct PushDeliveryTests {
    static let teamID = "TEAM123456"
    static let keyID = "KEY1234567"
    static let topic = "com.example.notes"

    /// A device token: 64 hex digits that differ by `n`.
    static func deviceToken(_ n: Int) -> String { String(repeating: "ab", count: 31) + String(format: "%02x", n) }

    /// A Nimbus server pushing to `standIn`, with APNs credentials for the test container.
    static func withPushServer(
        _ standIn: APNsStandIn, maxAttempts: Int = 5, _ body: (TestServer, P256.Signing.PrivateKey) async throws -> Void
    ) async throws {
        let key = P256.Signing.PrivateKey()
        try await TestServer.with(configure: { configuration in
            configuration.apns.productionEndpoint = standIn.endpoint
            configuration.apns.developmentEndpoint = standIn.endpoint
            configuration.apns.trustedCertificatesFile = standIn.certificateFile
            configuration.apns.firstRetryDelay = .milliseconds(10)
            configuration.apns.maxAttempts = maxAttempts
        }) { server in
            try await server.service.setAPNsCredentials(
                container: TestServer.container, teamID: teamID, keyID: keyID, topic: topic,
                privateKeyPEM: key.pemRepresentation)
            try await body(server, key)
        }
    }

    static func register(_ client: APIClient, token: String) async throws {
        let response = try await client.device("tokens/register", ["apnsToken": .string(token), "apnsEnvironment": "development"])
        guard response.status == 200 else { throw TestFailure("registering failed: \(response.text)") }
    }

    static func withStandIn(_ body: (APNsStandIn) async throws -> Void) async throws {
        let standIn = try await APNsStandIn.start()
        do {
            try await body(standIn)
            await standIn.stop()
        } catch {
            await standIn.stop()
            throw error
        }
    }

    /// Checks an `authorization: bearer <JWT>` header: ES256, the key's ID, the team, a
    /// current `iat`, and a signature the key's public half verifies.
    static func checkProviderToken(_ header: String?, key: P256.Signing.PrivateKey) throws {
        let jwt = try #require(header?.hasPrefix("bearer ") == true ? header?.dropFirst(7) : nil)
        let parts = jwt.split(separator: ".").map(String.init)
        try #require(parts.count == 3)
        let headerBytes = try #require(Credentials.fromBase64URL(parts[0]))
        let claimBytes = try #require(Credentials.fromBase64URL(parts[1]))
        let signatureBytes = try #require(Credentials.fromBase64URL(parts[2]))
        let jwtHeader = try JSON.parse(headerBytes)
        let claims = try JSON.parse(claimBytes)
        expectEqual(jwtHeader, ["alg": "ES256", "kid": .string(keyID)])
        expectEqual(claims["iss"], .string(teamID))
        let issuedAt = try #require(claims["iat"]?.int64Value)
        #expect(abs(Double(issuedAt) - Date().timeIntervalSince1970) < 120)
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: signatureBytes)
        #expect(key.publicKey.isValidSignature(signature, for: Data((parts[0] + "." + parts[1]).utf8)))
    }

    @Test func silentAndAlertPushesCarryAPNsHeadersAProviderTokenAndThePayload() async throws {
        try await Self.withStandIn { standIn in
            try await Self.withPushServer(standIn) { server, key in
                let alice = try await server.user("alice")
                let phone = alice.onDevice("phone")
                let laptop = alice.onDevice("laptop")
                try await Self.register(phone, token: Self.deviceToken(1))
                try await Self.register(laptop, token: Self.deviceToken(2))
                _ = try await laptop.modify([Op.create("seed", ["title": Op.field("seed")])])  // defines Note
                try await NotificationTests.subscribe(
                    phone,
                    ["subscriptionID": "db", "subscriptionType": "database", "notificationInfo": ["shouldSendContentAvailable": true]])

                // The laptop's change reaches the phone, not the laptop itself.
                _ = try await laptop.createZone("Notes")
                let silent = try #require(try await standIn.received(count: 1).first)
                expectEqual(silent.path, "/3/device/\(Self.deviceToken(1))")
                #expect(silent.isHTTP2)
                expectEqual(silent.headers["apns-topic"], Self.topic)
                expectEqual(silent.headers["apns-push-type"], "background")
                expectEqual(silent.headers["apns-priority"], "5")
                #expect(silent.headers["apns-collapse-id"] == nil)
                expectEqual(silent.body["aps"], ["content-available": 1])
                expectEqual(silent.body["ck"]?["met"]?["sid"], "db")
                expectEqual(silent.body["ck"]?["ce"], 1)
                try Self.checkProviderToken(silent.headers["authorization"], key: key)
                let nid = try #require(silent.body["ck"]?["nid"]?.stringValue)
                expectEqual(silent.headers["apns-id"], UUID(uuidString: nid)?.uuidString)

                // An alert collapsed by a record field's value: the second replaces the first on the device.
                try await NotificationTests.subscribe(
                    phone,
                    SubscriptionTests.querySubscription(
                        "notes", filters: [], info: ["alertBody": "A note changed", "collapseIDKey": "topic"]))
                _ = try await laptop.modify([Op.create("n1", ["title": Op.field("one"), "topic": Op.field("weekly")])])
                _ = try await laptop.modify([Op.create("n2", ["title": Op.field("two"), "topic": Op.field("weekly")])])
                // The database subscription fires for each save too: 1 + 2 silent, 2 alerts.
                let all = try await standIn.received(count: 5)
                let alerts = all.filter { $0.headers["apns-push-type"] == "alert" }
                expectEqual(alerts.count, 2)
                for alert in alerts {
                    expectEqual(alert.headers["apns-priority"], "10")
                    expectEqual(alert.headers["apns-collapse-id"], "weekly")
                    expectEqual(alert.body["aps"]?["alert"]?["body"], "A note changed")
                    expectEqual(alert.deviceToken, Self.deviceToken(1))
                }
                expectEqual(Set(alerts.compactMap { $0.body["ck"]?["qry"]?["rid"]?.stringValue }), ["n1", "n2"])
                // Nothing ever went to the laptop's token; the pushes reused one provider token.
                try await Task.sleep(for: .milliseconds(200))
                #expect(standIn.received.allSatisfy { $0.deviceToken == Self.deviceToken(1) })
                expectEqual(Set(standIn.received.compactMap { $0.headers["authorization"] }).count, 1)
                // The sync doctor counts what APNs took as sent to the phone, none to the laptop.
                try await server.service.flushDeviceSync()
                let report = try await server.service.deviceSyncReport(container: TestServer.container, environment: .development, userName: "alice")
                #expect(report.devices.first { $0.deviceID == "phone" }?.push.lastSentAt != nil, "\(report)")
                #expect(report.devices.first { $0.deviceID == "laptop" }?.push.lastSentAt == nil, "\(report)")
            }
        }
    }

    /// The check that pushes use HTTP/2 can fail: an HTTP/1.1 request is seen as one.
    @Test func theStandInTellsHTTP2FromHTTP1() async throws {
        try await Self.withStandIn { standIn in
            for version in [HTTPClient.Configuration.HTTPVersion.http1Only, .automatic] {
                var tls = TLSConfiguration.makeClientConfiguration()
                tls.additionalTrustRoots = [.file(standIn.certificateFile)]
                var configuration = HTTPClient.Configuration(tlsConfiguration: tls)
                configuration.httpVersion = version
                let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
                var request = HTTPClientRequest(url: standIn.endpoint + "/3/device/" + Self.deviceToken(9))
                request.method = .POST
                request.body = .bytes(ByteBuffer(string: "{}"))
                _ = try await client.execute(request, timeout: .seconds(10))
                try await client.shutdown()
            }
            expectEqual(standIn.received.map(\.isHTTP2), [false, true])
        }
    }

    @Test func deadTokensAreRemovedAndTransientFailuresRetried() async throws {
        try await Self.withStandIn { standIn in
            try await Self.withPushServer(standIn) { server, _ in
                let alice = try await server.user("alice")
                let unregistered = Self.deviceToken(1), bad = Self.deviceToken(2)
                let flaky = Self.deviceToken(3), wrongTopic = Self.deviceToken(4)
                for (index, token) in [unregistered, bad, flaky, wrongTopic].enumerated() {
                    try await Self.register(alice.onDevice("device-\(index)"), token: token)
                }
                standIn.script(unregistered, [.init(410, "Unregistered")])
                standIn.script(bad, [.init(400, "BadDeviceToken")])
                standIn.script(flaky, [.init(503, "ServiceUnavailable"), .init(429, "TooManyRequests"), .init(500, "InternalServerError")])
                standIn.script(wrongTopic, [.init(400, "DeviceTokenNotForTopic")])
                try await NotificationTests.subscribe(alice, ["subscriptionID": "db", "subscriptionType": "database"])

                _ = try await alice.onDevice("web").createZone("Notes")
                // 1 + 1 + (3 failures + 1 success) + 1
                let received = try await standIn.received(count: 7)
                expectEqual(received.filter { $0.deviceToken == flaky }.count, 4)
                let owner = NotificationOwner(
                    container: TestServer.container, environment: .development,
                    userID: try await server.directory.storage.accounts.user(name: "alice")?.id ?? -1)
                var remaining: Set<String> = []
                for _ in 0..<100 {
                    remaining = Set(try await server.service.pushTokens(of: owner).map(\.token))
                    if remaining.count == 2 { break }
                    try await Task.sleep(for: .milliseconds(20))
                }
                // A token APNs calls dead is forgotten; a topic mismatch is a configuration
                // problem, not the device's, so its token stays.
                expectEqual(remaining, [flaky, wrongTopic])

                // The next change goes only to the tokens that are left.
                _ = try await alice.onDevice("web").createZone("More")
                let after = try await standIn.received(count: 9).dropFirst(7)
                expectEqual(Set(after.map(\.deviceToken)), [flaky, wrongTopic])
            }
        }
    }

    @Test func anExpiredProviderTokenIsReplacedAndThePushRetried() async throws {
        try await Self.withStandIn { standIn in
            try await Self.withPushServer(standIn) { server, key in
                let alice = try await server.user("alice")
                try await Self.register(alice.onDevice("phone"), token: Self.deviceToken(1))
                standIn.script(Self.deviceToken(1), [.init(403, "ExpiredProviderToken")])
                try await NotificationTests.subscribe(alice, ["subscriptionID": "db", "subscriptionType": "database"])
                _ = try await alice.onDevice("web").createZone("Notes")
                let received = try await standIn.received(count: 2)
                #expect(received[0].headers["authorization"] != received[1].headers["authorization"])
                try Self.checkProviderToken(received[1].headers["authorization"], key: key)
            }
        }
    }

    @Test func anUnreachableAPNsBlocksNoWriterAndLosesNoNotification() async throws {
        try await Self.withStandIn { standIn in
            let endpoint = standIn.endpoint
            await standIn.stop()  // nothing listens there now
            try await TestServer.with(configure: { configuration in
                configuration.apns.productionEndpoint = endpoint
                configuration.apns.developmentEndpoint = endpoint
                configuration.apns.firstRetryDelay = .seconds(5)
            }) { server in
                try await server.service.setAPNsCredentials(
                    container: TestServer.container, teamID: Self.teamID, keyID: Self.keyID, topic: Self.topic,
                    privateKeyPEM: P256.Signing.PrivateKey().pemRepresentation)
                let alice = try await server.user("alice")
                try await Self.register(alice.onDevice("phone"), token: Self.deviceToken(1))
                try await NotificationTests.subscribe(alice, ["subscriptionID": "db", "subscriptionType": "database"])
                let listener = try await NotificationListener.connect(alice.onDevice("phone"))
                defer { listener.close() }
                let started = ContinuousClock.now
                for index in 0..<5 {
                    try await expectEqual(alice.onDevice("web").createZone("Zone\(index)").status, 200)
                }
                #expect(ContinuousClock.now - started < .seconds(5))
                for _ in 0..<5 { #expect(try await listener.next()["type"] == "notification") }
                let collection = try await alice.onDevice("phone").device("notifications/changes")
                expectEqual(collection.json["notifications"]?.arrayValue?.count, 5)
            }
        }
    }

    @Test func oversizedPayloadsDropTheirRecordFieldsForAPNsOnly() async throws {
        try await Self.withStandIn { standIn in
            try await Self.withPushServer(standIn) { server, _ in
                let alice = try await server.user("alice")
                try await Self.register(alice.onDevice("phone"), token: Self.deviceToken(1))
                _ = try await alice.modify([Op.create("seed", ["a": Op.field("a"), "b": Op.field("b")])])  // defines Note
                try await NotificationTests.subscribe(
                    alice,
                    SubscriptionTests.querySubscription(
                        "big", filters: [], info: ["alertBody": "Big", "desiredKeys": ["a", "b"]]))
                let listener = try await NotificationListener.connect(alice.onDevice("phone"))
                defer { listener.close() }
                let text = String(repeating: "x", count: 3_000)
                _ = try await alice.onDevice("web").modify([Op.create("big", ["a": Op.field(.string(text)), "b": Op.field(.string(text))])])
                let push = try #require(try await standIn.received(count: 1).first)
                expectEqual(push.body["ck"]?["qry"]?["rid"], "big")
                #expect(push.body["ck"]?["qry"]?["af"] == nil)
                #expect(push.body.serialized().count <= 4_096)
                // The WebSocket and the collection keep the whole payload.
                try await expectEqual(listener.next()["payload"]?["ck"]?["qry"]?["af"]?["a"], .string(text))
            }
        }
    }

    @Test func apnsCredentialsAreCheckedBeforeTheyAreStored() async throws {
        try await TestServer.with { server in
            let service = server.service
            let pem = P256.Signing.PrivateKey().pemRepresentation
            let cases: [(team: String, key: String, topic: String, pem: String, container: String, expected: String)] = [
                ("team", Self.keyID, Self.topic, pem, TestServer.container, "team ID"),
                (Self.teamID, "KEY12345678", Self.topic, pem, TestServer.container, "key ID"),
                (Self.teamID, Self.keyID, "com.example notes", pem, TestServer.container, "bundle ID"),
                (Self.teamID, Self.keyID, Self.topic, "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----", TestServer.container, "P-256"),
                (Self.teamID, Self.keyID, Self.topic, pem, "iCloud.nope", "does not exist"),
            ]
            for item in cases {
                await #expect {
                    try await service.setAPNsCredentials(
                        container: item.container, teamID: item.team, keyID: item.key, topic: item.topic, privateKeyPEM: item.pem)
                } throws: { error in
                    (error as? CloudKitError)?.reason.contains(item.expected) == true
                }
            }
            #expect(try await service.apnsCredentials(container: TestServer.container) == nil)
            try await service.setAPNsCredentials(
                container: TestServer.container, teamID: Self.teamID, keyID: Self.keyID, topic: Self.topic, privateKeyPEM: pem)
            try await expectEqual(service.apnsCredentials(container: TestServer.container)?.topic, Self.topic)
            #expect(try await service.removeAPNsCredentials(container: TestServer.container))
            try await expectEqual(service.removeAPNsCredentials(container: TestServer.container), false)
        }
    }

    // MARK: Web courier

    /// `tokens/create`, then `tokens/register` with the token it gave; returns the poll URL's
    /// path and query.
    static func courier(_ client: APIClient) async throws -> (path: String, query: String, token: String) {
        let created = try await client.device("tokens/create", ["apnsEnvironment": "development"])
        let urlText = try #require(created.json["webcourierURL"]?.stringValue)
        let url = try #require(URLComponents(string: urlText))
        let token = try #require(created.json["apnsToken"]?.stringValue)
        try await register(client, token: token)
        return (url.path, "?" + (url.percentEncodedQuery ?? ""), token)
    }

    @Test func theWebCourierLongPollHandsOutNotificationsOneByOne() async throws {
        // Long enough for a notification to arrive while a poll waits, with the suite's other
        // tests running beside it: on PostgreSQL, beside the timed suites, the zone's save once
        // took more than 2 s to reach the collection (2026-11-29), and once more than 5 s
        // (2026-11-30: the pipeline's outbox drain and delivery are several round trips each, on
        // a machine shared with kill -9 writers), and the waiting poll answered 204. The empty
        // poll below waits the whole of it.
        try await TestServer.with(configure: { $0.webCourierPollTimeout = .seconds(15) }) { server in
            let alice = try await server.user("alice")
            let browser = alice.onDevice("browser")
            let poll = try await Self.courier(browser)
            expectEqual(poll.path, "/webcourier/aps")
            try await NotificationTests.subscribe(alice, ["subscriptionID": "db", "subscriptionType": "database"])

            // Nothing to hand out: the poll waits, then answers 204.
            let started = ContinuousClock.now
            let empty = try await browser.send(path: poll.path, body: nil, rawQuery: poll.query)
            expectEqual(empty.status, 204)
            #expect(ContinuousClock.now - started >= .milliseconds(14_900))

            // A waiting poll answers as soon as a notification comes.
            async let waiting = browser.send(path: poll.path, body: nil, rawQuery: poll.query)
            try await Task.sleep(for: .milliseconds(100))
            _ = try await alice.onDevice("phone").createZone("First")
            let first = try await waiting
            expectEqual(first.status, 200)
            expectEqual(first.header("Access-Control-Allow-Origin"), "*")
            expectEqual(first.json["ck"]?["met"]?["sid"], "db")

            // Between polls, notifications queue and come out in order.
            _ = try await alice.onDevice("phone").createZone("Second")
            _ = try await alice.onDevice("phone").deleteZone("Second")
            // The collection is written by the pipeline, after the zone saves answer.
            func collected() async throws -> [String] {
                try await alice.device("notifications/changes").json["notifications"]?.arrayValue?.compactMap {
                    $0["notificationID"]?.stringValue
                } ?? []
            }
            try await waitFor { try await collected().count == 3 }
            let ids = try await collected()
            expectEqual(ids.count, 3)
            let second = try await browser.send(path: poll.path, body: nil, rawQuery: poll.query)
            let third = try await browser.send(path: poll.path, body: nil, rawQuery: poll.query)
            expectEqual([second, third].compactMap { $0.json["ck"]?["nid"]?.stringValue }, Array(ids.dropFirst()))

            // The browser's own changes are not handed back to it.
            _ = try await browser.createZone("Mine")
            try await expectEqual(browser.send(path: poll.path, body: nil, rawQuery: poll.query).status, 204)
        }
    }

    @Test func theWebCourierRefusesUnknownMissingAndExpiredTokens() async throws {
        try await TestServer.with(configure: { $0.webCourierPollTimeout = .milliseconds(100) }) { server in
            let alice = try await server.user("alice")
            let missing = try await alice.send(path: "/webcourier/aps", body: nil, rawQuery: "")
            expectEqual(missing.status, 400)
            #expect(missing.reason.contains("tok"))
            let unknown = try await alice.send(path: "/webcourier/aps", body: nil, rawQuery: "?tok=nonsense")
            expectEqual(unknown.status, 404)
            expectEqual(unknown.errorCode, "NOT_FOUND")
            // An APNs device token is not a courier token.
            try await Self.register(alice, token: Self.deviceToken(7))
            let device = try await alice.send(path: "/webcourier/aps", body: nil, rawQuery: "?tok=\(Self.deviceToken(7))")
            expectEqual(device.status, 404)

            let poll = try await Self.courier(alice)
            try await expectEqual(alice.send(path: poll.path, body: nil, rawQuery: poll.query).status, 204)
            server.clock.advance(milliseconds: Int64(NimbusService.webCourierLifetimeSeconds) * 1_000 + 1)
            let expired = try await alice.send(path: poll.path, body: nil, rawQuery: poll.query)
            expectEqual(expired.errorCode, "AUTHENTICATION_FAILED")
            #expect(expired.reason.contains("expired"))
            #expect(try await server.service.pushToken(poll.token) == nil)
        }
    }
}

@Suite struct APNsCommandTests {
    @Test func apnsVerbsStoreShowAndRemoveAContainersKey() throws {
        let directory = NSTemporaryDirectory() + "nimbus-apns-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let keyFile = directory + "/AuthKey_KEY1234567.p8"
        try P256.Signing.PrivateKey().pemRepresentation.write(toFile: keyFile, atomically: true, encoding: .utf8)
        let container = "iCloud.test.apns"
        func nimbus(_ arguments: [String]) throws -> String { try NimbusProcess.run(arguments + ["--data-dir", directory]) }
        _ = try nimbus(["containers", "create", container, "--create"])
        #expect(try nimbus(["apns", "show", "--container", container]).contains("no APNs credentials"))
        let set = [
            "apns", "set", "--container", container, "--team-id", "TEAM123456", "--key-id", "KEY1234567", "--topic",
            "com.example.notes", "--key-file",
        ]
        #expect(try nimbus(set + [keyFile]).contains("stored"))
        try expectEqual(nimbus(["apns", "show", "--container", container]), "team TEAM123456, key KEY1234567, topic com.example.notes\n")
        // A file that is not a P-256 key is refused.
        try "not a key".write(toFile: directory + "/bad.p8", atomically: true, encoding: .utf8)
        #expect(throws: (any Error).self) { try nimbus(set + [directory + "/bad.p8"]) }
        #expect(try nimbus(["apns", "remove", "--container", container]).contains("removed"))
        #expect(try nimbus(["apns", "show", "--container", container]).contains("no APNs credentials"))
    }
}
