import HTTPTypes
import Hummingbird
import NIOCore
import NimbusWire

/// Every answer the API writes is built here, so each carries the same headers: the request
/// UUID, the session token to echo, and the CORS grant `CORSPolicy` decided.
enum Reply {
    static let webAuthTokenHeader = HTTPField.Name("X-Apple-CloudKit-Web-Auth-Token")!
    static let requestUUIDHeader = HTTPField.Name("X-Apple-Request-UUID")!
    // The caller's budget (IETF's RateLimit header fields, docs/limits.md).
    static let rateLimitLimitHeader = HTTPField.Name("RateLimit-Limit")!
    static let rateLimitRemainingHeader = HTTPField.Name("RateLimit-Remaining")!
    static let rateLimitResetHeader = HTTPField.Name("RateLimit-Reset")!

    static let jsonContentType = "application/json; charset=utf-8"

    static func json(_ json: JSON, status: HTTPResponse.Status = .ok, context: NimbusRequestContext) -> Response {
        bytes(json.serialized(), contentType: jsonContentType, status: status, context: context)
    }

    /// One of the wire's bodies, written as it writes itself (a page of records straight to
    /// text, `StreamedWireBody`), copied once, from the writer into the answer's buffer.
    static func body<Body: WireBody>(_ body: Body, context: NimbusRequestContext) -> Response {
        var writer = JSONWriter()
        body.write(to: &writer)
        return writer.withUnsafeBytes { bytes($0, contentType: jsonContentType, context: context) }
    }

    static func bytes<Bytes: Collection<UInt8>>(
        _ bytes: Bytes, contentType: String, status: HTTPResponse.Status = .ok, context: NimbusRequestContext
    ) -> Response {
        var headers = headers(context)
        headers.append(HTTPField(name: .contentType, value: contentType))
        headers.append(HTTPField(name: .contentLength, value: String(bytes.count)))
        var buffer = ByteBufferAllocator().buffer(capacity: bytes.count)
        buffer.writeBytes(bytes)
        return Response(status: status, headers: headers, body: .init(byteBuffer: buffer))
    }

    static func empty(status: HTTPResponse.Status, context: NimbusRequestContext) -> Response {
        Response(status: status, headers: headers(context))
    }

    /// CloudKit's error JSON. After an authentication failure the session token is not echoed:
    /// it is not a valid session.
    static func error(_ error: CloudKitError, context: NimbusRequestContext, status: HTTPResponse.Status? = nil) -> Response {
        let exchange = context.exchange
        exchange.update { facts in
            facts.serverErrorCode = error.code.rawValue
            if error.code == .authenticationRequired || error.code == .authenticationFailed { facts.webAuthToken = nil }
        }
        let uuid = exchange.current.requestUUID
        var response = json(error.json(uuid: uuid), status: status ?? HTTPResponse.Status(code: error.httpStatus), context: context)
        // HTTP's own form of `retryAfter`, for clients and proxies that read no JSON.
        if let retryAfter = error.retryAfter { response.headers[.retryAfter] = String(retryAfter) }
        return response
    }

    /// The headers every answer carries (an answer not built here, a download, starts from them).
    ///
    /// Each name is new to the fields, so each is appended: the subscript's setter first looks
    /// for fields of the name to replace, through generic code that made these headers about 1%
    /// of a fetch by ID (docs/benchmarks.md, "Query parameters read in place").
    static func headers(_ context: NimbusRequestContext) -> HTTPFields {
        let facts = context.exchange.current
        var headers = HTTPFields()
        headers.reserveCapacity(10)  // these, and the content's type and length
        headers.append(HTTPField(name: requestUUIDHeader, value: facts.requestUUID))
        if let token = facts.webAuthToken { headers.append(HTTPField(name: webAuthTokenHeader, value: token)) }
        if let budget = facts.rateLimit {
            headers.append(HTTPField(name: rateLimitLimitHeader, value: String(budget.limit)))
            headers.append(HTTPField(name: rateLimitRemainingHeader, value: String(budget.remaining)))
            headers.append(HTTPField(name: rateLimitResetHeader, value: String(budget.resetSeconds)))
        }
        if let origin = facts.allowedOrigin {
            headers.append(HTTPField(name: .accessControlAllowOrigin, value: origin))
            headers.append(HTTPField(name: .accessControlExposeHeaders, value: exposedHeaders))
            if origin != "*" { headers.append(HTTPField(name: .vary, value: "Origin")) }
        }
        return headers
    }

    /// What a page from another origin may read of an answer.
    static let exposedHeaders =
        "X-Apple-CloudKit-Web-Auth-Token, X-Apple-Request-UUID, RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset, Retry-After"
}
