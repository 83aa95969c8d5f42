import Glibc
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1

/// Serves a connection's HTTP/1.1 requests from inside its pipeline: the last handler reads a
/// request's parts, starts one task that builds the answer through the router, and writes the
/// answer's parts straight to the channel.
///
/// Hummingbird serves a connection from one long-lived task that reads parts from
/// `NIOAsyncChannel`'s inbound sequence and writes through its `NIOAsyncWriter`. Profiles of a
/// fetch by ID (docs/benchmarks.md) put that bridge, its locks and the task's resumptions at a
/// sixth of the server's processor time. Here a request whose body arrives in full with its
/// head (any body up to `collectedBodyBytes`, which is nearly every CloudKit call) reaches the
/// route as one buffer, and an answer held in one buffer goes out as head, body and end with one
/// flush, with no suspension when the task runs on the connection's own event loop.
///
/// A longer body streams to the route with backpressure (the socket is not read while the
/// route has not asked for more), and an answer written piece by piece is written as it comes,
/// waiting while the channel is not writable. Requests pipelined behind the one being answered
/// are held until its answer is out: parts decoded from the same reads here, later bytes at the
/// front of the pipeline (`ByteArrivalHandler`).
final class ExchangeHandler: ChannelDuplexHandler, RemovableChannelHandler {
    // NIO's own HTTP/1 parts: a request's head becomes HTTPTypes' (`OriginFormCodec.request`)
    // here, and an answer's head NIO's as it is written, instead of in two handlers of their
    // own between this one and the decoder (each part passed through both, both ways).
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    /// Builds the answer to one request; never throws (errors are answers by then).
    typealias Respond = @Sendable (Request, any Channel) async -> Response

    /// A body up to this many bytes is gathered before its route runs, and read as one buffer.
    static let collectedBodyBytes = 16 * 1_024

    private enum Input {
        /// Between requests.
        case awaitingHead
        /// The head arrived; the body is gathered until it ends or passes `collectedBodyBytes`.
        case collecting(HTTPRequest, ByteBuffer?)
        /// The body flows to the route's task.
        case streaming(BodySource.Producer.Source)
        /// The request is read in full.
        case ended
        /// Answered before its body ended: the rest is read and thrown away.
        case discarding
    }

    private let respond: Respond
    private var input = Input.awaitingHead
    /// A request's answer is being built or written.
    private var responding = false
    /// Parts that arrived behind the request being answered (pipelined), in order.
    private var held = CircularBuffer<HTTPServerRequestPart>()
    /// The pipeline asked to read while input was not wanted.
    private var readPending = false
    /// The route's body sequence asked the socket to stop.
    private var bodyFull = false
    /// How many bodies this connection has streamed: the number of the current or last one.
    private var bodiesStreamed = 0
    /// The client ended its side (half closure): close once the current answer is out.
    private var closeWhenAnswered = false
    /// The server is shutting down gracefully (`ChannelShouldQuiesceEvent`): close once every
    /// request read is answered.
    private var quiescing = false
    private var context: ChannelHandlerContext?
    private var writabilityWaiters: [EventLoopPromise<Void>] = []
    /// Where a request alone on this connection's loop runs straight through.
    private let executor: LoopTaskExecutor

    /// `loop`: the connection's event loop.
    init(loop: any EventLoop, respond: @escaping Respond) {
        self.respond = respond
        executor = LoopTaskExecutor.of(loop)
    }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        failWaiters(ChannelError.ioOnClosedChannel)
    }

    // MARK: Reading requests

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        if holdsParts {
            held.append(part)
        } else {
            take(part, context: context)
        }
    }

    /// Close once the answers owed are out: the client ended its side, or the server is
    /// shutting down.
    private var closesOnceAnswered: Bool { closeWhenAnswered || quiescing }

    /// No request is being read: none begun, or the one being read was answered already.
    private var isBetweenRequests: Bool {
        switch input {
        case .awaitingHead, .discarding: return true
        case .collecting, .streaming, .ended: return false
        }
    }

    /// Parts behind the request being answered (pipelined) wait until its answer is out.
    private var holdsParts: Bool {
        switch input {
        case .ended: return true
        case .awaitingHead: return responding
        case .collecting, .streaming, .discarding: return false
        }
    }

    private func take(_ part: HTTPServerRequestPart, context: ChannelHandlerContext) {
        switch (input, part) {
        case (.awaitingHead, .head(let head)):
            do {
                input = .collecting(try OriginFormCodec.request(head), nil)
            } catch {
                fail(error, context: context)
            }
        case (.collecting(let head, var gathered), .body(let bytes)):
            if gathered == nil { gathered = bytes } else { gathered!.writeImmutableBuffer(bytes) }
            if gathered!.readableBytes > Self.collectedBodyBytes {
                startStreaming(head, gathered: gathered!, context: context)
            } else {
                input = .collecting(head, gathered)
            }
        case (.collecting(let head, let gathered), .end):
            input = .ended
            start(Request(head: head, body: RequestBody(buffer: gathered ?? ByteBuffer())), context: context)
        case (.streaming(let source), .body(let bytes)):
            if case .stopProducing = source.yield(bytes) { bodyFull = true }
        case (.streaming(let source), .end):
            source.finish()
            input = .ended
        case (.discarding, .body):
            break
        case (.discarding, .end):
            input = responding ? .ended : .awaitingHead
        default:
            // A part out of order: the decoder let through what HTTP/1.1 does not allow.
            fail(HTTPParserError.invalidInternalState, context: context)
        }
    }

    private func startStreaming(_ head: HTTPRequest, gathered: ByteBuffer?, context: ChannelHandlerContext) {
        bodiesStreamed += 1
        let body = BodySource.make(
            loop: context.eventLoop, handler: NIOLoopBound(self, eventLoop: context.eventLoop), number: bodiesStreamed)
        input = .streaming(body.source)
        if let gathered, case .stopProducing = body.source.yield(gathered) { bodyFull = true }
        start(Request(head: head, body: RequestBody(asyncSequence: body.sequence)), context: context)
    }

    /// Called on the loop when body `number`'s sequence wants more. The calls come through the
    /// loop's queue: one may arrive after its request is answered and the next one's body
    /// streams, and is then not that body's to act on.
    fileprivate func bodyWantsMore(_ number: Int) {
        guard number == bodiesStreamed else { return }
        bodyFull = false
        readIfPending()
    }

    /// Called on the loop when the route stopped reading body `number`, or read it to its end.
    fileprivate func bodyAbandoned(_ number: Int) {
        guard number == bodiesStreamed else { return }
        bodyFull = false
        if case .streaming(let source) = input {
            source.finish()
            input = .discarding
        }
        readIfPending()
    }

    /// A body that did not arrive with its head, in the same reads, streams from here: the
    /// route runs now, and may answer before the rest arrives (a refusal does not wait for a
    /// body the client is still sending, or holding back until it hears one).
    func channelReadComplete(context: ChannelHandlerContext) {
        if case .collecting(let head, let gathered) = input {
            startStreaming(head, gathered: gathered, context: context)
        }
        context.fireChannelReadComplete()
    }

    func read(context: ChannelHandlerContext) {
        if wantsInput {
            context.read()
        } else {
            readPending = true
        }
    }

    /// Whether the socket is read now: always, but while a streamed body's route has not asked
    /// for more. Bytes that arrive while a request is answered wait at the front of the
    /// pipeline (`ByteArrivalHandler`), which stops reading past its own bound.
    private var wantsInput: Bool {
        if case .streaming = input { return !bodyFull }
        return true
    }

    private func readIfPending() {
        guard readPending, wantsInput, let context else { return }
        readPending = false
        context.read()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent {
            // Closed now when no request is being read or answered (the rest of a body already
            // answered is not waited for), else once they all are.
            if !responding, held.isEmpty, isBetweenRequests {
                context.close(promise: nil)
            } else {
                quiescing = true
            }
            return
        }
        guard let event = event as? ChannelEvent, event == .inputClosed else {
            return context.fireUserInboundEventTriggered(event)
        }
        switch input {
        case .awaitingHead where !responding && held.isEmpty:
            context.close(promise: nil)
        case .collecting, .streaming:
            // The client stopped sending in the middle of a body.
            fail(HTTPParserError.invalidEOFState, context: context)
        default:
            closeWhenAnswered = true
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fail(error, context: context)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if case .streaming(let source) = input { source.finish(ChannelError.eof) }
        input = .discarding
        held.removeAll()
        failWaiters(ChannelError.ioOnClosedChannel)
        context.fireChannelInactive()
    }

    /// An error in the request's bytes reaches the route reading its body (which answers it,
    /// 413 for a body past its bound); with no body being read, the connection closes.
    private func fail(_ error: any Error, context: ChannelHandlerContext) {
        switch input {
        case .collecting(let head, let gathered):
            startStreaming(head, gathered: gathered, context: context)
            fail(error, context: context)
        case .streaming(let source):
            source.finish(error)
            input = .discarding
        case .awaitingHead, .ended, .discarding:
            context.close(promise: nil)
        }
    }

    // MARK: Answering

    private func start(_ request: Request, context: ChannelHandlerContext) {
        responding = true
        let respond = self.respond
        let channel = context.channel
        let writer = AnswerWriter(handler: NIOLoopBound(self, eventLoop: context.eventLoop), channel: channel)
        let closes = request.headers[.connection]?.lowercased() == "close"
        let executor = self.executor
        executor.requestRead()
        Task {
            await executor.answer {
                let response = await respond(request, channel)
                do {
                    try await writer.send(response, closing: closes)
                } catch {
                    // The body failed, or the client left, part way: no more answers on this connection.
                    writer.abandon()
                }
            }
        }
    }

    fileprivate func writeHead(_ head: HTTPResponse) {
        context?.write(wrapOutboundOut(.head(HTTPResponseHead(head))), promise: nil)
    }

    fileprivate func writeBody(_ bytes: ByteBuffer) {
        context?.write(wrapOutboundOut(.body(.byteBuffer(bytes))), promise: nil)
    }

    fileprivate func flushAnswer() {
        context?.flush()
    }

    /// Nil when the channel takes more now; else a future that completes when it does.
    fileprivate func writable() -> EventLoopFuture<Void>? {
        guard let context else { return nil }
        if !context.channel.isActive { return context.eventLoop.makeFailedFuture(ChannelError.ioOnClosedChannel) }
        if context.channel.isWritable { return nil }
        let promise = context.eventLoop.makePromise(of: Void.self)
        writabilityWaiters.append(promise)
        return promise.futureResult
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            let waiters = writabilityWaiters
            writabilityWaiters = []
            for waiter in waiters { waiter.succeed(()) }
        }
        context.fireChannelWritabilityChanged()
    }

    private func failWaiters(_ error: any Error) {
        let waiters = writabilityWaiters
        writabilityWaiters = []
        for waiter in waiters { waiter.fail(error) }
    }

    /// The answer's end: written and flushed, then the next request, if one is held.
    fileprivate func finishAnswer(trailers: HTTPFields?, closing: Bool) {
        guard let context else { return }
        // A client that ended its side is answered every request it sent first.
        if closing || (closesOnceAnswered && held.isEmpty) {
            // Closed once the answer is out, not before its last bytes are written.
            let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
            context.writeAndFlush(wrapOutboundOut(.end(trailers.map(HTTPHeaders.init)))).whenComplete { _ in loopBound.value.close(promise: nil) }
            responding = false
            return
        }
        context.writeAndFlush(wrapOutboundOut(.end(trailers.map(HTTPHeaders.init))), promise: nil)
        answered(context: context)
    }

    /// The answer could not be written in full: the connection cannot carry another.
    fileprivate func abandonAnswer() {
        guard let context else { return }
        responding = false
        context.close(promise: nil)
    }

    private func answered(context: ChannelHandlerContext) {
        responding = false
        switch input {
        case .streaming(let source):
            // Answered before the body ended: the rest is not for anyone.
            source.finish()
            input = .discarding
        case .ended:
            input = .awaitingHead
        case .collecting, .awaitingHead, .discarding:
            break
        }
        // Held parts go on as they would have arrived: the next request's, and its body's while
        // it streams, until a part lands behind an answer again.
        while !holdsParts, let part = held.popFirst() {
            take(part, context: context)
        }
        // The reads that brought the held parts are over: a body begun in them streams from here,
        // as after any read (`channelReadComplete`), and cannot end if the client ended its side.
        if case .collecting(let head, let gathered) = input {
            startStreaming(head, gathered: gathered, context: context)
            if closeWhenAnswered { fail(HTTPParserError.invalidEOFState, context: context) }
        }
        if !responding, closesOnceAnswered, case .awaitingHead = input {
            context.close(promise: nil)
            return
        }
        readIfPending()
    }
}

/// Writes one answer from the request's task to its connection: on the connection's loop at
/// once when the task runs there, else queued to it. A loop runs its queue in order, so what one
/// answer queues goes out in order, and the task does not wait for it.
private struct AnswerWriter: Sendable {
    let handler: NIOLoopBound<ExchangeHandler>
    let channel: any Channel

    func send(_ response: Response, closing: Bool) async throws {
        let pieces = PieceWriter(writer: self, head: response.head, closing: closing)
        do {
            try await response.body.write(pieces)
        } catch {
            // What the body wrote before it failed goes out; the connection then closes.
            pieces.flush()
            throw error
        }
        pieces.end(nil)
    }

    func abandon() {
        onLoop { $0.abandonAnswer() }
    }

    func onLoop(_ body: @escaping @Sendable (ExchangeHandler) -> Void) {
        let loop = channel.eventLoop
        if loop.inEventLoop {
            body(handler.value)
        } else {
            loop.execute { body(handler.value) }
        }
    }

    /// Returns once the channel takes more (at once, nearly always); throws once it closed, so
    /// a body streamed to a client that left stops being produced.
    func whenWritable() async throws {
        guard channel.isActive else { throw ChannelError.ioOnClosedChannel }
        guard !channel.isWritable else { return }
        let loop = channel.eventLoop
        try await loop.flatSubmit { [handler] in handler.value.writable() ?? loop.makeSucceededVoidFuture() }.get()
    }
}

/// The answer's body as the route writes it. The first piece is held: if the body ends after
/// it, head, body and end go out together with one flush; a second piece starts writing as
/// pieces come.
private final class PieceWriter: ResponseBodyWriter, @unchecked Sendable {
    // One answer's writer is used by its request's task alone, one call after another.
    private let writer: AnswerWriter
    private let head: HTTPResponse
    /// The connection closes after this answer: its request or the answer said `Connection: close`.
    private let closing: Bool
    private var first: ByteBuffer?
    private var headSent = false
    private var ended = false

    init(writer: AnswerWriter, head: HTTPResponse, closing: Bool) {
        self.writer = writer
        self.head = head
        self.closing = closing || head.headerFields[.connection]?.lowercased() == "close"
    }

    func write(_ buffer: ByteBuffer) async throws {
        guard headSent || first != nil else {
            first = buffer
            return
        }
        send(buffer, ending: false, trailers: nil)
        try await writer.whenWritable()
    }

    func finish(_ trailers: HTTPFields?) async throws {
        end(trailers)
    }

    /// The answer's end, once (a body may end itself, or leave it to the writer).
    func end(_ trailers: HTTPFields?) {
        guard !ended else { return }
        ended = true
        send(nil, ending: true, trailers: trailers)
    }

    /// The head and the held piece, if they are not out yet.
    func flush() {
        guard !ended else { return }
        send(nil, ending: false, trailers: nil)
    }

    private func send(_ buffer: ByteBuffer?, ending: Bool, trailers: HTTPFields?) {
        let held = first
        first = nil
        let sendHead = !headSent
        headSent = true
        let (head, closing) = (self.head, self.closing)
        writer.onLoop { handler in
            if sendHead { handler.writeHead(head) }
            if let held { handler.writeBody(held) }
            if let buffer { handler.writeBody(buffer) }
            if ending {
                handler.finishAnswer(trailers: trailers, closing: closing)
            } else {
                handler.flushAnswer()
            }
        }
    }
}

/// The route's side of a streamed request body, and the delegate that turns its demand into
/// socket reads.
private struct BodySource: NIOAsyncSequenceProducerDelegate {
    typealias Producer = NIOThrowingAsyncSequenceProducer<
        ByteBuffer, any Error, NIOAsyncSequenceProducerBackPressureStrategies.HighLowWatermark, BodySource
    >
    let loop: any EventLoop
    let handler: NIOLoopBound<ExchangeHandler>
    /// Which of the connection's streamed bodies this is.
    let number: Int

    static func make(loop: any EventLoop, handler: NIOLoopBound<ExchangeHandler>, number: Int) -> (source: Producer.Source, sequence: Producer) {
        let made = Producer.makeSequence(
            backPressureStrategy: .init(lowWatermark: 2, highWatermark: 8), finishOnDeinit: true,
            delegate: BodySource(loop: loop, handler: handler, number: number))
        return (made.source, made.sequence)
    }

    func produceMore() {
        loop.execute { handler.value.bodyWantsMore(number) }
    }

    func didTerminate() {
        loop.execute { handler.value.bodyAbandoned(number) }
    }
}

extension ExchangeHandler {
    /// Answers through the router as Hummingbird's application did: an error that no layer
    /// turned into an answer is an empty 500, and every answer says `Date` and `Server`.
    static func respond(through responder: some HTTPResponder<NimbusRequestContext>, logger: Logger) -> Respond {
        let dates = HTTPDateText()
        return { request, channel in
            let context = NimbusRequestContext(source: .init(channel: channel, logger: logger))
            var response: Response
            do {
                response = try await responder.respond(to: request, context: context)
            } catch {
                logger.debug("unanswered error", metadata: ["error": "\(error)"])
                response = Response(status: .internalServerError)
            }
            response.headers[.date] = dates.now()
            response.headers[.server] = "Nimbus"
            return response
        }
    }
}

/// The `Date` header's text (RFC 9110 5.6.7), formatted once a second.
final class HTTPDateText: Sendable {
    private let cached = NIOLockedValueBox<(second: Int, text: String)>((-1, ""))

    func now() -> String {
        let second = time(nil)
        return cached.withLockedValue { cached in
            if cached.second != second { cached = (second, Self.format(second)) }
            return cached.text
        }
    }

    static func format(_ second: Int) -> String {
        var seconds = time_t(second)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) "
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
    }
}
