import Foundation
import NIOCore
import NimbusServer
import NimbusTestSupport
import NimbusWire
import Testing

/// The findings of the adversarial test of the HTTP edge, each reproduced over a raw socket.
@Suite struct HTTPEdgeTests {
    static func errorCode(_ received: RawConnection.Received) -> String? {
        (try? JSON.parse(received.body))?["serverErrorCode"]?.stringValue
    }

    @Test func malformedRequestsGet400WithTheErrorJSONAndAreClosedAtOnce() async throws {
        try await TestServer.with { server in
            let malformed: [(String, [UInt8])] = [
                ("bad request line", Array("GARBAGE\r\n\r\n".utf8)),
                ("lowercase method", Array("get /health HTTP/1.1\r\nHost: x\r\n\r\n".utf8)),
                ("bad Content-Length", Array("POST /health HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n".utf8)),
                ("space in the URL", Array("GET /hea lth HTTP/1.1\r\nHost: x\r\n\r\n".utf8)),
                ("non-ASCII byte in the URL", Array("GET /h".utf8) + [0xC3, 0xA9] + Array(" HTTP/1.1\r\nHost: x\r\n\r\n".utf8)),
                ("URL over 80 KB", Array(("GET /" + String(repeating: "a", count: 90_000) + " HTTP/1.1\r\nHost: x\r\n\r\n").utf8)),
                ("garbage after a good request",
                 Array("GET /health HTTP/1.1\r\nHost: x\r\n\r\nGARBAGE\r\n\r\n".utf8)),
            ]
            for (name, bytes) in malformed {
                let connection = try RawConnection(port: server.port)
                try connection.send(bytes)
                // Well under a second alone; the bound leaves room for the whole suite running
                // beside the server on two cores, and still tells "answered" from "never".
                let received = await connection.receive(waitingUpTo: 15)
                #expect(received.closed, "\(name): the connection stays open")
                #expect(received.seconds < 5, "\(name): answered after \(received.seconds) s")
                // The last response on the connection is the refusal.
                let refusal = try #require(received.text.range(of: "HTTP/1.1 400 Bad Request\r\n"), "\(name): \(received.text.prefix(200))")
                #expect(received.text[refusal.upperBound...].contains("\"serverErrorCode\":\"BAD_REQUEST\""), "\(name)")
            }
        }
    }

    @Test func unfinishedHeadersTimeOutAndIdleConnectionsAreClosed() async throws {
        try await TestServer.with(configure: { configuration in
            configuration.edge.requestHeaderTimeout = .milliseconds(500)
            configuration.edge.idleTimeout = .milliseconds(800)
        }) { server in
            let slow = try RawConnection(port: server.port)
            try slow.send("GET /health HTTP/1.1\r\nHost: x\r\n")  // the blank line never comes
            let timedOut = await slow.receive(waitingUpTo: 5)
            #expect(timedOut.closed && timedOut.status == 408, "\(timedOut.text)")
            #expect(timedOut.seconds >= 0.4 && timedOut.seconds < 3)
            expectEqual(Self.errorCode(timedOut), "BAD_REQUEST")

            let idle = try RawConnection(port: server.port)
            let nothing = await idle.receive(waitingUpTo: 5)
            #expect(nothing.closed && nothing.bytes.isEmpty)
            #expect(nothing.seconds >= 0.7 && nothing.seconds < 3)

            // Between requests too: a kept-alive connection is closed once it idles.
            let kept = try RawConnection(port: server.port)
            try kept.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            let answered = await kept.receive(waitingUpTo: 5)
            #expect(answered.status == 200 && answered.closed)
        }
    }

    @Test func aSlowBodyIsCutOff() async throws {
        try await TestServer.with(configure: { $0.edge.requestBodyTimeout = .milliseconds(500) }) { server in
            let connection = try RawConnection(port: server.port)
            try connection.send(
                "POST /database/1/\(TestServer.container)/development/public/records/query?ckAPIToken=\(server.developmentToken) HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            let received = await connection.receive(waitingUpTo: 5)
            #expect(received.closed)
            #expect(received.seconds < 3)
        }
    }

    /// An asset upload may take longer than a body may, while its bytes keep coming; one that
    /// stalls is cut off as any body is.
    @Test func anAssetUploadThatKeepsArrivingOutlastsTheBodyLimit() async throws {
        try await TestServer.with(configure: {
            // Wide margins: the whole suite runs beside this test and can delay a sleep by a second.
            $0.edge.requestBodyTimeout = .seconds(2)
            $0.edge.assetUploadTimeout = .seconds(8)
        }) { server in
            let alice = try await server.user("alice")
            func start(_ size: Int) async throws -> RawConnection {
                let url = try #require(try await AssetTests.uploadURLs(alice, [("Photo", "image")]).first)
                let connection = try RawConnection(port: server.port)
                try connection.send(
                    "POST \(url.dropFirst(server.baseURL.count)) HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: \(size)\r\n\r\n")
                return connection
            }
            // Ten bytes every 0.3 s for 2.7 s: past the body limit, within the upload's.
            let steady = try await start(90)
            for _ in 0..<9 {
                try steady.send(Array(repeating: 1, count: 10))
                try await Task.sleep(for: .milliseconds(300))
            }
            let answered = await steady.receive(waitingUpTo: 10)
            expectEqual(answered.status, 200, "\(answered.text)")
            // A stall longer than the body limit: closed.
            let stalled = try await start(50)
            try stalled.send(Array(repeating: 2, count: 10))
            let cut = await stalled.receive(waitingUpTo: 10)
            #expect(cut.closed && cut.status == nil && cut.seconds < 6)
        }
    }

    @Test func aBodyAwaitingOneHundredContinueGetsItAtOnce() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let url = try #require(try await AssetTests.uploadURLs(alice, [("Photo", "image")]).first)
            let connection = try RawConnection(port: server.port)
            try connection.send(
                "POST \(url.dropFirst(server.baseURL.count)) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                    + "Expect: 100-continue\r\nContent-Length: 5\r\n\r\n")
            let interim = await connection.receive(waitingUpTo: 2)
            expectEqual(interim.text, "HTTP/1.1 100 Continue\r\n\r\n", "\(interim.text)")
            try connection.send("hello")
            // The answer waits for the asset's write (on PostgreSQL beside the crash and two-node
            // suites, over 5 s once); the connection closes after it, so the wait ends there.
            let answer = await connection.receive(waitingUpTo: 30)
            #expect(answer.status == 200 && answer.body.contains("singleFile"), "\(answer.text)")
        }
    }

    @Test func oneAddressMayHoldOnlySoManyConnections() async throws {
        try await TestServer.with(configure: { $0.edge.connectionsPerClient = 3 }) { server in
            var held = try (0..<3).map { _ in try RawConnection(port: server.port) }
            // Each answered once, so the server has counted all three before the fourth comes
            // (a fixed pause was too short while the whole suite ran: the fourth got in).
            for connection in held {
                try connection.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                let answer = await connection.receive(waitingUpTo: 10, until: RawConnection.oneAnswer)
                expectEqual(answer.status, 200, "\(answer.text)")
            }
            let fourth = try RawConnection(port: server.port)
            let refused = await fourth.receive(waitingUpTo: 5)
            #expect(refused.closed && refused.status == 429, "\(refused.text)")
            expectEqual(Self.errorCode(refused), "THROTTLED")
            #expect(refused.body.contains("connectionsPerClient"))
            // At the limit, not past it: closing one lets the next in.
            var remaining = held
            remaining.removeLast()
            held = remaining
            // The server hears the close a moment later (longer while the whole suite runs).
            var status: Int?
            for _ in 0..<25 where status != 200 {
                try await Task.sleep(for: .milliseconds(200))
                let next = try RawConnection(port: server.port)
                try next.send("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                status = await next.receive(waitingUpTo: 5).status
            }
            expectEqual(status, 200)
            expectEqual(held.count, 2)
        }
    }

    @Test func methodsAndUpgradesOutsideTheProtocolGetTheErrorJSON() async throws {
        try await TestServer.with { server in
            let token = server.developmentToken
            func raw(_ request: String) async throws -> RawConnection.Received {
                let connection = try RawConnection(port: server.port)
                try connection.send(request)
                return await connection.receive(waitingUpTo: 5)
            }
            let put = try await raw("PUT /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            #expect(put.status == 405 && Self.errorCode(put) == "BAD_REQUEST", "\(put.text)")
            #expect(put.text.lowercased().contains("allow: get, head, post"), "\(put.text)")
            // A HEAD answer has no body (HTTP forbids one); its headers describe the error JSON.
            let head = try await raw("HEAD /database/1/\(TestServer.container)/development/public/records/modify HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            #expect(head.status == 405 && head.text.contains("application/json") && head.body.isEmpty, "\(head.text)")
            let connect = try await raw("CONNECT /health HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(connect.status == 405 && Self.errorCode(connect) == "BAD_REQUEST", "\(connect.text)")
            let upgrade = try await raw(
                "GET /database/1/\(TestServer.container)/development/public/zones/list?ckAPIToken=\(token) HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
            #expect(upgrade.status == 400 && upgrade.body.contains("not a WebSocket endpoint"), "\(upgrade.text)")
            // The stream's own path, refused (no session, then no API token): the answer says why.
            let stream = "/device/1/\(TestServer.container)/development/notifications/connect"
            let websocketHeaders =
                "Host: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
            let noSession = try await raw("GET \(stream)?ckAPIToken=\(token) HTTP/1.1\r\n\(websocketHeaders)")
            #expect(noSession.status == 421 && Self.errorCode(noSession) == "AUTHENTICATION_REQUIRED", "\(noSession.text)")
            let noToken = try await raw("GET \(stream) HTTP/1.1\r\n\(websocketHeaders)")
            #expect(noToken.status == 401 && Self.errorCode(noToken) == "AUTHENTICATION_FAILED", "\(noToken.text)")
            let chunked = try await raw(
                "POST /database/1/\(TestServer.container)/development/public/records/query?ckAPIToken=\(token) HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nabc\r\n0\r\n\r\n")
            #expect(chunked.status == 400 && Self.errorCode(chunked) == "BAD_REQUEST", "\(chunked.text)")
        }
    }

    @Test func noBodyIsParsedWithoutAValidAPITokenAndHugeObjectsAreCheap() async throws {
        try await TestServer.with { server in
            // 80,000 keys in 1 MB: quadratic parsing took minutes.
            var text = "{"
            for index in 0..<80_000 { text += (index == 0 ? "" : ",") + "\"key\(index)\":1" }
            text += "}"
            let body = Array(text.utf8)
            #expect(body.count > 1_000_000)
            // records/modify: the route whose bound (4 MiB) takes a body this size, from a user
            // (without one it is refused before its body is read).
            let path = "/database/1/\(TestServer.container)/development/public/records/modify"
            let client = try await server.user("alice")

            var start = Date()
            let anonymous = try await client.send(path: path, body: body, rawQuery: "")
            #expect(anonymous.status == 401 && anonymous.errorCode == "AUTHENTICATION_FAILED")
            // Quadratic parsing took 211 s for this body; linear parsing takes milliseconds. The
            // bound leaves room for the whole suite running beside the server on two cores.
            #expect(Date().timeIntervalSince(start) < 5)
            // Not JSON at all, and no token: the answer is about the token, so the body was never read.
            let garbage = try await client.send(path: path, body: Array("{{{{".utf8), rawQuery: "?ckAPIToken=wrong")
            #expect(garbage.status == 401 && garbage.errorCode == "AUTHENTICATION_FAILED")

            start = Date()
            let authenticated = try await client.send(path: path, body: body)
            #expect(authenticated.status == 400 && authenticated.reason.contains("more than 10000 keys"), "\(authenticated.reason)")
            #expect(Date().timeIntervalSince(start) < 5)
        }
    }

    @Test func tenThousandKeysParseAndOneMoreIsRefused() throws {
        func object(_ count: Int) -> String { "{" + (0..<count).map { "\"k\($0)\":\($0)" }.joined(separator: ",") + "}" }
        let parsed = try JSON.parse(object(JSON.maximumKeysPerObject))
        expectEqual(parsed.objectValue?.count, JSON.maximumKeysPerObject)
        expectEqual(parsed["k9999"], .int(9_999))
        #expect(throws: JSONSyntaxError.self) { try JSON.parse(object(JSON.maximumKeysPerObject + 1)) }
        // A repeated key keeps its place and takes the last value, past the small-object path too.
        let repeated = try JSON.parse(#"{"a":1,"#.appending((0..<20).map { "\"x\($0)\":0" }.joined(separator: ",")) + #","a":2}"#)
        #expect(repeated.objectValue?.keys.first == "a" && repeated["a"] == .int(2) && repeated.objectValue?.count == 21)
    }
}

/// URLs the server hands out follow what a trusted reverse proxy reports.
@Suite struct ForwardedHeaderTests {
    @Test func aTrustedProxysSchemeAndHostShapeHandedOutURLs() async throws {
        try await TestServer.with(configure: { $0.trustedProxies = ["127.0.0.1"] }) { server in
            let alice = try await server.user("alice")
            let plain = try await alice.device("tokens/create", ["apnsEnvironment": "development"])
            expectEqual(plain.json["webcourierURL"]?.stringValue?.hasPrefix("http://127.0.0.1:\(server.port)/webcourier/aps?tok="), true)
            let forwarded = try await alice.send(
                path: "/device/1/\(TestServer.container)/development/tokens/create",
                body: Array(#"{"apnsEnvironment":"development"}"#.utf8),
                headers: [("X-Forwarded-Proto", "https"), ("X-Forwarded-Host", "cloud.example.com")])
            expectEqual(forwarded.json["webcourierURL"]?.stringValue?.hasPrefix("https://cloud.example.com/webcourier/aps?tok="), true, "\(forwarded.text)")
            let standard = try await alice.send(
                path: "/device/1/\(TestServer.container)/development/tokens/create",
                body: Array(#"{"apnsEnvironment":"development"}"#.utf8),
                headers: [("Forwarded", #"for=10.1.2.3;proto=https;host="nimbus.example.org:8443""#)])
            expectEqual(standard.json["webcourierURL"]?.stringValue?.hasPrefix("https://nimbus.example.org:8443/webcourier/aps?tok="), true, "\(standard.text)")
            let bogus = try await alice.send(
                path: "/device/1/\(TestServer.container)/development/tokens/create", body: nil,
                headers: [("X-Forwarded-Host", "evil.example/<script>")])
            #expect(bogus.status == 400 && bogus.errorCode == "BAD_REQUEST")
        }
    }
}
