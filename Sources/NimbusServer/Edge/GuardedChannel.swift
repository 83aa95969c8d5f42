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
    /// An asset upload's body (docs/assets.md): as long as bytes keep coming within
    /// `requestBodyTimeout` of each other, it may take this long in all.
    public var assetUploadTimeout: TimeAmount = .seconds(Int64(Limits.assetUploadSeconds.value))
    /// 0: no cap (load tests that open thousands of WebSockets from one address).
    public var connectionsPerClient: Int = Limits.connectionsPerClient.value
    /// How often each connection compares its deadline: a limit is enforced within this much
    /// of running out.
    public var checkInterval: TimeAmount = .milliseconds(250)

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
            let refusal = EdgeResponse.raw(status: .tooManyRequests, error: error)
            // The pipeline is built as usual (the server expects its value), but the first
            // handler answers and closes as soon as the connection is active.
            return inner.setup(channel: channel, logger: logger).flatMapThrowing { value in
                try channel.pipeline.syncOperations.addHandler(RefusingHandler(refusal: refusal), position: .first)
                return value
            }
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
        // This logger only reports how the upgrade negotiation ended, at `error` when the guard
        // closed a connection it had refused (a malformed request would be logged twice, and a
        // client could fill the log at will). Refusals are logged by the guard itself; requests
        // by the access log.
        var quiet = logger
        quiet.logLevel = .critical
        await inner.handle(value: value, logger: quiet)
    }

}

/// Answers a connection the server will not serve, then closes it.
final class RefusingHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    let refusal: [UInt8]
    private var answered = false

    init(refusal: [UInt8]) { self.refusal = refusal }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { answer(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        answer(context)
        context.fireChannelActive()
    }

    /// Whatever the client sends is not read.
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}

    private func answer(_ context: ChannelHandlerContext) {
        guard !answered else { return }
        answered = true
        writeRawAndClose(refusal, context: context)
    }
}

/// Writes bytes to the socket as they are, then closes the connection. `context` must be the
/// front of the pipeline, below the HTTP encoder.
private func writeRawAndClose(_ bytes: [UInt8], context: ChannelHandlerContext) {
    var buffer = context.channel.allocator.buffer(capacity: bytes.count)
    buffer.writeBytes(bytes)
    context.writeAndFlush(NIOAny(buffer)).whenComplete { _ in context.close(promise: nil) }
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
        /// No request in progress: the idle limit runs.
        case idle
        /// Bytes of a request arrived, its header block is not complete: the header limit runs.
        case readingHead
        /// The head arrived, the body has not ended: the body limit runs.
        case readingBody
        /// The request is read; the server is answering it. No limit.
        case responding
        /// A WebSocket, or a connection being closed: nothing more to guard.
        case passive
    }

    var phase = Phase.idle
    /// When the current phase runs out (`.distantFuture` for phases without a limit). Phases
    /// only move this; one check per connection every `EdgeLimits.checkInterval` compares it,
    /// since a timer scheduled and cancelled per phase was measurable on small requests.
    var deadline = NIODeadline.distantFuture
    /// For an asset upload's body: when it must have ended, however steadily it arrives.
    var uploadDeadline: NIODeadline?
    /// Set by the request guard, so raw bytes arriving on an idle connection start the header limit.
    var startHeaderLimit: (() -> Void)?
    /// Set by the front handler: writes bytes to the socket as they are, then closes. Refusals
    /// go this way, below the HTTP encoder, which would drop the body of an answer to HEAD or
    /// CONNECT.
    var writeAndClose: (([UInt8]) -> Void)?
    /// Set by the front handler: writes bytes to the socket as they are (the interim
    /// `100 Continue`).
    var writeRaw: (([UInt8]) -> Void)?
    /// Why the notification stream refused this connection's WebSocket upgrade
    /// (`GuardedChannel.noteRefusedUpgrade`): Hummingbird answers a refused upgrade with an
    /// empty 400, which the guard replaces with this error's JSON.
    var refusedUpgrade: CloudKitError?
}

/// At the front of the pipeline: notices a request's first bytes on an idle connection, and
/// writes refusals to the socket.
final class ByteArrivalHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let state: ConnectionState
    init(state: ConnectionState) { self.state = state }

    func handlerAdded(context: ChannelHandlerContext) {
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        state.writeAndClose = { bytes in writeRawAndClose(bytes, context: loopBound.value) }
        state.writeRaw = { bytes in
            let context = loopBound.value
            var buffer = context.channel.allocator.buffer(capacity: bytes.count)
            buffer.writeBytes(bytes)
            context.writeAndFlush(NIOAny(buffer), promise: nil)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        state.writeAndClose = nil
        state.writeRaw = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if state.phase == .idle { state.startHeaderLimit?() }
        context.fireChannelRead(data)
    }
}

/// Just after the HTTP decoder: keeps each phase's deadline and answers what the decoder cannot parse.
final class RequestGuardHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    
    let state: ConnectionState
    let limits: EdgeLimits
    let isStreamPath: @Sendable (String) -> Bool
    let logger: Logger
    private var check: RepeatedTask?

    /// Records why the notification stream refuses `channel`'s WebSocket upgrade, so the answer
    /// carries CloudKit's error JSON rather than the framework's empty 400. Call before refusing.
    static func noteRefusedUpgrade(_ error: CloudKitError, on channel: any Channel) async {
        try? await channel.eventLoop.submit {
            try channel.pipeline.syncOperations.handler(type: RequestGuardHandler.self).state.refusedUpgrade = error
        }.get()
    }

    init(state: ConnectionState, limits: EdgeLimits, isStreamPath: @escaping @Sendable (String) -> Bool, logger: Logger) {
        self.state = state
        self.limits = limits
        self.isStreamPath = isStreamPath
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        state.startHeaderLimit = {
            let (handler, context) = loopBound.value
            handler.enter(.readingHead, context: context)
        }
        enter(.idle, context: context)
        check = context.eventLoop.scheduleRepeatedTask(initialDelay: limits.checkInterval, delay: limits.checkInterval) { _ in
            let (handler, context) = loopBound.value
            handler.checkDeadline(context: context)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        check?.cancel()
        check = nil
        state.startHeaderLimit = nil
    }

    static let assetUploadPrefix = "/assets/1/upload/"
    static let continueLine = Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard state.phase != .passive else { return context.fireChannelRead(data) }
        switch unwrapInboundIn(data) {
        case .head(let head):
            if head.method == .CONNECT {
                // Nimbus is not a proxy; and after CONNECT the parser treats what follows as a tunnel.
                refuse(
                    context: context, status: .methodNotAllowed,
                    error: .badRequest("method CONNECT is not supported; CloudKit endpoints take GET or POST"))
                return
            }
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
                if head.version == .http1_1, state.phase != .responding,
                    head.headers[canonicalForm: "expect"].contains(where: { $0.lowercased() == "100-continue" })
                {
                    // A client that asks waits for this before sending the body (curl does
                    // for bodies over 1 MiB: a second lost per upload without it). Not while
                    // an earlier pipelined answer is being written, which it would cut into;
                    // the client then sends the body after its own short wait.
                    state.writeRaw?(Self.continueLine)
                }
                enter(.readingBody, context: context)
                state.uploadDeadline =
                    head.uri.hasPrefix(Self.assetUploadPrefix) ? .now() + limits.assetUploadTimeout : nil
            }
        case .body:
            // An upload that keeps arriving keeps its connection, up to its own deadline.
            if state.phase == .readingBody, let end = state.uploadDeadline {
                state.deadline = min(.now() + limits.requestBodyTimeout, end)
            }
        case .end:
            if state.phase == .readingBody { enter(.responding, context: context) }
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if let refusal = state.refusedUpgrade {
            // The framework's empty answer to the refused upgrade (head, then end): none of it
            // reaches the encoder; ours goes out instead, and the connection closes after it.
            if case .head = unwrapOutboundIn(data) {
                writeRefusal(EdgeResponse.raw(status: .init(statusCode: refusal.code.httpStatus), error: refusal))
            }
            promise?.succeed(())
            return
        }
        guard state.phase == .responding, case .end = unwrapOutboundIn(data) else {
            return context.write(data, promise: promise)
        }
        context.write(data, promise: promise)
        if let error = pendingParseError {
            refuseMalformed(context: context, error: error)
        } else {
            enter(.idle, context: context)
        }
    }

    /// A parse error in bytes that arrived while the previous request was being answered
    /// (pipelined): answered once that answer is written.
    private var pendingParseError: HTTPParserError?

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A parse error while no request is being answered: nobody else will answer it.
        // During a request's body the error reaches the route reading that body, which answers.
        if let error = error as? HTTPParserError {
            switch state.phase {
            case .idle, .readingHead: return refuseMalformed(context: context, error: error)
            case .responding:
                pendingParseError = error
                return
            case .readingBody, .passive: break
            }
        }
        context.fireErrorCaught(error)
    }

    private func refuseMalformed(context: ChannelHandlerContext, error: HTTPParserError) {
        logger.debug("malformed request", metadata: ["error": "\(error)"])
        refuse(
            context: context, status: .badRequest,
            error: .badRequest("the request is not valid HTTP/1.1 (\(error)); check the request line, header block and Content-Length"))
    }

    private func enter(_ phase: ConnectionState.Phase, context: ChannelHandlerContext) {
        state.phase = phase
        let limit: TimeAmount? =
            switch phase {
            case .idle: limits.idleTimeout
            case .readingHead: limits.requestHeaderTimeout
            case .readingBody: limits.requestBodyTimeout
            case .responding, .passive: nil
            }
        state.deadline = limit.map { .now() + $0 } ?? .distantFuture
        if phase == .passive {
            check?.cancel()
            check = nil
        }
    }

    /// Ends the connection whose current phase ran past its deadline.
    private func checkDeadline(context: ChannelHandlerContext) {
        guard state.deadline < .now() else { return }
        switch state.phase {
        case .readingHead:
            refuse(
                context: context, status: .requestTimeout,
                error: .badRequest("the request's header block did not arrive within \(Limits.requestHeaderSeconds.name)"))
        case .idle, .readingBody:
            // Idle: nothing to answer. Body: a route may be answering already; two answers
            // would garble the stream, so the connection just closes.
            enter(.passive, context: context)
            context.close(promise: nil)
        case .responding, .passive:
            break
        }
    }

    /// Answers with an error and closes: used only when no response is being written.
    private func refuse(context: ChannelHandlerContext, status: HTTPResponseStatus, error: CloudKitError) {
        enter(.passive, context: context)
        guard state.writeAndClose != nil else { return context.close(promise: nil) }
        writeRefusal(EdgeResponse.raw(status: status, error: error))
    }

    private func writeRefusal(_ bytes: [UInt8]) {
        state.writeAndClose?(bytes)
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
            + "Content-Length: \(body.count)\r\nConnection: close\r\nAccess-Control-Allow-Origin: *\r\n\r\n"
        return Array(head.utf8) + body
    }
}
