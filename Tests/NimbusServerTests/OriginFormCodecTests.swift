import HTTPTypes
import NIOHTTP1
import NIOHTTPTypesHTTP1
@testable import NimbusServer
import NimbusTestSupport
import Testing

/// `OriginFormCodec` takes a path target as it is and leaves every other target to the
/// library's conversion: its requests are the library's, field for field.
struct OriginFormCodecTests {
    static func head(_ method: HTTPMethod, _ uri: String, _ headers: [(String, String)]) -> HTTPRequestHead {
        HTTPRequestHead(version: .http1_1, method: method, uri: uri, headers: HTTPHeaders(headers))
    }

    @Test func itsRequestsAreTheLibrarysForPathsAndEveryOtherTarget() throws {
        let heads = [
            Self.head(.POST, "/database/1/iCloud.x/development/private/records/lookup?ckWebAuthToken=a%2Bb", [("Host", "127.0.0.1:8080"), ("Content-Length", "2")]),
            Self.head(.GET, "/", [("Host", "x"), ("Cookie", "a=1; b=2"), ("Accept", "*/*"), ("accept", "text/html")]),
            Self.head(.GET, "/health", []),
            Self.head(.GET, "//double//slashes?q=a b", [("Host", "x")]),
            Self.head(.GET, "/é?ü", [("Host", "x")]),
            // Not paths: the library's own conversion.
            Self.head(.GET, "http://127.0.0.1:8080/health?x=1", [("Host", "x")]),
            Self.head(.OPTIONS, "*", [("Host", "x")]),
            Self.head(.GET, "health", [("Host", "x")]),
            Self.head(.GET, "", [("Host", "x")]),
        ]
        for head in heads {
            let library = try HTTPRequest(head, secure: false, splitCookie: false)
            expectEqual(try OriginFormCodec.request(head), library, "\(head.uri)")
        }
        // A method HTTPTypes refuses is refused the same way.
        let bad = Self.head(.RAW(value: "B@D"), "/health", [("Host", "x")])
        #expect(throws: (any Error).self) { try HTTPRequest(bad, secure: false, splitCookie: false) }
        #expect(throws: (any Error).self) { try OriginFormCodec.request(bad) }
    }

    /// A proxy's absolute form still reaches its route (the library turns it into a path).
    @Test func anAbsoluteFormTargetIsServed() async throws {
        try await TestServer.with { server in
            let connection = try RawConnection(port: server.port)
            try connection.send("GET http://127.0.0.1:\(server.port)/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            let answer = await connection.receive(waitingUpTo: 5)
            expectEqual(answer.status, 200, "\(answer.text)")
        }
    }
}
