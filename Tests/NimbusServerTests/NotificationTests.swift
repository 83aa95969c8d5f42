import Foundation
import NimbusTestSupport
import NimbusWire
import Testing

/// Matching, the notification collection and the WebSocket stream, end to end over HTTP.
@Suite struct NotificationTests {
    static func subscribe(_ client: APIClient, _ subscription: JSON, in database: String = "private") async throws {
        let response = try await client.post(
            database, "subscriptions/modify", ["operations": [["operationType": "create", "subscription": subscription]]])
        guard response.status == 200, response.json["subscriptions"]?[0]?["serverErrorCode"] == nil else {
            throw TestFailure("subscribing failed: \(response.text)")
        }
    }

    /// The 2016 session's workflow: B subscribes silently to the database, A saves in a custom
    /// zone, B hears of it and fetches database then zone changes; A is not told of its own change.
    @Test func aDeviceHearsOfAnotherDevicesSaveAndFetchesTheChanges() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let deviceA = alice.onDevice("device-A")
            let deviceB = alice.onDevice("device-B")
            try await Self.subscribe(
                deviceB, ["subscriptionID": "db", "subscriptionType": "database", "notificationInfo": ["shouldSendContentAvailable": true]])
            let databaseToken = try #require(try await deviceB.databaseChanges().json["syncToken"]?.stringValue)
            let listenerA = try await NotificationListener.connect(deviceA)
            let listenerB = try await NotificationListener.connect(deviceB)
            defer { listenerA.close(); listenerB.close() }

            _ = try await deviceA.createZone("Parties")
            _ = try await listenerB.next()  // the zone's creation
            _ = try await deviceA.modify(zone: "Parties", [Op.create("wwdc", type: "Party", ["name": Op.field("Beers")])])
            let frame = try await listenerB.next()
            expectEqual(frame["type"], "notification")
            expectEqual(frame["payload"]?["ck"]?["met"]?["sid"], "db")
            expectEqual(frame["payload"]?["ck"]?["met"]?["dbs"], 2)
            expectEqual(frame["payload"]?["aps"]?["content-available"], 1)
            expectEqual(frame["payload"]?["ck"]?["ckuserid"]?.stringValue, alice.userRecordName)

            let changes = try await deviceB.databaseChanges(token: databaseToken)
            let zoneNames = changes.zones.compactMap { $0["zoneID"]?["zoneName"]?.stringValue }
            expectEqual(zoneNames, ["Parties"])
            let zone = try #require(try await deviceB.zoneChanges("Parties").zones.first)
            expectEqual(zone["records"]?.arrayValue?.map { $0["recordName"] }, ["wwdc"])
            #expect(await listenerA.nothing(within: 0.5))
        }
    }

    @Test func querySubscriptionsFireAsRecordsEnterChangeWithinAndLeaveTheResults() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            _ = try await alice.modify([Op.create("seed", ["stars": Op.field(0), "title": Op.field("x")])])
            let filter: JSON = ["comparator": "GREATER_THAN_OR_EQUALS", "fieldName": "stars", "fieldValue": ["value": 4]]
            try await Self.subscribe(
                alice,
                SubscriptionTests.querySubscription(
                    "good", filters: [filter],
                    info: [
                        "alertLocalizationKey": "GOOD_NOTE", "alertLocalizationArgs": ["title"], "soundName": "ping.aiff",
                        "shouldBadge": true, "desiredKeys": ["title", "stars"],
                    ]))
            let listener = try await NotificationListener.connect(alice.onDevice("phone"))
            defer { listener.close() }
            let created = try await alice.modify([Op.create("n1", ["stars": Op.field(2), "title": Op.field("Meh")])])
            let tag1 = try #require(created.records.first?.changeTag)
            #expect(await listener.nothing(within: 0.3))  // not in the results: nothing

            let entered = try await alice.modify([Op.update("n1", tag: tag1, ["stars": Op.field(5), "title": Op.field("Great")])])
            let enter = try await listener.next()
            expectEqual(enter["payload"]?["ck"]?["qry"]?["fo"], 1)
            expectEqual(enter["payload"]?["ck"]?["qry"]?["rid"], "n1")
            expectEqual(enter["payload"]?["ck"]?["qry"]?["af"], ["title": "Great", "stars": 5])
            expectEqual(enter["payload"]?["aps"]?["alert"]?["loc-args"], ["Great"])
            expectEqual(enter["payload"]?["aps"]?["sound"], "ping.aiff")
            expectEqual(enter["payload"]?["aps"]?["badge"], 1)

            let tag2 = try #require(entered.records.first?.changeTag)
            let changed = try await alice.modify([Op.update("n1", tag: tag2, ["stars": Op.field(4)])])
            let within = try await listener.next()
            expectEqual(within["payload"]?["ck"]?["qry"]?["fo"], 2)
            expectEqual(within["payload"]?["aps"]?["badge"], 2)

            let tag3 = try #require(changed.records.first?.changeTag)
            _ = try await alice.modify([Op.update("n1", tag: tag3, ["stars": Op.field(1)])])
            try await expectEqual(listener.next()["payload"]?["ck"]?["qry"]?["fo"], 3)

            _ = try await alice.modify([Op.create("n2", ["stars": Op.field(9)])])
            try await expectEqual(listener.next()["payload"]?["ck"]?["qry"]?["fo"], 1)
            _ = try await alice.modify([Op.forceDelete("n2")])
            try await expectEqual(listener.next()["payload"]?["ck"]?["qry"]?["fo"], 3)
        }
    }

    /// Zone and database subscriptions that name a record type (`CKRecordZoneSubscription`'s
    /// and `CKDatabaseSubscription`'s `recordType`) fire only for records of that type.
    @Test func zoneAndDatabaseSubscriptionsNamingARecordTypeFireForItOnly() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            _ = try await alice.createZone("Z")
            _ = try await alice.modify(zone: "Z", [Op.create("p0", type: "Party"), Op.create("n0", type: "Note")])
            try await Self.subscribe(
                alice, ["subscriptionID": "z-party", "subscriptionType": "zone", "zoneID": ["zoneName": "Z"], "recordType": "Party"])
            try await Self.subscribe(alice, ["subscriptionID": "db-note", "subscriptionType": "database", "recordType": "Note"])
            let listed = try await alice.post("private", "subscriptions/lookup", ["subscriptions": [["subscriptionID": "z-party"], ["subscriptionID": "db-note"]]])
            expectEqual(listed.json["subscriptions"]?[0]?["recordType"], "Party")
            expectEqual(listed.json["subscriptions"]?[1]?["recordType"], "Note")

            let listener = try await NotificationListener.connect(alice.onDevice("phone"))
            defer { listener.close() }
            _ = try await alice.modify(zone: "Z", [Op.create("n1", type: "Note")])
            try await expectEqual(listener.next()["payload"]?["ck"]?["met"]?["sid"], "db-note")
            #expect(await listener.nothing(within: 0.3))
            _ = try await alice.modify(zone: "Z", [Op.create("p1", type: "Party")])
            try await expectEqual(listener.next()["payload"]?["ck"]?["fet"]?["sid"], "z-party")
            #expect(await listener.nothing(within: 0.3))
            _ = try await alice.createZone("Y")  // no record changed: neither fires
            #expect(await listener.nothing(within: 0.3))

            let unknown = try await alice.post(
                "private", "subscriptions/modify",
                ["operations": [["operationType": "create", "subscription": ["subscriptionID": "x", "subscriptionType": "database", "recordType": "Nope"]]]])
            expectEqual(unknown.json["subscriptions"]?[0]?["serverErrorCode"], "BAD_REQUEST", "\(unknown.text)")
            expectEqual(unknown.json["subscriptions"]?[0]?["reason"]?.stringValue?.contains("'Nope' does not exist"), true, "\(unknown.text)")
        }
    }

    @Test func firesOnceRemovesTheSubscriptionAfterItFires() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            _ = try await alice.modify([Op.create("seed")])
            try await Self.subscribe(alice, SubscriptionTests.querySubscription("once", firesOn: ["create"], firesOnce: true))
            let listener = try await NotificationListener.connect(alice.onDevice("phone"))
            defer { listener.close() }
            _ = try await alice.modify([Op.create("a")])
            try await expectEqual(listener.next()["payload"]?["ck"]?["qry"]?["sid"], "once")
            _ = try await alice.modify([Op.create("b")])
            #expect(await listener.nothing(within: 0.5))
            try await expectEqual(alice.post("private", "subscriptions/list", [:]).json["subscriptions"], [])
        }
    }

    @Test func publicQuerySubscriptionsHearOfEveryUsersChanges() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let bob = try await server.user("bob")
            _ = try await alice.modify("public", [Op.create("seed", type: "Post", ["topic": Op.field("swift")])])
            let filter: JSON = ["comparator": "EQUALS", "fieldName": "topic", "fieldValue": ["value": "swift"]]
            try await Self.subscribe(bob, SubscriptionTests.querySubscription("swift-posts", type: "Post", filters: [filter]), in: "public")
            let listener = try await NotificationListener.connect(bob)
            defer { listener.close() }
            _ = try await alice.modify("public", [Op.create("p1", type: "Post", ["topic": Op.field("rust")])])
            _ = try await alice.modify("public", [Op.create("p2", type: "Post", ["topic": Op.field("swift")])])
            let frame = try await listener.next()
            expectEqual(frame["payload"]?["ck"]?["qry"]?["rid"], "p2")
            expectEqual(frame["payload"]?["ck"]?["qry"]?["dbs"], 1)
            expectEqual(frame["payload"]?["ck"]?["qry"]?["zoid"], "_defaultOwner")
            #expect(await listener.nothing(within: 0.3))
        }
    }

    /// B is offline while A makes five changes; B recovers all five from the collection, by
    /// fetch and by reconnecting its WebSocket with its last token, then marks them read,
    /// which A hears of.
    @Test func anOfflineDeviceRecoversEveryChangeAndMarkingReadReachesTheOtherDevice() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let deviceA = alice.onDevice("device-A")
            let deviceB = alice.onDevice("device-B")
            _ = try await deviceA.createZone("Z")
            try await Self.subscribe(deviceB, ["subscriptionID": "z", "subscriptionType": "zone", "zoneID": ["zoneName": "Z"]])
            let start = try await deviceB.device("notifications/changes")
            expectEqual(start.json["notifications"], [])
            let token = try #require(start.json["syncToken"]?.stringValue)

            for index in 0..<5 { _ = try await deviceA.modify(zone: "Z", [Op.create("r\(index)")]) }
            try await waitFor { try await deviceB.device("notifications/changes", ["syncToken": .string(token)]).json["notifications"]?.arrayValue?.count == 5 }
            let missed = try await deviceB.device("notifications/changes", ["syncToken": .string(token), "resultsLimit": 3])
            expectEqual(missed.json["notifications"]?.arrayValue?.count, 3)
            expectEqual(missed.json["moreComing"], true)
            let rest = try await deviceB.device("notifications/changes", ["syncToken": missed.json["syncToken"]!])
            expectEqual(rest.json["notifications"]?.arrayValue?.count, 2)
            expectEqual(rest.json["moreComing"], false)
            // A made the changes: its own fetch leaves them out.
            try await expectEqual(deviceA.device("notifications/changes").json["notifications"], [])

            let reconnected = try await NotificationListener.connect(deviceB, syncToken: token)
            reconnected.close()
            let replayed = reconnected.replayed
            expectEqual(replayed.count, 5)
            expectEqual(Set(replayed.compactMap { $0["payload"]?["ck"]?["fet"]?["zid"]?.stringValue }), ["Z"])

            let listenerA = try await NotificationListener.connect(deviceA)
            defer { listenerA.close() }
            let ids = replayed.compactMap { $0["notificationID"] }
            let marked = try await deviceB.device("notifications/markRead", ["notificationIDs": .array(ids + ["unknown"])])
            expectEqual(marked.json["notificationIDs"]?.arrayValue?.count, 5)
            let read = try await listenerA.next()
            expectEqual(read["payload"]?["ck"]?["rdn"]?.arrayValue?.count, 6)
            let after = try await deviceB.device("notifications/changes", ["syncToken": .string(token)])
            expectEqual(after.json["notifications"]?.arrayValue?.prefix(5).allSatisfy { $0["read"] == true }, true)
        }
    }

    @Test func forgedAndPrunedCollectionTokensAreRefused() async throws {
        // Sessions outlive the 29 days this test skips.
        try await TestServer.with(configure: { $0.service.sessionIdleTimeoutMilliseconds = 60 * 86_400_000 }) { server in
            let alice = try await server.user("alice")
            let bob = try await server.user("bob")
            _ = try await alice.createZone("Z")
            try await Self.subscribe(alice, ["subscriptionID": "z", "subscriptionType": "zone", "zoneID": ["zoneName": "Z"]])
            let token = try #require(try await alice.device("notifications/changes").json["syncToken"]?.stringValue)
            try await expectEqual(alice.device("notifications/changes", ["syncToken": "garbage"]).errorCode, "BAD_REQUEST")
            let othersToken = try #require(try await bob.device("notifications/changes").json["syncToken"])
            try await expectEqual(alice.device("notifications/changes", ["syncToken": othersToken]).errorCode, "BAD_REQUEST")
            try await expectEqual(alice.device("notifications/changes", ["resultsLimit": 0]).errorCode, "BAD_REQUEST")
            try await expectEqual(alice.device("notifications/changes", ["resultsLimit": 201]).json["limit"], "notificationsPerPage")
            try await expectEqual(alice.device("notifications/changes", ["resultsLimit": 200]).status, 200)
            try await expectEqual(alice.device("badge/modify", ["badgeValue": -1]).status, 400)
            try await expectEqual(alice.device("badge/modify", ["badgeValue": 3]).json["badgeValue"], 3)
            try await expectEqual(server.client().device("notifications/changes").status, 421)

            _ = try await alice.modify(zone: "Z", [Op.create("old")])
            try await waitFor { try await alice.device("notifications/changes").json["notifications"]?.arrayValue?.count == 1 }
            server.clock.advance(milliseconds: 29 * 86_400_000)
            try await expectEqual(server.service.pruneNotifications(), 1)
            let expired = try await alice.device("notifications/changes", ["syncToken": .string(token)])
            expectEqual(expired.status, 400)
            expectEqual(expired.errorCode, "CHANGE_TOKEN_EXPIRED")
        }
    }
}

/// The stream's WebSocket as Nimbus serves it (a NIO pipeline, no task per connection:
/// `NotificationStreamChannel`), spoken byte by byte over a raw socket.
@Suite struct NotificationStreamProtocolTests {
    /// A client frame (masked, as RFC 6455 requires of clients).
    static func clientFrame(opcode: UInt8, _ payload: [UInt8]) -> [UInt8] {
        var frame: [UInt8] = [0x80 | opcode]
        if payload.count < 126 {
            frame.append(0x80 | UInt8(payload.count))
        } else {
            frame += [0x80 | 126, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
        }
        let mask: [UInt8] = [0x37, 0xFA, 0x21, 0x3D]
        frame += mask
        frame += payload.enumerated().map { $1 ^ mask[$0 % 4] }
        return frame
    }

    /// The server's frames in `bytes` (after the upgrade's head, when there is one): opcode
    /// and payload of each whole frame.
    static func serverFrames(_ bytes: [UInt8]) -> [(opcode: UInt8, payload: [UInt8])] {
        var index = 0
        if let head = String(decoding: bytes, as: UTF8.self).range(of: "\r\n\r\n") {
            index = String(decoding: bytes, as: UTF8.self)[..<head.upperBound].utf8.count
        }
        var frames: [(UInt8, [UInt8])] = []
        while index + 2 <= bytes.count {
            var length = Int(bytes[index + 1] & 0x7F)
            var start = index + 2
            if length == 126 {
                guard start + 2 <= bytes.count else { break }
                length = Int(bytes[start]) << 8 | Int(bytes[start + 1])
                start += 2
            }
            guard start + length <= bytes.count else { break }
            frames.append((bytes[index] & 0x0F, Array(bytes[start..<start + length])))
            index = start + length
        }
        return frames
    }

    /// Opens alice's stream on a raw socket and waits for its `ready` frame.
    static func openStream(_ alice: APIClient, port: Int) async throws -> RawConnection {
        let url = alice.notificationSocketURL()
        let target = String(url[try #require(url.range(of: "/device/1/")).lowerBound...])
        let connection = try RawConnection(port: port)
        try connection.send(
            "GET \(target) HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
        let opened = await connection.receive(waitingUpTo: 10) { bytes in
            serverFrames(bytes).contains { String(decoding: $0.payload, as: UTF8.self).contains("\"ready\"") }
        }
        #expect(opened.status == 101, "\(opened.text)")
        try #require(serverFrames(opened.bytes).contains { $0.opcode == 0x1 }, "no ready frame: \(opened.text)")
        return connection
    }

    @Test func pingsAreAnsweredClosesEchoedLargeFramesRefusedAndClosedStreamsForgotten() async throws {
        try await TestServer.with(configure: { $0.metricsPort = 0 }) { server in
            let metricsPort = try await MetricsTests.metricsPort(of: server)
            func openStreams() async throws -> Double {
                MetricsTests.value(try await MetricsTests.scrape(port: metricsPort), "nimbus_websocket_connections")
            }
            /// Whether the server forgets every stream within 5 s (well before its 30 s pings
            /// would find a vanished device).
            func allForgotten() async throws -> Bool {
                let deadline = Date().addingTimeInterval(5)
                while Date() < deadline {
                    if try await openStreams() == 0 { return true }
                    try await Task.sleep(for: .milliseconds(50))
                }
                return false
            }
            let alice = try await server.user("alice")

            // A ping is answered with a pong carrying its payload.
            let first = try await Self.openStream(alice, port: server.port)
            try first.send(Self.clientFrame(opcode: 0x9, Array("are you there".utf8)))
            let pong = await first.receive(waitingUpTo: 5) { Self.serverFrames($0).contains { $0.opcode == 0xA } }
            let pongFrame = Self.serverFrames(pong.bytes).first { $0.opcode == 0xA }
            expectEqual(pongFrame.map { String(decoding: $0.payload, as: UTF8.self) }, "are you there", "\(pong.bytes)")
            try await expectEqual(openStreams(), 1)

            // The device's close is answered with its code (1000), then the connection closes
            // and the stream is forgotten.
            try first.send(Self.clientFrame(opcode: 0x8, [0x03, 0xE8] + Array("bye".utf8)))
            let closed = await first.receive(waitingUpTo: 5)
            #expect(closed.closed, "the server kept the connection after the device's close")
            let closeFrame = Self.serverFrames(closed.bytes).first { $0.opcode == 0x8 }
            expectEqual(closeFrame?.payload, [0x03, 0xE8], "\(closed.bytes)")
            #expect(try await allForgotten(), "a closed stream stayed registered")

            // A frame past 4 KB closes the stream with 1009 (message too big).
            let second = try await Self.openStream(alice, port: server.port)
            try second.send(Self.clientFrame(opcode: 0x1, Array(repeating: UInt8(ascii: "x"), count: 4_097)))
            let refused = await second.receive(waitingUpTo: 5)
            #expect(refused.closed, "the server kept a stream that sent 4,097 bytes")
            let refusal = Self.serverFrames(refused.bytes).first { $0.opcode == 0x8 }
            expectEqual(refusal?.payload, [0x03, 0xF1], "\(refused.bytes)")
            // At the limit, nothing happens: the stream still answers pings.
            let third = try await Self.openStream(alice, port: server.port)
            try third.send(Self.clientFrame(opcode: 0x1, Array(repeating: UInt8(ascii: "x"), count: 4_096)))
            try third.send(Self.clientFrame(opcode: 0x9, Array("still".utf8)))
            let still = await third.receive(waitingUpTo: 5) { Self.serverFrames($0).contains { $0.opcode == 0xA } }
            #expect(!still.closed && Self.serverFrames(still.bytes).contains { $0.opcode == 0xA }, "\(still.bytes)")

            // A device that vanishes without a close is forgotten as well.
            third.hangUp()
            #expect(try await allForgotten(), "a device that hung up stayed registered")
        }
    }
}

/// Polls `condition` until it holds (notifications are stored just after the write returns).
func waitFor(_ condition: () async throws -> Bool) async throws {
    for _ in 0..<200 {
        if try await condition() { return }
        try await Task.sleep(nanoseconds: 10_000_000)
    }
    throw TestFailure("the condition did not come true within 2 s")
}

