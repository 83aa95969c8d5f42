import HTTPTypes
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import NIOWebSocket
import NimbusCore

/// The server's connections: HTTP/1.1 answered from the pipeline (`ExchangeHandler`, through
/// the router), and the notification stream's WebSocket upgrade as plain NIO, with no task
/// while a device listens.
///
/// Hummingbird's own WebSocket channel runs each stream in its connection's task for as long
/// as the device stays connected: an async reader, a task group and `NIOAsyncChannel`'s
/// bridge, whose suspended frames held 12 of the 26.7 KB an idle stream cost (heaptrack of
/// 3,000 idle devices; Swift's task allocator keeps a task's slabs until the task ends). Here
/// an upgraded connection is a pipeline: NIO's frame decoder and encoder and
/// `NotificationStreamHandler`, which answers pings and closes. The connection's task replays
/// the device's collection (`NotificationSocket.start`) and ends; live frames are written to
/// the channel by `LiveConnections`, and the connection unregisters itself when it closes.
struct NotificationStreamChannel: ServerChildChannel {
    enum Negotiated: Sendable {
        /// Upgraded and registered: the replay is still to run.
        case stream(NotificationSocket.Accepted, LiveConnections.Connection)
        /// Served by `ExchangeHandler`, in the pipeline.
        case http(any Channel)
        /// The stream refused the upgrade (`RequestGuardHandler` turns the empty 400 written
        /// here into CloudKit's error JSON).
        case refusedUpgrade(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>)
    }

    struct Value: ServerChildChannelValue {
        let negotiated: EventLoopFuture<Negotiated>
        let channel: any Channel
    }

    let respond: ExchangeHandler.Respond
    let service: NimbusService
    let connections: LiveConnections

    init(respond: @escaping ExchangeHandler.Respond, service: NimbusService, connections: LiveConnections) {
        // An upgrade can only open a connection: one asked for on a connection that already
        // served a request is sent to try again on a new one (307 to itself, then closed), as
        // Hummingbird's WebSocket channel does.
        self.respond = { request, channel in
            guard request.headers[.upgrade]?.lowercased() == "websocket" else {
                return await respond(request, channel)
            }
            let location = request.uri.query.map { "\(request.uri.path)?\($0)" } ?? request.uri.path
            return Response(status: .temporaryRedirect, headers: [.connection: "close", .location: location])
        }
        self.service = service
        self.connections = connections
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            let upgradeAsked = NIOLoopBoundBox(false, eventLoop: channel.eventLoop)
            let accepted = NIOLoopBoundBox<NotificationSocket.Accepted?>(nil, eventLoop: channel.eventLoop)
            let upgrader = NIOTypedWebSocketServerUpgrader<Negotiated>(
                maxFrameSize: NotificationSocket.maxFrameSize,
                shouldUpgrade: { [service] channel, head in
                    upgradeAsked.value = true
                    let decided = channel.eventLoop.makePromise(of: NotificationSocket.Accepted?.self)
                    decided.completeWithTask { await NotificationSocket.accept(uri: head.uri, channel: channel, service: service) }
                    return decided.futureResult.map { stream in
                        accepted.value = stream
                        return stream.map { _ in HTTPHeaders() }
                    }
                },
                upgradePipelineHandler: { [connections] channel, _ in
                    channel.eventLoop.makeCompletedFuture {
                        // The upgrader runs this only after `shouldUpgrade` accepted.
                        guard let stream = accepted.value else { throw ChannelError.inappropriateOperationForState }
                        let connection = connections.connect(owner: stream.owner, deviceID: stream.deviceID, channel: channel)
                        // The close future, not `channelInactive`: it completes also for a
                        // channel that closed before this ran.
                        channel.closeFuture.whenComplete { _ in connections.disconnect(owner: stream.owner, connection) }
                        try channel.pipeline.syncOperations.addHandler(NotificationStreamHandler())
                        return .stream(stream, connection)
                    }
                })
            let upgrades = NIOTypedHTTPServerUpgradeConfiguration<Negotiated>(
                upgraders: [upgrader],
                notUpgradingCompletionHandler: { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let operations = channel.pipeline.syncOperations
                        guard !upgradeAsked.value else {
                            try operations.addHandler(OriginFormCodec())
                            return .refusedUpgrade(
                                try NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>(
                                    wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true)))
                        }
                        try operations.addHandler(ExchangeHandler(loop: channel.eventLoop, respond: respond))
                        return .http(channel)
                    }
                })
            var pipeline = NIOUpgradableHTTPServerPipelineConfiguration(upgradeConfiguration: upgrades)
            pipeline.enablePipelining = false  // NIOAsyncChannel takes requests one at a time
            pipeline.enableErrorHandling = false  // the edge's guard answers malformed requests
            pipeline.enableResponseHeaderValidation = false  // HTTPTypes validated them
            let decoder = HTTP1Channel.Configuration().httpDecoder
            pipeline.decoderConfiguration.maxHeaderFieldSize = decoder.maxHeaderFieldSize
            pipeline.decoderConfiguration.maxHeaderListSize = decoder.maxHeaderListSize
            pipeline.decoderConfiguration.maxHeaderFieldCount = decoder.maxHeaderFieldCount
            let negotiated = try channel.pipeline.syncOperations.configureUpgradableHTTPServerPipeline(configuration: pipeline)
            return Value(negotiated: negotiated, channel: channel)
        }
    }

    func handle(value: Value, logger: Logger) async {
        do {
            switch try await value.negotiated.get() {
            case .http(let channel):
                // The pipeline serves the requests; this task only keeps the connection in
                // the server's count until it closes (a graceful shutdown waits for it).
                try await withTaskCancellationHandler {
                    try await channel.closeFuture.get()
                } onCancel: {
                    channel.close(promise: nil)
                }
            case .refusedUpgrade(let http):
                try await http.executeThenClose { _, outbound in
                    let head = HTTPResponse(status: .badRequest, headerFields: [.connection: "close", .contentLength: "0"])
                    try await outbound.write(contentsOf: [.head(head), .end(nil)])
                }
            case .stream(let accepted, let connection):
                await NotificationSocket.start(accepted, on: connection, service: service)
            }
        } catch {
            logger.trace("connection ended during negotiation", metadata: ["error": "\(error)"])
        }
    }
}

/// What an open notification stream reads. A device is expected to send nothing but pings,
/// pongs to the server's pings and its close; data frames are ignored.
final class NotificationStreamHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private var closing = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .ping:
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData)), promise: nil)
        case .connectionClose:
            // The device leaves: its close is answered with its status code (RFC 6455 5.5.1),
            // then the connection closes. A close answering the server's own closes at once.
            guard !closing else { return context.close(promise: nil) }
            closing = true
            var payload = frame.unmaskedData
            let code = payload.readSlice(length: 2) ?? ByteBuffer()
            let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: code))).whenComplete { _ in
                loopBound.value.close(promise: nil)
            }
        default:
            break
        }
    }

    /// The device's side ended without a close frame (the server's channels allow half
    /// closure, so NIO reports it rather than closing): nothing more can arrive, and the
    /// stream ends.
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, event == .inputClosed {
            context.close(promise: nil)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A protocol error (a frame too large, a bad opcode) is NIO's protocol error handler's:
        // it writes the close frame that says why and closes after it.
        guard !(error is NIOWebSocketError) else { return }
        context.close(promise: nil)
    }
}
