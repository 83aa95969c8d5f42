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
    /// Bytes of request bodies held at once: by the node, one client address, one caller
    /// (`BodyBudget`).
    public var bodyBytesInFlight = Limits.bodyBytesInFlight.value
    public var bodyBytesPerClient = Limits.bodyBytesPerClient.value
    public var bodyBytesPerCaller = Limits.bodyBytesPerCaller.value
    /// After an answer that came before its request's body ended (a refusal), this many bytes
    /// of the rest are read and thrown away, for at most `refusedBodyDrainTimeout`, so a
    /// client still sending hears the answer rather than a reset; then the connection closes.
    public var refusedBodyDrainBytes = Limits.refusedBodyDrainBytes.value
    public var refusedBodyDrainTimeout: TimeAmount = .seconds(Int64(Limits.refusedBodyDrainSeconds.value))
    /// How often each connection compares its deadline: a limit is enforced within this much
    /// of running out.
    public var checkInterval: TimeAmount = .milliseconds(250)

    public init() {}
}

/// Wraps the HTTP/1.1 + WebSocket child channel with the protections its pipeline lacks:
/// - a request that does not parse gets 400 with CloudKit's error JSON and the connection is
///   closed (before the first request is negotiated, Hummingbird's upgrade pipeline answered
///   nothing and held the socket for good);
/// - a body declared longer than its route takes (`Content-Length`, or chunk sizes as they
///   arrive) gets 413 at once, before its bytes are read;
/// - an answer given before its request's body ended closes the connection after draining a
///   bounded amount of the rest (`EdgeLimits.refusedBodyDrainBytes`), so the client hears it;
/// - an `Upgrade` to anything but a WebSocket (`h2c`, which curl and others try) is ignored:
///   the request is answered as HTTP/1.1;
/// - header, body and idle timeouts;
/// - a cap on concurrent connections per client address;
/// - a WebSocket upgrade on a path that is not a stream is refused with the error JSON.
struct GuardedChannel<Inner: ServerChildChannel>: ServerChildChannel {
    typealias Value = Inner.Value

    let inner: Inner
    let limits: EdgeLimits
    let bodyLimits: BodyLimits
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
            try operations.addHandler(ByteArrivalHandler(state: state, drainBytes: limits.refusedBodyDrainBytes), position: .first)
            let decoder = try operations.handler(type: ByteToMessageHandler<HTTPRequestDecoder>.self)
            try operations.addHandler(
                RequestGuardHandler(
                    state: state, limits: limits, bodyLimits: bodyLimits, isStreamPath: isStreamPath, logger: logger),
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

/// Writes bytes to the socket as they are. `context` must be the front of the pipeline, below
/// the HTTP encoder.
private func writeRaw(_ bytes: [UInt8], context: ChannelHandlerContext) -> EventLoopFuture<Void> {
    var buffer = context.channel.allocator.buffer(capacity: bytes.count)
    buffer.writeBytes(bytes)
    return context.writeAndFlush(NIOAny(buffer))
}

/// Writes bytes to the socket as they are, then closes the connection.
private func writeRawAndClose(_ bytes: [UInt8], context: ChannelHandlerContext) {
    writeRaw(bytes, context: context).whenComplete { _ in context.close(promise: nil) }
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
        /// Answered before its body ended (a refusal): what still arrives is read and thrown
        /// away, up to `EdgeLimits.refusedBodyDrainBytes` or the drain timeout; then it closes.
        case draining
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
    /// Set by the front handler: writes bytes to the socket as they are, then ends the
    /// connection's output (the phase is `.draining` by then). Refusals go this way, below the
    /// HTTP encoder, which would drop the body of an answer to HEAD or CONNECT.
    var writeAndEnd: (([UInt8]) -> Void)?
    /// Set by the front handler: writes bytes to the socket as they are (the interim
    /// `100 Continue`).
    var writeRaw: (([UInt8]) -> Void)?
    /// Why the notification stream refused this connection's WebSocket upgrade
    /// (`GuardedChannel.noteRefusedUpgrade`): Hummingbird answers a refused upgrade with an
    /// empty 400, which the guard replaces with this error's JSON.
    var refusedUpgrade: CloudKitError?
    /// The route answered before the request's body ended: the answer says `Connection:
    /// close`, and its end starts the drain.
    var answeredEarly = false
    /// A chunked request's bound, set by the guard when its head is parsed; the front handler
    /// starts `chunkScan` from the end of the head.
    var chunkedBodyLimit: Limit?
    /// The chunk sizes of the body arriving now, read before the decoder passes its bytes on.
    var chunkScan: (scanner: ChunkedBodyScanner, limit: Limit)?
    /// The body passed its bound while the route was reading it: what follows is thrown away.
    var discardingBody = false
    /// Bytes thrown away while draining.
    var drained = 0
    /// The connection's output is closed (the answer is out; the input drains).
    var outputEnded = false
    /// Requests read to their end whose answers have not ended: more than one when requests
    /// were pipelined. An answer belongs to the oldest of them; a head written while none is
    /// waiting answers the request still being read, early.
    var unanswered = 0
    /// Set by the front handler: delivers the bytes it held while requests were unanswered.
    /// Called by the guard when the last of them is answered.
    var releaseHeldBytes: (() -> Void)?
}

/// At the front of the pipeline: notices a request's first bytes on an idle connection, writes
/// refusals to the socket, and holds the bytes that arrive while a request is answered.
///
/// The socket is read on while a request is answered: stopping and resuming its reads cost two
/// `epoll_ctl` calls a request (health at 64 connections 1.14×, fetch 1.03× without them). What
/// arrives meanwhile (the next pipelined request, or a client's early bytes) waits here, out of
/// the decoder's sight, until the answer is out; past `heldBytesLimit` the socket is no longer
/// read, so a client cannot make the server hold more.
final class ByteArrivalHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let state: ConnectionState
    let drainBytes: Int
    private var headEnd = HeadTerminatorFinder()
    /// Bytes that arrived while a request was answered, in order.
    private var held: ByteBuffer?
    /// The client ended its side behind the held bytes: told after them.
    private var heldInputClosed = false
    /// The pipeline asked to read while `heldBytesLimit` was reached.
    private var readPending = false

    /// Held past this many bytes, the socket is not read until the answer is out.
    static let heldBytesLimit = 64 * 1_024

    init(state: ConnectionState, drainBytes: Int) {
        self.state = state
        self.drainBytes = drainBytes
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        state.writeAndEnd = { [weak state] bytes in
            writeRaw(bytes, context: loopBound.value).whenComplete { _ in
                if let state { endOutput(loopBound.value, state) }
            }
        }
        state.writeRaw = { bytes in _ = writeRaw(bytes, context: loopBound.value) }
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        state.releaseHeldBytes = {
            // From the guard's write of the last answer's end: delivered once that write is over, as
            // a read would be, not inside it.
            guard handler.value.held != nil || handler.value.heldInputClosed else { return }
            loopBound.value.eventLoop.execute { handler.value.deliverHeld(context: loopBound.value) }
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        state.writeAndEnd = nil
        state.writeRaw = nil
        state.releaseHeldBytes = nil
    }

    /// Bytes arriving now wait: a request read in full is not answered yet (even while the
    /// next one's body, pipelined behind it in the same read, is being read: that body waits
    /// here too, rather than piling up behind the answer in `ExchangeHandler`), or bytes that
    /// arrived meanwhile are still to be delivered ahead of them.
    private var holds: Bool {
        switch state.phase {
        case .idle, .readingHead, .readingBody, .responding: return state.unanswered > 0 || held != nil
        case .draining, .passive: return false
        }
    }

    private func deliverHeld(context: ChannelHandlerContext) {
        guard state.unanswered == 0 else { return }
        let bytes = held
        let inputClosed = heldInputClosed
        held = nil
        heldInputClosed = false
        if let bytes {
            channelRead(context: context, data: wrapInboundOut(bytes))
            context.fireChannelReadComplete()
        }
        if inputClosed { context.fireUserInboundEventTriggered(ChannelEvent.inputClosed) }
        if readPending {
            readPending = false
            context.read()
        }
    }

    func read(context: ChannelHandlerContext) {
        if let held, held.readableBytes >= Self.heldBytesLimit {
            readPending = true
        } else {
            context.read()
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if held != nil, let event = event as? ChannelEvent, event == .inputClosed {
            heldInputClosed = true
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if holds {
            let bytes = unwrapInboundIn(data)
            if held == nil { held = bytes } else { held!.writeImmutableBuffer(bytes) }
            return
        }
        switch state.phase {
        case .draining:
            state.drained += unwrapInboundIn(data).readableBytes
            if state.drained > drainBytes { context.close(promise: nil) }
            return
        case .passive:
            return context.fireChannelRead(data)
        case .idle:
            headEnd.reset()
            state.startHeaderLimit?()
        case .readingHead, .readingBody, .responding:
            break
        }
        if state.discardingBody { return }
        let buffer = unwrapInboundIn(data)
        if state.chunkScan != nil {
            // Sizes first: bytes past the bound never reach the decoder.
            guard scanChunks(buffer, from: 0, context: context) else { return }
            return context.fireChannelRead(data)
        }
        guard state.phase == .readingHead, let (bodyStart, mayBeChunked) = buffer.withUnsafeReadableBytes({ headEnd.find(in: $0) }),
            mayBeChunked
        else {
            context.fireChannelRead(data)
            state.chunkedBodyLimit = nil
            return
        }
        // A head that may announce a chunked body ends in these bytes: the decoder gets it
        // first, so that what follows is scanned before the decoder reads it if it does. (A
        // head that arrived behind another request's bytes, pipelined, is not scanned; the
        // route's bound on bytes read still holds it.)
        var rest = buffer
        let head = rest.readSlice(length: bodyStart)!
        context.fireChannelRead(wrapInboundOut(head))
        if let limit = state.chunkedBodyLimit {
            state.chunkedBodyLimit = nil
            state.chunkScan = (ChunkedBodyScanner(limit: limit.value), limit)
            guard scanChunks(rest, from: 0, context: context) else { return }
        }
        guard rest.readableBytes > 0, state.phase != .draining else { return }
        context.fireChannelRead(wrapInboundOut(rest))
    }

    /// Reads chunk sizes in `buffer` from `offset`; false when the body passed its bound, which
    /// is then raised into the body's stream (the route reading it answers 413) and the rest
    /// of the body is thrown away.
    private func scanChunks(_ buffer: ByteBuffer, from offset: Int, context: ChannelHandlerContext) -> Bool {
        guard var scan = state.chunkScan else { return true }
        let outcome = buffer.withUnsafeReadableBytes { bytes in
            scan.scanner.scan(UnsafeRawBufferPointer(rebasing: bytes[min(offset, bytes.count)...]))
        }
        switch outcome {
        case .reading:
            state.chunkScan = scan
            return true
        case .finished, .unreadable:
            state.chunkScan = nil
            return true
        case .overLimit(let declared):
            state.chunkScan = nil
            state.discardingBody = true
            context.fireErrorCaught(BodyOverLimit(limit: scan.limit, declared: declared))
            return false
        }
    }
}

/// Ends the connection's output once what was written is sent (the client reads the answer,
/// then end of stream); its input is drained until the client closes or the drain runs out.
private func endOutput(_ context: ChannelHandlerContext, _ state: ConnectionState) {
    guard !state.outputEnded else { return }
    state.outputEnded = true
    context.close(mode: .output).whenFailure { _ in context.close(promise: nil) }
}

/// Just after the HTTP decoder: keeps each phase's deadline and answers what the decoder cannot parse.
final class RequestGuardHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    let state: ConnectionState
    let limits: EdgeLimits
    let bodyLimits: BodyLimits
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

    init(
        state: ConnectionState, limits: EdgeLimits, bodyLimits: BodyLimits, isStreamPath: @escaping @Sendable (String) -> Bool,
        logger: Logger
    ) {
        self.state = state
        self.limits = limits
        self.bodyLimits = bodyLimits
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
    }

    /// One check of the deadline per connection every `checkInterval`, while a phase has one.
    private func startChecking(context: ChannelHandlerContext) {
        guard check == nil else { return }
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
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

    static let continueLine = Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard state.phase != .passive else { return context.fireChannelRead(data) }
        // Refused: what the decoder still finds in bytes that came with the refused head is not
        // a request anyone answers.
        guard state.phase != .draining else { return }
        var data = data
        switch unwrapInboundIn(data) {
        case .head(var head):
            if head.method == .CONNECT {
                // Nimbus is not a proxy; and after CONNECT the parser treats what follows as a tunnel.
                refuse(
                    context: context, status: .methodNotAllowed,
                    error: .badRequest("method CONNECT is not supported; CloudKit endpoints take GET or POST"))
                return
            }
            // The target up to its query, found byte by byte: `split` built an array of
            // substrings for every request (1.2% of a fetch at one connection).
            let path = head.uri.utf8.firstIndex(of: UInt8(ascii: "?")).map { head.uri[..<$0] } ?? head.uri[...]
            let upgrades = head.headers[canonicalForm: "upgrade"]
            if upgrades.contains(where: { $0.lowercased() == "websocket" }) {
                guard isStreamPath(String(path)) else {
                    refuse(
                        context: context, status: .badRequest,
                        error: .badRequest("\(Names.escaped(String(path))) is not a WebSocket endpoint; the notification stream is /device/1/{container}/{environment}/notifications/connect"))
                    return
                }
                enter(.passive, context: context)
            } else {
                if !upgrades.isEmpty {
                    // A protocol this server does not speak (h2c): the request is answered as
                    // the HTTP/1.1 request it also is, as RFC 9110 lets a server do.
                    Self.removeUpgrade(from: &head.headers)
                    data = wrapInboundOut(.head(head))
                }
                let limit = bodyLimits.limit(forPath: path)
                if let length = head.headers["content-length"].first.flatMap({ Int($0) }), length > limit.value {
                    refuse(
                        context: context, status: .payloadTooLarge,
                        error: .bodyTooLarge(limit, actual: length, what: "the request body's declared length in bytes"))
                    return
                }
                if head.headers["transfer-encoding"].contains(where: { $0.lowercased().contains("chunked") }) {
                    state.chunkedBodyLimit = limit
                }
                if head.version == .http1_1, state.unanswered == 0,
                    head.headers[canonicalForm: "expect"].contains(where: { $0.lowercased() == "100-continue" })
                {
                    // A client that asks waits for this before sending the body (curl does
                    // for bodies over 1 MiB: a second lost per upload without it). Not while
                    // an earlier pipelined answer is being written, which it would cut into;
                    // the client then sends the body after its own short wait.
                    state.writeRaw?(Self.continueLine)
                }
                enter(.readingBody, context: context)
                state.uploadDeadline = BodyLimits.streams(path) ? .now() + limits.assetUploadTimeout : nil
            }
        case .body:
            // An upload that keeps arriving keeps its connection, up to its own deadline.
            if state.phase == .readingBody, let end = state.uploadDeadline {
                state.deadline = min(.now() + limits.requestBodyTimeout, end)
            }
        case .end:
            if state.phase == .readingBody {
                state.unanswered += 1
                enter(.responding, context: context)
            }
        }
        context.fireChannelRead(data)
    }

    /// A full close asked for while the rest of a refused body drains (the HTTP pipeline closes
    /// after an answer that says `Connection: close`): only the output is closed now, and the
    /// connection when the drain ends. Closing at once would meet the client's bytes still
    /// coming with a reset, and the client's kernel would discard the answer unread.
    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        guard state.phase == .draining, mode == .all else { return context.close(mode: mode, promise: promise) }
        endOutput(context, state)
        if let promise { context.channel.closeFuture.cascade(to: promise) }
    }

    /// Takes an `Upgrade` offer out of a request's headers, and the `Connection` options that
    /// belong to it.
    static func removeUpgrade(from headers: inout HTTPHeaders) {
        headers.remove(name: "upgrade")
        headers.remove(name: "http2-settings")
        let options = headers[canonicalForm: "connection"].filter {
            let option = $0.lowercased()
            return option != "upgrade" && option != "http2-settings"
        }
        headers.remove(name: "connection")
        if !options.isEmpty { headers.add(name: "connection", value: options.joined(separator: ", ")) }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if let refusal = state.refusedUpgrade {
            // The framework's empty answer to the refused upgrade (head, then end): none of it
            // reaches the encoder; ours goes out instead, and the connection closes after it.
            if case .head = unwrapOutboundIn(data) {
                writeRefusal(EdgeResponse.raw(status: .init(statusCode: refusal.httpStatus), error: refusal), context: context)
            }
            promise?.succeed(())
            return
        }
        // Only an HTTP answer is looked at: after a WebSocket upgrade, frames pass as bytes.
        guard state.phase == .readingBody || state.phase == .responding || state.answeredEarly else {
            return context.write(data, promise: promise)
        }
        switch unwrapOutboundIn(data) {
        case .head(var head) where state.phase == .readingBody && state.unanswered == 0:
            // An answer before the body ended (a refusal, an authentication failure): the
            // rest of the body is not waited for.
            state.answeredEarly = true
            head.headers.replaceOrAdd(name: "connection", value: "close")
            return context.write(wrapOutboundOut(.head(head)), promise: promise)
        case .end where state.answeredEarly:
            state.answeredEarly = false
            enter(.draining, context: context)
            let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
            let written = context.eventLoop.makePromise(of: Void.self)
            written.futureResult.whenComplete { [state] _ in endOutput(loopBound.value, state) }
            written.futureResult.cascade(to: promise)
            return context.write(data, promise: written)
        case .end where state.unanswered > 0:
            state.unanswered -= 1
        default:
            return context.write(data, promise: promise)
        }
        context.write(data, promise: promise)
        guard state.unanswered == 0 else { return }
        // The next request's body may be arriving (pipelined): its phase goes on.
        if state.phase == .responding {
            if let error = pendingParseError {
                refuseMalformed(context: context, error: error)
            } else {
                enter(.idle, context: context)
            }
        }
        state.releaseHeldBytes?()
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
            case .draining: return  // the rest of a refused request, thrown away
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
            case .draining: limits.refusedBodyDrainTimeout
            case .responding, .passive: nil
            }
        state.deadline = limit.map { .now() + $0 } ?? .distantFuture
        if phase == .passive {
            check?.cancel()
            check = nil
        } else {
            startChecking(context: context)
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
        case .idle, .readingBody, .draining:
            // Idle: nothing to answer. Body: a route may be answering already; two answers
            // would garble the stream, so the connection just closes. Draining: done.
            enter(.passive, context: context)
            context.close(promise: nil)
        case .responding, .passive:
            break
        }
    }

    /// Answers with an error, then drains and closes: used only when no response is being written.
    private func refuse(context: ChannelHandlerContext, status: HTTPResponseStatus, error: CloudKitError) {
        guard state.writeAndEnd != nil else {
            enter(.passive, context: context)
            return context.close(promise: nil)
        }
        writeRefusal(EdgeResponse.raw(status: status, error: error), context: context)
    }

    private func writeRefusal(_ bytes: [UInt8], context: ChannelHandlerContext) {
        enter(.draining, context: context)
        state.writeAndEnd?(bytes)
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
