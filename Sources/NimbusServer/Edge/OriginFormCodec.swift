import HTTPTypes
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1

/// NIO's HTTP/1 parts as HTTPTypes' and back, as `HTTP1ToHTTPServerCodec(secure: false)` does,
/// with the request target taken as it is when it is a path. `ExchangeHandler` converts with
/// `request(_:)` itself; this handler serves only the refusal of an upgrade the server does not
/// speak, answered through `NIOAsyncChannel` in HTTPTypes' parts.
///
/// The library's conversion parses every target with Foundation's `URLComponents`, to turn a
/// proxy's absolute form (`http://host/path`) into a path: 1.4% of a fetch by ID's processor
/// time at one connection (docs/benchmarks.md). A target that starts with `/` has no scheme,
/// and for it the library keeps the target unchanged, so it is kept here without the parse;
/// any other target still goes through the library's own conversion.
final class OriginFormCodec: ChannelDuplexHandler, RemovableChannelHandler, Sendable {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            do {
                context.fireChannelRead(wrapInboundOut(.head(try Self.request(head))))
            } catch {
                context.fireErrorCaught(error)
            }
        case .body(let body):
            context.fireChannelRead(wrapInboundOut(.body(body)))
        case .end(let trailers):
            context.fireChannelRead(wrapInboundOut(.end(trailers.map { HTTPFields($0, splitCookie: false) })))
        }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head(let response):
            context.write(wrapOutboundOut(.head(HTTPResponseHead(response))), promise: promise)
        case .body(let body):
            context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: promise)
        case .end(let trailers):
            context.write(wrapOutboundOut(.end(trailers.map(HTTPHeaders.init))), promise: promise)
        }
    }

    /// The request as `HTTPRequest(head, secure: false, splitCookie: false)` makes it.
    static func request(_ head: HTTPRequestHead) throws -> HTTPRequest {
        guard head.uri.utf8.first == UInt8(ascii: "/") else {
            return try HTTPRequest(head, secure: false, splitCookie: false)
        }
        return HTTPRequest(
            method: try HTTPRequest.Method(head.method), scheme: "http", authority: head.headers["Host"].first, path: head.uri,
            headerFields: HTTPFields(head.headers, splitCookie: false))
    }
}
