import Foundation
import NIOCore
import NIOPosix

/// A TCP relay on loopback in front of a server that can lose the server's answers: the
/// request reaches the server and is applied, the answer never reaches the client, which
/// waits out its timeout, as when a phone loses its network mid-request. For tests of retries
/// that must not apply a request twice. Closing the relay closes the connections it holds.
public final class AnswerDroppingRelay: @unchecked Sendable {
    public let port: Int
    private let listener: any Channel
    private let lock = NSLock()
    private var answersToDrop = 0
    private var dropped = 0
    private var requests = 0

    public init(targetPort: Int) async throws {
        let state = Shared()
        let bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { client in
                ClientBootstrap(group: client.eventLoop)
                    .connect(host: "127.0.0.1", port: targetPort)
                    .flatMap { server in
                        client.pipeline.addHandler(Forward(to: server, relay: state)).flatMap {
                            server.pipeline.addHandler(AnswerGate(client: client, relay: state))
                        }
                    }
            }
        listener = try await bootstrap.bind(host: "127.0.0.1", port: 0).get()
        port = listener.localAddress?.port ?? 0
        state.relay = self
    }

    /// The next `count` answers are lost (0: pass everything; `Int.max`: lose them all).
    public func dropAnswers(_ count: Int) { lock.withLock { answersToDrop = count } }

    /// Answers lost so far.
    public var droppedAnswers: Int { lock.withLock { dropped } }

    /// Requests passed on to the server so far (request lines seen).
    public var forwardedRequests: Int { lock.withLock { requests } }

    public func close() async throws { try await listener.close() }

    fileprivate func countRequests(_ count: Int) { lock.withLock { requests += count } }

    fileprivate func takeDrop() -> Bool {
        lock.withLock {
            guard answersToDrop > 0 else { return false }
            if answersToDrop != Int.max { answersToDrop -= 1 }
            dropped += 1
            return true
        }
    }

    private final class Shared: @unchecked Sendable {
        weak var relay: AnswerDroppingRelay?
    }

    /// Client to server: every byte as it comes, counting request lines (each ends in
    /// `HTTP/1.1` CRLF, which no JSON body holds) across the reads they arrive in.
    private final class Forward: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = ByteBuffer
        let partner: any Channel
        let relay: Shared
        private var matched = 0
        private static let requestLineEnd = Array("HTTP/1.1\r\n".utf8)
        init(to partner: any Channel, relay: Shared) {
            self.partner = partner
            self.relay = relay
        }
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let buffer = unwrapInboundIn(data)
            var seen = 0
            for byte in buffer.readableBytesView {
                if byte == Self.requestLineEnd[matched] {
                    matched += 1
                    if matched == Self.requestLineEnd.count {
                        seen += 1
                        matched = 0
                    }
                } else {
                    matched = byte == Self.requestLineEnd[0] ? 1 : 0
                }
            }
            if seen > 0 { relay.relay?.countRequests(seen) }
            partner.writeAndFlush(buffer, promise: nil)
        }
        func channelInactive(context: ChannelHandlerContext) { partner.close(promise: nil) }
        func errorCaught(context: ChannelHandlerContext, error: any Error) { context.close(promise: nil) }
    }

    /// Server to client: passed on, or (when an answer is to be lost) both ends cut.
    private final class AnswerGate: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = ByteBuffer
        let client: any Channel
        let relay: Shared
        private var blackHoled = false
        init(client: any Channel, relay: Shared) {
            self.client = client
            self.relay = relay
        }
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            if blackHoled { return }
            if relay.relay?.takeDrop() == true {
                // The answer is lost and the client hears nothing more on this connection: it
                // waits out its request timeout, as over a network that went away. (Cutting the
                // connection instead makes libcurl resend the request on a new one, without its
                // body, and the server then waits for the body.)
                blackHoled = true
                context.close(promise: nil)
                return
            }
            client.writeAndFlush(unwrapInboundIn(data), promise: nil)
        }
        func channelInactive(context: ChannelHandlerContext) { if !blackHoled { client.close(promise: nil) } }
        func errorCaught(context: ChannelHandlerContext, error: any Error) { context.close(promise: nil) }
    }
}
