import Foundation
import NimbusTestSupport
import NimbusWire
import Testing

/// How a connection's requests are read and answered (`ExchangeHandler`): in order, one at a
/// time, whatever way their bytes arrive, over raw sockets.
@Suite struct HTTPExchangeTests {
    /// `count` complete answers in `bytes` (each with a Content-Length).
    static func answers(_ count: Int) -> @Sendable ([UInt8]) -> Bool {
        { bytes in Self.split(String(decoding: bytes, as: UTF8.self)).count >= count }
    }

    /// The answers in `text`, each as its head and body.
    static func split(_ text: String) -> [(head: String, body: String)] {
        var rest = Substring(text)
        var answers: [(String, String)] = []
        while let end = rest.range(of: "\r\n\r\n") {
            let head = String(rest[..<end.lowerBound])
            let length =
                head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
            let body = rest[end.upperBound...].utf8.prefix(length)
            guard body.count == length else { break }
            answers.append((head, String(decoding: body, as: UTF8.self)))
            rest = rest[end.upperBound...].dropFirst(length)
        }
        return answers
    }

    static func query(_ server: TestServer, body: String, close: Bool = false) -> String {
        "POST /database/1/\(TestServer.container)/development/public/records/query?ckAPIToken=\(server.developmentToken) HTTP/1.1\r\n"
            + "Host: x\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n"
            + (close ? "Connection: close\r\n" : "") + "\r\n" + body
    }

    static let queryBody = #"{"query":{"recordType":"Note"}}"#

    @Test func pipelinedRequestsAreAnsweredInOrder() async throws {
        try await TestServer.with { server in
            let connection = try RawConnection(port: server.port)
            // Three requests in one write: a query, the health check, a query that fails.
            try connection.send(
                Self.query(server, body: Self.queryBody) + "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                    + Self.query(server, body: #"{"query":{}}"#))
            let received = await connection.receive(waitingUpTo: 15, until: Self.answers(3))
            let answers = Self.split(received.text)
            try #require(answers.count == 3, "\(received.text.prefix(600))")
            #expect(answers[0].head.hasPrefix("HTTP/1.1 200"), "\(answers[0].head)")
            #expect(answers[0].body.contains(#""records""#), "\(answers[0].body)")
            #expect(answers[1].head.hasPrefix("HTTP/1.1 200"), "\(answers[1].head)")
            #expect(answers[2].head.hasPrefix("HTTP/1.1 400"), "\(answers[2].head)")
            #expect(answers[2].body.contains("BAD_REQUEST"), "\(answers[2].body)")
            for answer in answers {
                let head = answer.head.lowercased()
                #expect(head.contains("\r\ndate: ") && head.contains("\r\nserver: nimbus"), "\(answer.head)")
            }
            #expect(!received.closed)

            // Many at once: the socket is not read while requests wait, and each is answered.
            let flood = try RawConnection(port: server.port)
            try flood.send(String(repeating: "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", count: 300))
            let floodAnswers = await flood.receive(waitingUpTo: 30, until: Self.answers(300))
            let answered = Self.split(floodAnswers.text)
            #expect(answered.count == 300 && answered.allSatisfy { $0.head.hasPrefix("HTTP/1.1 200") }, "\(answered.count) answers")
        }
    }

    @Test func aBodyThatArrivesInPiecesOrPastTheGatheredSizeIsReadWhole() async throws {
        try await TestServer.with { server in
            // The head first, the body 200 ms later in two pieces: the route runs before the body
            // is there and reads it as it comes.
            let slow = try RawConnection(port: server.port)
            let request = Self.query(server, body: Self.queryBody)
            let split = request.index(request.endIndex, offsetBy: -Self.queryBody.count)
            try slow.send(String(request[..<split]))
            try await Task.sleep(for: .milliseconds(200))
            try slow.send(String(Self.queryBody.prefix(10)))
            try await Task.sleep(for: .milliseconds(100))
            try slow.send(String(Self.queryBody.dropFirst(10)))
            let slowAnswer = await slow.receive(waitingUpTo: 15, until: Self.answers(1))
            #expect(slowAnswer.status == 200, "\(slowAnswer.text.prefix(400))")

            // A body past what is gathered before the route runs (16 KB), in one write.
            let padded = "{" + String(repeating: " ", count: 40_000) + #""query":{"recordType":"Note"}}"#
            let large = try RawConnection(port: server.port)
            try large.send(Self.query(server, body: padded) + "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            let largeAnswers = await large.receive(waitingUpTo: 15, until: Self.answers(2))
            let answers = Self.split(largeAnswers.text)
            try #require(answers.count == 2, "\(largeAnswers.text.prefix(400))")
            #expect(answers[0].head.hasPrefix("HTTP/1.1 200") && answers[0].body.contains(#""records""#), "\(answers[0])")
            #expect(answers[1].head.hasPrefix("HTTP/1.1 200"), "\(answers[1].head)")
        }
    }

    /// Streamed bodies one after another on one connection: each is read whole, however late
    /// the news that the route finished the one before reaches the connection.
    @Test func streamedBodiesInARowAreEachReadWhole() async throws {
        try await TestServer.with { server in
            let padded = "{" + String(repeating: " ", count: 40_000) + #""query":{"recordType":"Note"}}"#
            let connection = try RawConnection(port: server.port)
            for round in 0..<60 {
                // Sent as soon as the answer before it is read, each body streamed (over 16 KB).
                try connection.send(Self.query(server, body: padded))
                let received = await connection.receive(waitingUpTo: 15, until: Self.answers(1))
                #expect(received.status == 200 && received.body.contains(#""records""#), "round \(round): \(received.text.prefix(300))")
                guard received.status == 200 else { break }
            }
        }
    }

    /// The socket is read on while a request is answered; what arrives meanwhile waits its turn
    /// (`ByteArrivalHandler`), and an answer to an earlier pipelined request is not taken for an
    /// early answer to the one whose body is still arriving.
    @Test func requestsArrivingWhileOthersAreAnsweredWaitTheirTurn() async throws {
        try await TestServer.with { server in
            let health = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
            let request = Self.query(server, body: Self.queryBody)
            let headAndStart = String(request.dropLast(Self.queryBody.count - 10))
            let rest = String(Self.queryBody.dropFirst(10))

            // A query's head and the start of its body behind health checks, the rest of its
            // body 200 ms later: every answer, none saying `Connection: close`, and the
            // connection stays. Behind a hundred in one write, then behind two hundred from a
            // write of its own, sent while they are answered.
            for (checks, separateWrite) in [(100, false), (200, true)] {
                let connection = try RawConnection(port: server.port)
                let checksSent = String(repeating: health, count: checks)
                if separateWrite {
                    try connection.send(checksSent)
                    try connection.send(headAndStart)
                } else {
                    try connection.send(checksSent + headAndStart)
                }
                try await Task.sleep(for: .milliseconds(200))
                try connection.send(rest)
                let received = await connection.receive(waitingUpTo: 15, until: Self.answers(checks + 1))
                let answers = Self.split(received.text)
                #expect(answers.count == checks + 1 && !received.closed, "\(answers.count) answers, closed: \(received.closed)")
                #expect(answers.last?.body.contains(#""records""#) == true, "\(answers.last?.head ?? "")")
                #expect(!answers.contains { $0.head.lowercased().contains("connection: close") })
            }

            // More than the front holds (64 KB) arriving while answers are written: the socket
            // waits, then every request is answered.
            let flood = try RawConnection(port: server.port)
            try flood.send(String(repeating: health, count: 100))
            try flood.send(String(repeating: health, count: 3_000))
            let floodAnswers = await flood.receive(waitingUpTo: 60, until: Self.answers(3_100))
            let answered = Self.split(floodAnswers.text)
            #expect(answered.count == 3_100 && answered.allSatisfy { $0.head.hasPrefix("HTTP/1.1 200") }, "\(answered.count) answers")

            // The client ends its side behind requests sent while others are answered: all are
            // answered, then the server closes.
            let halfClosed = try RawConnection(port: server.port)
            try halfClosed.send(String(repeating: health, count: 50))
            try halfClosed.send(health + request)
            halfClosed.finishSending()
            let ended = await halfClosed.receive(waitingUpTo: 15)
            let last = Self.split(ended.text)
            #expect(ended.closed && last.count == 52, "\(last.count) answers, closed: \(ended.closed)")
            #expect(last.last?.body.contains(#""records""#) == true)
        }
    }

    /// A body pipelined behind a request that is not answered yet waits at the front of the
    /// pipeline, within its bound, even when its head came in the same read as that request:
    /// the server does not read an upload's 48 MB into memory behind a long poll.
    @Test func aBodyBehindAnUnansweredRequestIsNotReadAhead() async throws {
        try await TestServer.with(configure: { $0.webCourierPollTimeout = .seconds(4) }) { server in
            let browser = try await server.user("alice").onDevice("browser")
            let poll = try await PushDeliveryTests.courier(browser)
            let length = 48 * 1_048_576
            let connection = try RawConnection(port: server.port)
            // The long poll (unanswered for 4 s), then an upload's head in the same write.
            try connection.send(
                "GET \(poll.path)\(poll.query) HTTP/1.1\r\nHost: x\r\n\r\n"
                    + "POST /assets/1/upload/pipelined HTTP/1.1\r\nHost: x\r\nContent-Length: \(length)\r\n\r\n")
            let taken = connection.sendWithoutWaiting(Array(repeating: 0x20, count: 1 << 20), upTo: length, for: 1.5)
            // What the kernel's buffers on both sides hold, and the front's 64 KB: nowhere near
            // the body. Read on into the answer's queue, the whole body was taken in this time.
            #expect(taken < 24 * 1_048_576, "\(taken) bytes taken while the poll was unanswered")
            connection.hangUp()
        }
    }

    /// A graceful shutdown (SIGTERM) closes a connection that waits for its next request at
    /// once, as one whose request was answered before its body ended, and one whose request is
    /// still being read once that request is answered; then the server stops.
    @Test func aGracefulShutdownClosesIdleConnectionsAndAnswersRequestsInFlight() async throws {
        let server = try await TestServer.start()
        var stopped = false
        defer { if !stopped { Task { [server] in try? await server.stop() } } }
        let idle = try RawConnection(port: server.port)
        try idle.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        let first = await idle.receive(waitingUpTo: 15, until: Self.answers(1))
        #expect(Self.split(first.text).count == 1 && !first.closed)
        // A request answered before its body ended (a wrong token), the rest of the body not
        // sent: nothing is left to answer on it.
        let refused = try RawConnection(port: server.port)
        try refused.send(
            "POST /database/1/\(TestServer.container)/development/public/records/query?ckAPIToken=wrong HTTP/1.1\r\n"
                + "Host: x\r\nContent-Length: 500000\r\n\r\n{")
        let refusal = await refused.receive(waitingUpTo: 15, until: Self.answers(1))
        #expect(refusal.status == 401, "\(refusal.text.prefix(300))")
        // A query whose body is half sent: its route is reading it.
        let reading = try RawConnection(port: server.port)
        let request = Self.query(server, body: Self.queryBody)
        try reading.send(String(request.dropLast(10)))
        try await Task.sleep(for: .milliseconds(200))

        let stopping = Task { try await server.stop() }
        let closedIdle = await idle.receive(waitingUpTo: 15)
        #expect(closedIdle.closed && closedIdle.seconds < 10, "the idle connection stayed open")
        #expect(closedIdle.text.isEmpty)
        let closedRefused = await refused.receive(waitingUpTo: 15)
        #expect(closedRefused.closed && closedRefused.seconds < 10, "the connection whose request was answered early stayed open")
        // The request being read is not cut off: the rest of its body comes, and its answer.
        let meanwhile = await reading.receive(waitingUpTo: 0.5)
        #expect(!meanwhile.closed && meanwhile.text.isEmpty)
        try reading.send(String(request.suffix(10)))
        let answered = await reading.receive(waitingUpTo: 15)
        #expect(answered.closed && answered.seconds < 10)
        let answers = Self.split(answered.text)
        #expect(answers.count == 1 && answers.first?.head.hasPrefix("HTTP/1.1 200") == true, "\(answered.text.prefix(400))")
        try await stopping.value
        stopped = true
    }

    @Test func aConnectionEndsAfterTheAnswerItsClientAskedToBeLast() async throws {
        try await TestServer.with { server in
            // `Connection: close`: answered, then closed.
            let closing = try RawConnection(port: server.port)
            try closing.send(Self.query(server, body: Self.queryBody, close: true))
            let closed = await closing.receive(waitingUpTo: 15)
            #expect(closed.closed && closed.seconds < 10)
            let answers = Self.split(closed.text)
            #expect(answers.count == 1 && answers.first?.head.hasPrefix("HTTP/1.1 200") == true, "\(closed.text.prefix(400))")

            // The client ends its side after two requests: both are answered, then the server closes.
            let halfClosed = try RawConnection(port: server.port)
            try halfClosed.send(Self.query(server, body: Self.queryBody) + "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            halfClosed.finishSending()
            let ended = await halfClosed.receive(waitingUpTo: 15)
            #expect(ended.closed && ended.seconds < 10)
            let both = Self.split(ended.text)
            #expect(both.count == 2 && both.allSatisfy { $0.head.hasPrefix("HTTP/1.1 200") }, "\(ended.text.prefix(600))")

            // A client that stops in the middle of a body is answered by the route that reads
            // it (the body is short of its length), and the connection closes.
            let cut = try RawConnection(port: server.port)
            let request = Self.query(server, body: Self.queryBody)
            try cut.send(String(request.dropLast(5)))
            try await Task.sleep(for: .milliseconds(100))
            cut.finishSending()
            let cutAnswer = await cut.receive(waitingUpTo: 15)
            #expect(cutAnswer.closed && cutAnswer.seconds < 10)
            #expect(cutAnswer.status == nil || cutAnswer.status == 400, "\(cutAnswer.text.prefix(400))")
        }
    }
}
