import Foundation
import NimbusCore
@testable import NimbusServer
import NimbusTestSupport
import NimbusWire
import Testing

/// The edge's second pass (issue 42): bodies bounded before they are read, every request
/// answered. Over raw sockets, as an attacker with an app's public API token would send them.
@Suite struct RequestBodyTests {
    static func query(_ server: TestServer) -> String {
        "/database/1/\(TestServer.container)/development/public/records/query?ckAPIToken=\(server.developmentToken)"
    }

    static func errorJSON(_ received: RawConnection.Received) -> JSON { (try? JSON.parse(received.body)) ?? .null }

    /// A declared length past the route's bound is answered 413 at once, with CloudKit's error
    /// JSON naming the limit, and the connection closes; at the bound it is read.
    @Test func aDeclaredLengthPastTheBoundIsRefusedAtOnce() async throws {
        try await TestServer.with { server in
            let cases: [(declared: Int, limit: Limit)] = [
                (Limits.requestBodyBytes.value + 1, Limits.requestBodyBytes),
                (17 * 1_048_576, Limits.requestBodyBytes),
            ]
            for (declared, limit) in cases {
                let connection = try RawConnection(port: server.port)
                try connection.send("POST \(Self.query(server)) HTTP/1.1\r\nHost: x\r\nContent-Length: \(declared)\r\n\r\n{\"query\":")
                let received = await connection.receive(waitingUpTo: 10)
                expectEqual(received.status, 413, "\(received.text)")
                // Milliseconds alone; room for the whole suite beside it, as above.
                #expect(received.seconds < 5, "answered after \(received.seconds) s")
                #expect(received.closed)
                let error = Self.errorJSON(received)
                #expect(error["serverErrorCode"] == "BAD_REQUEST" && error["limit"] == .string(limit.name))
                expectEqual(error["reason"]?.stringValue?.contains("\(declared)"), true)
            }
            // records/modify takes 4 MiB (from a user: without one it is refused before its
            // body): one byte past it is refused, 4 MiB is not (its body is then waited for).
            let alice = try await server.user("alice")
            let modify =
                "/database/1/\(TestServer.container)/development/public/records/modify?ckAPIToken=\(server.developmentToken)&ckWebAuthToken=\(alice.webAuthToken!)"
            let past = try RawConnection(port: server.port)
            try past.send("POST \(modify) HTTP/1.1\r\nHost: x\r\nContent-Length: \(Limits.modifyRequestBodyBytes.value + 1)\r\n\r\n")
            let refused = await past.receive(waitingUpTo: 10)
            #expect(refused.status == 413 && Self.errorJSON(refused)["limit"] == .string(Limits.modifyRequestBodyBytes.name))
            let at = try RawConnection(port: server.port)
            try at.send("POST \(modify) HTTP/1.1\r\nHost: x\r\nContent-Length: \(Limits.modifyRequestBodyBytes.value)\r\n\r\n")
            let waiting = await at.receive(waitingUpTo: 1)
            #expect(waiting.bytes.isEmpty && !waiting.closed, "\(waiting.text)")
        }
    }

    /// Chunk sizes are read as they arrive: a size past the bound (or one that overflows 64
    /// bits) is refused at its size line, not after the body timeout.
    @Test func aChunkSizePastTheBoundIsRefusedAtItsSizeLine() async throws {
        try await TestServer.with { server in
            let limit = Limits.requestBodyBytes.value
            let head = "POST \(Self.query(server)) HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
            let cases: [(String, String)] = [
                ("the largest 64-bit size", "ffffffffffffffff\r\n{\"query\":"),
                ("an overflowing size", "1ffffffffffffffff\r\n"),
                ("one byte past in a second chunk", "2\r\n{}\r\n" + String(limit - 1, radix: 16) + "\r\n"),
            ]
            for (name, body) in cases {
                let connection = try RawConnection(port: server.port)
                try connection.send(head + body)
                let received = await connection.receive(waitingUpTo: 10)
                expectEqual(received.status, 413, "\(name): \(received.text)")
                // Milliseconds alone (the body timeout it replaces is 60 s); the bound leaves
                // room for the whole suite running beside the server on two cores.
                #expect(received.seconds < 5, "\(name): answered after \(received.seconds) s")
                #expect(received.closed, "\(name)")
                expectEqual(Self.errorJSON(received)["limit"], .string(Limits.requestBodyBytes.name), "\(name)")
            }
            // A size that arrives in a later read than the head is read too.
            let later = try RawConnection(port: server.port)
            try later.send(head + "10\r\n{\"query\":{}}    ")
            try await Task.sleep(for: .milliseconds(200))
            try later.send("\r\n" + String(limit, radix: 16) + "\r\n")
            let refused = await later.receive(waitingUpTo: 10)
            #expect(refused.status == 413 && refused.closed, "\(refused.text)")
            // Chunks adding up to exactly the bound are read (and answered for what they say).
            let padding = String(repeating: " ", count: limit - 2)
            let exact = try RawConnection(port: server.port)
            try exact.send(
                head + "2\r\n{}\r\n" + String(padding.utf8.count, radix: 16) + "\r\n" + padding + "\r\n0\r\n\r\n")
            let read = await exact.receive(waitingUpTo: 10)
            #expect(read.status == 400 && Self.errorJSON(read)["reason"]?.stringValue?.contains("query") == true, "\(read.text.prefix(300))")
        }
    }

    /// A client that sends its whole body before reading hears the 413 (the server reads and
    /// drops a bounded amount before closing, so the answer is not lost to a reset).
    @Test func aClientThatSendsFirstHearsTheAnswer() async throws {
        try await TestServer.with { server in
            let body = Array(repeating: UInt8(ascii: " "), count: 3 * 1_048_576)
            let connection = try RawConnection(port: server.port)
            let request = Array("POST \(Self.query(server)) HTTP/1.1\r\nHost: x\r\nContent-Length: \(body.count)\r\n\r\n".utf8)
            let sender = Thread { _ = connection.sendUntilClosed(request + body) }
            sender.start()
            let received = await connection.receive(waitingUpTo: 10)
            expectEqual(received.status, 413, "\(received.text.prefix(300))")
            #expect(received.closed)
        }
    }

    /// Python's urllib sends the whole body before it reads a byte of the answer, as many HTTP
    /// libraries do. An upload one byte past the asset bound is refused at its head; the server
    /// drains a bounded amount and closes, so the client hears a 413 or a closed connection at
    /// once, never a socket held open until the body or idle timeout (60 s, 75 s). Usually well
    /// under a second; the bound is 3 s because beside the timed suites on PostgreSQL a clean-clone
    /// CI run measured 1.02 s (2026-11-27).
    @Test func anUploadOnePastTheBoundSentWholeByUrllibIsRefusedPromptly() async throws {
        try await TestServer.with { server in
            let bytes = Int(server.service.options.assets.maximumBytes) + 1
            let script = """
                import sys, time, urllib.request, urllib.error
                body = bytes(\(bytes))
                request = urllib.request.Request("http://127.0.0.1:\(server.port)/assets/1/upload/any-token", data=body, method="POST")
                start = time.monotonic()
                try:
                    urllib.request.urlopen(request, timeout=30)
                    outcome = "accepted"
                except urllib.error.HTTPError as error:
                    outcome = "http %d" % error.code
                except (ConnectionError, urllib.error.URLError) as error:
                    outcome = "closed %s" % type(getattr(error, "reason", error)).__name__
                print("%s %.3f" % (outcome, time.monotonic() - start))
                """
            let (status, output) = try await ExternalProcess.run(["python3", "-c", script])
            let printed = String(decoding: output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            expectEqual(status, 0, "\(printed)")
            let words = printed.split(separator: " ")
            #expect(words.first == "closed" || printed.hasPrefix("http 413"), "\(printed)")
            #expect((words.last.flatMap { Double($0) } ?? 99) < 3.0, "\(printed)")
        }
    }

    /// An answer given before the body ended (here: the API token is wrong, so the body is
    /// never read) says `Connection: close`, and the connection closes once a bounded amount of
    /// the rest is drained, rather than reading the whole body.
    @Test func anEarlyAnswerClosesAfterABoundedDrain() async throws {
        try await TestServer.with(configure: { $0.edge.refusedBodyDrainBytes = 10_000 }) { server in
            let path = "/database/1/\(TestServer.container)/development/public/records/query?ckAPIToken=wrong"
            let connection = try RawConnection(port: server.port)
            try connection.send("POST \(path) HTTP/1.1\r\nHost: x\r\nContent-Length: 500000\r\n\r\n{")
            let answer = await connection.receive(waitingUpTo: 15)
            #expect(answer.status == 401 && answer.text.lowercased().contains("connection: close"), "\(answer.text)")
            // More than the drain takes: the server closes before the body is done.
            let taken = connection.sendUntilClosed(Array(repeating: UInt8(ascii: " "), count: 499_999))
            let after = await connection.receive(waitingUpTo: 15)
            #expect(taken < 499_999 || after.closed)
        }
    }

    /// Writing needs a user (or a server-to-server key): a records/modify body with the API
    /// token alone is refused before it is read, so the largest body a route reads whole is not
    /// a public token's to send.
    @Test func aModifyWithoutAUserIsRefusedBeforeItsBodyIsRead() async throws {
        try await TestServer.with { server in
            let modify = "/database/1/\(TestServer.container)/development/public/records/modify?ckAPIToken=\(server.developmentToken)"
            let connection = try RawConnection(port: server.port)
            // Declared at the bound, and never sent: the answer cannot have waited for it.
            try connection.send(
                "POST \(modify) HTTP/1.1\r\nHost: x\r\nContent-Length: \(Limits.modifyRequestBodyBytes.value)\r\n\r\n{\"operations\":[")
            let received = await connection.receive(waitingUpTo: 10)
            expectEqual(received.status, 421, "\(received.text)")
            expectEqual(Self.errorJSON(received)["serverErrorCode"], "AUTHENTICATION_REQUIRED")
            #expect(received.closed && received.seconds < 5)
        }
    }

    /// An `Upgrade` the server does not speak (curl --http2's h2c offer) is ignored: the request
    /// is answered as HTTP/1.1.
    @Test func anUpgradeToAnotherProtocolIsAnsweredAsHTTP1() async throws {
        try await TestServer.with { server in
            let connection = try RawConnection(port: server.port)
            try connection.send(
                "GET /health HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n")
            // Answered at once; the connection then stays open, kept alive as HTTP/1.1 keeps it.
            let received = await connection.receive(waitingUpTo: 2)
            #expect(received.text.hasPrefix("HTTP/1.1 200"), "\(received.text)")
            #expect(received.body.contains("\"status\":\"ok\""))
            // And a POST with a body, upgraded to something else entirely.
            let post = try RawConnection(port: server.port)
            let body = "{\"query\":{\"recordType\":\"Note\"}}"
            try post.send(
                "POST \(Self.query(server)) HTTP/1.1\r\nHost: x\r\nConnection: upgrade, close\r\nUpgrade: TLS/1.2\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)")
            let answered = await post.receive(waitingUpTo: 15)
            #expect(answered.status == 200 && answered.body.contains("records"), "\(answered.text)")
        }
    }

    /// The bytes of bodies in flight: one address, one caller, the node. The first body stalls
    /// half-sent (holding its reservation); the next is refused past the share and read at it.
    @Test func bytesInFlightAreBoundedPerAddressPerCallerAndPerNode() async throws {
        let share = 100_000
        let cases: [(String, (inout EdgeLimits) -> Void, code: String, status: Int, forwarded: Bool)] = [
            ("address", { $0.bodyBytesPerClient = share }, "THROTTLED", 429, false),
            ("caller", { $0.bodyBytesPerCaller = share }, "THROTTLED", 429, true),
            ("node", { $0.bodyBytesInFlight = share }, "TRY_AGAIN_LATER", 503, true),
        ]
        for (name, bound, code, status, forwarded) in cases {
            try await TestServer.with(configure: {
                bound(&$0.edge)
                // Behind a trusted proxy each request names its client, so one test stands
                // for several addresses.
                $0.trustedProxies = ["127.0.0.1"]
            }) { server in
                func send(_ size: Int, from client: String, complete: Bool) throws -> RawConnection {
                    let core = "{\"query\":{\"recordType\":\"Note\"}}"
                    let body = core + String(repeating: " ", count: size - core.utf8.count)
                    let connection = try RawConnection(port: server.port)
                    let sent = complete ? body : String(body.prefix(10))
                    try connection.send(
                        "POST \(Self.query(server)) HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Forwarded-For: \(client)\r\nContent-Length: \(size)\r\n\r\n\(sent)")
                    return connection
                }
                let second = forwarded ? "198.51.100.2" : "198.51.100.1"
                var stalled = try send(60_000, from: "198.51.100.1", complete: false)
                // The stalled body's reservation is taken once its request is authenticated (up
                // to seconds later while the whole suite shares the two cores). An attempt that
                // overtakes it takes the bytes first, and the stalled one is refused instead:
                // then it is sent again.
                var refused: RawConnection.Received?
                var seen: [String] = []
                for _ in 0..<150 {
                    let attempt = await (try send(60_000, from: second, complete: true)).receive(waitingUpTo: 15)
                    if attempt.status == status {
                        refused = attempt
                        break
                    }
                    seen.append("\(attempt.status.map(String.init) ?? "none") after \(attempt.seconds) s")
                    if await !stalled.receive(waitingUpTo: 0.01).bytes.isEmpty {
                        stalled = try send(60_000, from: "198.51.100.1", complete: false)
                    }
                    try await Task.sleep(for: .milliseconds(100))
                }
                let answer = try #require(refused, "\(name): never refused; answers: \(seen.prefix(5)) … \(seen.suffix(3))")
                let error = Self.errorJSON(answer)
                expectEqual(error["serverErrorCode"], .string(code), "\(name): \(answer.text)")
                expectEqual(error["retryAfter"], 1, "\(name)")
                // At the share: 60,000 held and 40,000 more is exactly the bound.
                let atShare = await (try send(40_000, from: second, complete: true)).receive(waitingUpTo: 15)
                expectEqual(atShare.status, 200, "\(name): \(atShare.text.prefix(300))")
                // Once the stalled one goes, its bytes are given back.
                stalled.hangUp()
                var status2: Int?
                for _ in 0..<150 where status2 != 200 {
                    try await Task.sleep(for: .milliseconds(100))
                    status2 = await (try send(60_000, from: second, complete: true)).receive(waitingUpTo: 15).status
                }
                expectEqual(status2, 200, "\(name)")
            }
        }
    }
}

/// Bodies over 64 KiB are parsed on the body-parsing thread, off the executor's threads.
@Suite struct BodyParsingThreadTests {
    @Test func theBodyParsingPoolRunsOnItsOwnThread() async throws {
        #expect(!WorkerThreads.isThread(of: WorkerThreads.bodyParsing.name))
        #expect(try await WorkerThreads.bodyParsing.run { WorkerThreads.isThread(of: WorkerThreads.bodyParsing.name) })
        #expect(try await WorkerThreads.bodyParsing.run { !WorkerThreads.isHashingThread })
        #expect(RouteInput.parsedInPlaceBytes < Limits.requestBodyBytes.value)
    }
}

/// `ChunkedBodyScanner` on its own: sizes counted across reads, extensions and trailers.
@Suite struct ChunkedBodyScannerTests {
    static func scan(_ parts: [String], limit: Int) -> [ChunkedBodyScanner.Outcome] {
        var scanner = ChunkedBodyScanner(limit: limit)
        return parts.map { part in Array(part.utf8).withUnsafeBytes { scanner.scan($0) } }
    }

    @Test func sizesAddUpAcrossReads() {
        expectEqual(Self.scan(["5\r\nhel", "lo\r\n5;ext=1\r\nworld\r\n", "0\r\n\r\n"], limit: 10), [.reading, .reading, .finished])
        expectEqual(Self.scan(["5\r\nhello\r\n6\r\n"], limit: 10), [.overLimit(declared: 11)])
        expectEqual(Self.scan(["A\r\n0123456789\r\n0\r\nX-Trailer: 1\r\n\r\n"], limit: 10), [.finished])
        expectEqual(Self.scan(["ffffffffffffffff\r\n"], limit: 10), [.overLimit(declared: .max)])
        expectEqual(Self.scan(["1ffffffffffffffff"], limit: .max), [.overLimit(declared: .max)])
        expectEqual(Self.scan(["zz\r\n"], limit: 10), [.unreadable])
        expectEqual(Self.scan(["3\r\nabcX"], limit: 10), [.unreadable])
    }
}

/// `HeadTerminatorFinder` on its own: a head that arrives in one read (found by the C library's
/// search) and the same head split across two reads at every byte (the scan that carries its
/// state from read to read) end at the same byte and say the same about `chunked`.
@Suite struct HeadTerminatorFinderTests {
    /// Where the head ends, counted from the first byte, and whether it says `chunked`: the
    /// bytes given to one finder in the reads `splitAt` makes.
    static func find(_ text: String, splitAt split: Int? = nil) -> (end: Int, mayBeChunked: Bool)? {
        let bytes = Array(text.utf8)
        let reads = split.map { [Array(bytes[..<$0]), Array(bytes[$0...])] } ?? [bytes]
        var finder = HeadTerminatorFinder()
        var offset = 0
        for read in reads {
            if let found = read.withUnsafeBytes({ finder.find(in: $0) }) { return (offset + found.end, found.mayBeChunked) }
            offset += read.count
        }
        return nil
    }

    @Test(arguments: [
        ("GET /a HTTP/1.1\r\nHost: x\r\n\r\n", 28, false),
        ("POST /a HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n5\r\nhello", 48, true),
        ("POST /a HTTP/1.1\r\nX: cchunkedd\r\n\r\n", 34, true),
        ("POST /a HTTP/1.1\r\nX: CHUNKED\r\n\r\n", 32, true),
        ("POST /a HTTP/1.1\r\nX: chunke\r\n\r\nchunked\r\n\r\n", 31, false),
        ("GET /a HTTP/1.1\r\nX: a\r\r\n\r\n\r\n\r\n", 26, false),
        ("GET /a HTTP/1.1\r\nHost: x\r\n", nil, false),
    ] as [(String, Int?, Bool)])
    func aHeadEndsAtItsTerminatorInOneReadOrTwo(head: String, end: Int?, chunked: Bool) {
        let whole = Self.find(head)
        #expect(whole?.end == end && (whole?.mayBeChunked ?? chunked) == chunked, "\(String(describing: whole))")
        for split in 0...head.utf8.count {
            let parts = Self.find(head, splitAt: split)
            #expect(parts?.end == whole?.end && parts?.mayBeChunked == whole?.mayBeChunked, "split at \(split): \(String(describing: parts))")
        }
    }

    @Test func theWordIsLookedForCaseAsideAndOnlyWhole() {
        for (text, expected) in [("chunked", true), ("xChUnKeDx", true), ("chunke", false), ("cchunke d", false), ("", false)] {
            #expect(Array(text.utf8).withUnsafeBytes { HeadTerminatorFinder.mentionsChunked($0) } == expected, "\(text)")
        }
    }
}
