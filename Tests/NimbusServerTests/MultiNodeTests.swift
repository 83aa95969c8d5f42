import Foundation
import NimbusTestSupport
import NimbusWire
import Testing

/// Two `nimbus serve` processes on one store serve the same containers: sessions made on one
/// work on the other, a subscription made on one fires for writes on the other, and a write on
/// one reaches a WebSocket client connected to the other. The store is one SQLite file (WAL
/// lets processes share it), or on the suite's PostgreSQL pass one PostgreSQL database; the
/// nodes share nothing else.
@Suite struct MultiNodeTests {
    @Test func aWriteOnOneNodeNotifiesAWebSocketClientOnTheOther() async throws {
        let (dataDirectory, container, apiToken) = try await CrashRecoveryTests.prepareDataDirectory()
        defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
        // On PostgreSQL the nodes poll once an hour: only its NOTIFY can carry the write across
        // in time. SQLite sends no signals; there the nodes find each other's work by polling.
        let poll = TestStorage.isSQLiteFile ? [] : ["--notification-poll-ms", "3600000"]
        let (nodeA, onA) = try await CrashRecoveryTests.serveSignedIn(dataDirectory, container: container, apiToken: apiToken, poll)
        defer { nodeA.stop() }
        let nodeB = try await NimbusProcess.serve(dataDirectory: dataDirectory, poll)
        defer { nodeB.stop() }
        let engine = TestStorage.isSQLiteFile ? "storage: SQLite" : "storage: PostgreSQL at "
        #expect(nodeA.output.contains(engine) && nodeB.output.contains(engine), "\(nodeB.output)")
        // The session A issued, used on B.
        let onB = APIClient(
            baseURL: nodeB.baseURL, container: container, environment: .development, apiToken: apiToken,
            webAuthToken: onA.webAuthToken, userRecordName: nil)

        try await expectEqual(onA.createZone("Shared").status, 200)
        try await expectEqual(onB.lookup(zone: "Shared", ["nothing"]).status, 200, "the zone made on A is there on B")
        // A subscription made on B, to the zone A made.
        let subscribed = try await onB.post(
            "private", "subscriptions/modify",
            ["operations": [["operationType": "create", "subscription": ["subscriptionID": "z", "subscriptionType": "zone", "zoneID": ["zoneName": "Shared"]]]]])
        #expect(subscribed.status == 200 && !subscribed.text.contains("serverErrorCode"), "\(subscribed.text)")

        let listener = try await NotificationListener.connect(onB.onDevice("phone-on-B"))
        defer { listener.close() }
        // The write goes to A; the phone listens on B.
        let saved = try await onA.onDevice("laptop-on-A").modify(zone: "Shared", [Op.create("r1")])
        #expect(saved.status == 200 && saved.records.first?.errorCode == nil, "\(saved.text)")
        let frame = try await listener.next(within: 10)
        expectEqual(frame["type"], "notification")
        expectEqual(frame["payload"]?["ck"]?["fet"]?["sid"], "z", "\(frame)")
        expectEqual(frame["payload"]?["ck"]?["fet"]?["zid"], "Shared", "\(frame)")
        // Once: both nodes push only to their own connections.
        #expect(await listener.nothing(within: 1))

        // Deleted on B, the subscription stops firing for writes on A too.
        let deleted = try await onB.post(
            "private", "subscriptions/modify", ["operations": [["operationType": "delete", "subscription": ["subscriptionID": "z"]]]])
        #expect(deleted.status == 200 && !deleted.text.contains("serverErrorCode"), "\(deleted.text)")
        _ = try await onA.onDevice("laptop-on-A").modify(zone: "Shared", [Op.create("r2")])
        #expect(await listener.nothing(within: 1.5))

        // And the collection is the same from either node.
        let fromA = try await onA.onDevice("phone-on-B").device("notifications/changes")
        let fromB = try await onB.onDevice("phone-on-B").device("notifications/changes")
        expectEqual(fromA.json["notifications"]?.arrayValue?.count, 1)
        expectEqual(fromA.json["notifications"], fromB.json["notifications"])
    }

    /// Budgets are counted in PostgreSQL, leased a twentieth at a time, so two nodes together
    /// admit one budget: a user's 40 requests a minute spread over both nodes is 40, not 80.
    @Test(.enabled(if: !TestStorage.isSQLiteFile, "shared budgets are a PostgreSQL store's"))
    func twoNodesTogetherAllowOneBudget() async throws {
        let (dataDirectory, container, apiToken) = try await CrashRecoveryTests.prepareDataDirectory()
        defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
        _ = try NimbusProcess.run(
            ["limits", "set", "--container", container, "userRequestsPerMinute=40"] + (try await NimbusProcess.dataArguments(dataDirectory)))
        let (nodeA, onA) = try await CrashRecoveryTests.serveSignedIn(dataDirectory, container: container, apiToken: apiToken)
        defer { nodeA.stop() }
        let nodeB = try await NimbusProcess.serve(dataDirectory: dataDirectory)
        defer { nodeB.stop() }
        let onB = APIClient(
            baseURL: nodeB.baseURL, container: container, environment: .development, apiToken: apiToken,
            webAuthToken: onA.webAuthToken, userRecordName: nil)
        var admitted = 0
        var refusedOn: Set<String> = []
        let started = Date()
        for index in 0..<80 {
            let node = index.isMultiple(of: 2) ? onA : onB
            let answer = try await node.lookup(["r\(index)"])
            if answer.status == 429 {
                #expect(answer.reason.contains("userRequestsPerMinute"), "\(answer.text)")
                refusedOn.insert(node.baseURL)
            } else {
                expectEqual(answer.status, 200, "\(answer.text)")
                admitted += 1
            }
        }
        // 40, and what refills while the 80 are sent (two thirds of a request a second, so
        // the bound follows how long a busy machine took), and at most one unspent lease
        // (two requests) per node either way; counted per node it would have been all 80.
        let seconds = Date().timeIntervalSince(started)
        let refilled = Int((seconds * 40 / 60).rounded(.up))
        #expect(seconds < 40, "the 80 lookups took \(seconds) s: too slow to tell one budget from two")
        #expect((36...(42 + refilled)).contains(admitted), "admitted \(admitted) of 80 in \(seconds) s")
        expectEqual(refusedOn, [nodeA.baseURL, nodeB.baseURL], "both nodes refuse once the shared budget is spent")
    }
}
