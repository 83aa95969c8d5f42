import HummingbirdCore
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NimbusWire

/// What one client may hold of the server before its request reaches a route: how long a
/// request may take to arrive, how long a connection may idle, how many connections one
/// address may keep open. Defaults are the named limits in `Limits`.
public struct EdgeLimits: Sendable {
    public var requestHeaderTimeout: TimeAmount = .seconds(Int64(Limits.requestHeaderSeconds.value))
    public var requestBodyTimeout: TimeAmount = .seconds(Int64(Limits.requestBodySeconds.value))
    public var idleTimeout: TimeAmount = .seconds(Int64(Limits.idleConnectionSeconds.value))
    /// 0: no cap (load tests that open thousands of WebSockets from one address).
    public var connectionsPerClient: Int = Limits.connectionsPerClient.value

    public init() {}
}

/// Wraps the HTTP/1.1 + WebSocket child channel with the protections its pipeline lacks:
/// - a request that does not parse gets 400 with CloudKit's error JSON and the connection is
///   closed (before the first request is negotiated, Hummingbird's upgrade pipeline answered
///   nothing and held the socket for good);
/// - header, body and idle timeouts;
/// - a cap on concurrent connections per client address;
/// - a WebSocket upgrade on a path that is not a stream is refused with the error JSON.
struct GuardedChannel<Inner: ServerChildChannel>: ServerChildChannel {
    typealias Value = Inner.Value

    let inner: Inner
    let limits: EdgeLimits
    let counter: ConnectionCounter
    /// Whether a path (without the query) serves WebSocket upgrades.
    let isStreamPath: @Sendable (String) -> Bool

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        let address = channel.remoteAddress?.ipAddress
        guard counter.open(address, limit: limits.connectionsPerClient) else {
            logger.notice("connection refused: too many from one address", metadata: ["client": "\(address ?? "?")"])
            let error = CloudKitError(
                .throttled,
                "this address already holds \(limits.connectionsPerClient) connections (limit connectionsPerClient); close some or reuse them")
            var buffer = channel.allocator.buffer(capacity: 256)
            buffer.writeBytes(EdgeResponse.raw(status: .tooManyRequests, error: error))
            channel.writeAndFlush(buffer).whenComplete { _ in channel.close(promise: nil) }
            return channel.eventLoop.makeFailedFuture(ConnectionRefused())
        }
        channel.closeFuture.whenComplete { _ in counter.close(address) }
        return inner.setup(channel: channel, logger: logger).flatMapThrowing { value in
            let state = ConnectionState()
            let operations = channel.pipeline.syncOperations
            try operations.addHandler(ByteArrivalHandler(state: state), position: .first)
            let decoder = try operations.handler(type: ByteToMessageHandler<HTTPRequestDecoder>.self)
            try operations.addHandler(
                RequestGuardHandler(state: state, limits: limits, isStreamPath: isStreamPath, logger: logger),
                position: .after(decoder))
            return value
        }
    }

    func handle(value: Value, logger: Logger) async {
        await inner.handle(value: value, logger: logger)
    }

    struct ConnectionRefused: Error {}
}

/// Open connections per client address.
final class ConnectionCounter: Sendable {
    private let counts = NIOLockedValueBox([String: Int]())

    func open(_ address: String?, limit: Int) -> Bool {
        guard let address, limit > 0 else { return true }
        return counts.withLockedValue { counts in
            let current = counts[address, default: 0]
            guard current < limit else { return false }
            counts[address] = current + 1
            return true
        }
    }

    func close(_ address: String?) {
        guard let address else { return }
        counts.withLockedValue { counts in
            let remaining = counts[address, default: 1] - 1
            counts[address] = remaining > 0 ? remaining : nil
        }
    }
}

/// Where a connection is in its request cycle; read and written on the channel's event loop only.
final class ConnectionState {
    enum Phase {
        /// No request in progress: the idle timer runs.
        case idle
        /// Bytes of a request arrived, its header block is not complete: the header timer runs.
        case readingHead
        /// The head arrived, the body has not ended: the body timer runs.
        case readingBody
        /// The request is read; the server is answering it. No timer.
        case responding
        /// A WebSocket, or a connection being closed: nothing more to guard.
        case passive
    }

    var phase = Phase.idle
    /// Set by the request guard, so raw bytes arriving on an idle connection can start the header timer.
    var startHeaderTimer: (() -> Void)?
}

/// At the front of the pipeline: notices a request's first bytes on an idle connection.
final class ByteArrivalHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer

    let state: ConnectionState
    init(state: ConnectionState) { self.state = state }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if state.phase == .idle { state.startHeaderTimer?() }
        context.fireChannelRead(data)
    }
}

/// Just after the HTTP decoder: runs the timers and answers what the decoder cannot parse.
final class RequestGuardHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    let state: ConnectionState
    let limits: EdgeLimits
    let isStreamPath: @Sendable (String) -> Bool
    let logger: Logger
    private var timer: Scheduled<Void>?

    init(state: ConnectionState, limits: EdgeLimits, isStreamPath: @escaping @Sendable (String) -> Bool, logger: Logger) {
        self.state = state
        self.limits = limits
        self.isStreamPath = isStreamPath
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        state.startHeaderTimer = {
            let (handler, context) = loopBound.value
            handler.enter(.readingHead, context: context)
        }
        enter(.idle, context: context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        state.startHeaderTimer = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard state.phase != .passive else { return context.fireChannelRead(data) }
        switch unwrapInboundIn(data) {
        case .head(let head):
            if head.headers[canonicalForm: "upgrade"].contains(where: { $0.lowercased() == "websocket" }) {
                let path = String(head.uri.split(separator: "?", maxSplits: 1).first ?? "")
                guard isStreamPath(path) else {
                    refuse(
                        context: context, status: .badRequest,
                        error: .badRequest("\(Names.escaped(path)) is not a WebSocket endpoint; the notification stream is /device/1/{container}/{environment}/notifications/connect"))
                    return
                }
                enter(.passive, context: context)
            } else {
                enter(.readingBody, context: context)
            }
        case .body:
            break
        case .end:
            if state.phase == .readingBody { enter(.responding, context: context) }
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if state.phase != .passive, case .end = unwrapOutboundIn(data), state.phase == .responding {
            enter(.idle, context: context)
        }
        context.write(data, promise: promise)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A parse error while no request is being answered: nobody else will answer it.
        // During a request's body the error reaches the route reading that body, which answers.
        if error is HTTPParserError, state.phase == .idle || state.phase == .readingHead {
            logger.debug("malformed request", metadata: ["error": "\(error)"])
            refuse(
                context: context, status: .badRequest,
                error: .badRequest("the request is not valid HTTP/1.1 (\(error)); check the request line, header block and Content-Length"))
            return
        }
        context.fireErrorCaught(error)
    }

    private func enter(_ phase: ConnectionState.Phase, context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        state.phase = phase
        let timeout: TimeAmount? =
            switch phase {
            case .idle: limits.idleTimeout
            case .readingHead: limits.requestHeaderTimeout
            case .readingBody: limits.requestBodyTimeout
            case .responding, .passive: nil
            }
        guard let timeout else { return }
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: timeout) {
            let (handler, context) = loopBound.value
            handler.timedOut(in: phase, context: context)
        }
    }

    private func timedOut(in phase: ConnectionState.Phase, context: ChannelHandlerContext) {
        guard state.phase == phase else { return }
        switch phase {
        case .readingHead:
            refuse(
                context: context, status: .requestTimeout,
                error: .badRequest("the request's header block did not arrive within \(Limits.requestHeaderSeconds.name)"))
        case .idle, .readingBody:
            // Idle: nothing to answer. Body: a route may be answering already; two answers
            // would garble the stream, so the connection just closes.
            state.phase = .passive
            context.close(promise: nil)
        case .responding, .passive:
            break
        }
    }

    /// Answers with an error and closes: used only when no response is being written.
    private func refuse(context: ChannelHandlerContext, status: HTTPResponseStatus, error: CloudKitError) {
        enter(.passive, context: context)
        let body = EdgeResponse.body(error)
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/json; charset=utf-8")
        headers.add(name: "Content-Length", value: String(body.count))
        headers.add(name: "Connection", value: "close")
        headers.add(name: "Access-Control-Allow-Origin", value: "*")
        var buffer = context.channel.allocator.buffer(capacity: body.count)
        buffer.writeBytes(body)
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(buffer))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in context.close(promise: nil) }
    }
}

/// Error answers written below the router (no request context, so a fresh request UUID).
enum EdgeResponse {
    static func body(_ error: CloudKitError) -> [UInt8] {
        error.json(uuid: UUIDText.random()).serialized()
    }

    /// A whole HTTP/1.1 response as bytes, for a connection that has no HTTP pipeline yet.
    static func raw(status: HTTPResponseStatus, error: CloudKitError) -> [UInt8] {
        let body = body(error)
        let head =
            "HTTP/1.1 \(status.code) \(status.reasonPhrase)\r\nContent-Type: application/json; charset=utf-8\r\n"
            + "Content-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        return Array(head.utf8) + body
    }
}
