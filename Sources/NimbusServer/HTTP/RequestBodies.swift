import HTTPTypes
import Hummingbird
import NIOCore
import NIOHTTP1
import NimbusWire

/// How routes read a request's body: under its route's bound (`BodyLimits`), with its bytes
/// held in the node's `BodyBudget` until the request is answered. Every body a route reads
/// whole comes through here; uploads stream and are bounded by the asset service.
struct RequestBodies: Sendable {
    let limits: BodyLimits
    let budget: BodyBudget

    /// The whole body. `caller` keys the caller's share of the budget (`callerKey`); nil before
    /// authentication, when only the address's share and the node's apply.
    func collect(_ request: Request, context: NimbusRequestContext, caller: @autoclosure () -> String?) async throws
        -> ByteBuffer
    {
        let path = Substring(request.uri.path)
        let limit = limits.limit(forPath: path)
        let headers = request.headers
        let declared: Int? =
            if let length = headers.first(.contentLength) { Int(length) } else if headers.first(.transferEncoding) == nil { 0 } else { nil }
        if let declared, declared > limit.value {
            throw CloudKitError.bodyTooLarge(limit, actual: declared, what: "the request body's declared length in bytes")
        }
        // A body read before (a signed request's, put back for the handler) is held already.
        if declared == 0 || context.exchange.bodyReservation != nil { return try await Self.read(request, limit: limit) }
        // The caller's key is built only for a body that is reserved (most GETs have none).
        let reservation = try budget.reserve(declared ?? limit.value, client: context.clientAddress, caller: caller())
        context.exchange.bodyReservation = reservation
        let buffer = try await Self.read(request, limit: limit)
        reservation.shrink(to: buffer.readableBytes)
        return buffer
    }

    private static func read(_ request: Request, limit: Limit) async throws -> ByteBuffer {
        do {
            return try await request.body.collect(upTo: limit.value)
        } catch is NIOTooManyBytesError {
            throw CloudKitError.bodyTooLarge(limit, actual: limit.value + 1, what: "the request body in bytes (at least)")
        } catch let error as BodyOverLimit {
            throw error.cloudKitError
        } catch let error as HTTPParserError {
            throw CloudKitError.badRequest("the request body is not valid HTTP/1.1 framing (\(error)); check Content-Length or the chunk sizes")
        }
    }

    /// Whose share of the budget a request's body spends: the signed-in user, the
    /// server-to-server key, or the API token of a request without a user.
    static func callerKey(_ request: Request, context: NimbusRequestContext) -> String? {
        if let caller = context.caller {
            if let user = caller.user { return "user:\(user.id)" }
            if let key = caller.serverKey { return "key:\(key.keyID)" }
        }
        return request.query(WireKey.ckAPIToken).map { "token:\($0)" }
    }
}

/// A chunked body whose declared chunk sizes passed its route's bound (`ChunkedBodyScanner`):
/// raised into the body's stream at the edge, so the route reading it answers 413.
struct BodyOverLimit: Error {
    let limit: Limit
    let declared: UInt64

    var cloudKitError: CloudKitError {
        .bodyTooLarge(limit, actual: Int(clamping: declared), what: "the request body's declared chunk sizes in bytes")
    }
}

extension HTTPFields {
    /// The first value of `name`. HTTPFields' subscript joins every value of a name with commas
    /// through generic code it does not specialize: reading the one Content-Length that way was
    /// 0.6% of a fetch by ID (docs/benchmarks.md, "Query parameters read in place").
    func first(_ name: HTTPField.Name) -> String? {
        for field in self where field.name == name { return field.value }
        return nil
    }
}
