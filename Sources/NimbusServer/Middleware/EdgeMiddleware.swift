import HTTPTypes
import Hummingbird
import NimbusStorage
import Tracing

/// What every request meets first, in this order, as one middleware:
/// 1. the access log (`AccessLog`: the log line, and the dashboard's `RequestLog`), around everything;
/// 2. error mapping (`ErrorMapping`), around everything that follows: any thrown error becomes
///    CloudKit's error JSON;
/// 3. forwarded headers (`ForwardedHeaders`): this server's public base URL, from a trusted proxy;
/// 4. CORS (`CORSPolicy`): the API token's allowed origins, and the preflight.
///
/// They were four middleware; as one they cost a request one async frame and one context copy
/// instead of four, which was most of what the HTTP layer had added to a cached fetch
/// (docs/benchmarks.md). Each layer's rules stay in its own type.
struct EdgeMiddleware: RouterMiddleware {
    typealias Context = NimbusRequestContext
    let log: AccessLog
    let errors: ErrorMapping
    let forwarded: ForwardedHeaders
    let cors: CORSPolicy

    /// `@concurrent` as Hummingbird's requirement is (its module runs async functions off the
    /// caller's executor); everything it calls here runs on its executor without a hop.
    @concurrent func handle(_ request: Request, context: Context, next: @concurrent (Request, Context) async throws -> Response) async throws
        -> Response
    {
        guard Spans.areOn else { return await answer(request, context: context, next: next) }
        // A span for the request (`--otlp-endpoint`), keyed by the request UUID its client sees.
        let parent = Spans.context(from: request.headers, using: HeaderExtractor())
        return await Spans.run("HTTP \(request.method.rawValue)", kind: .server, context: parent) { span in
            let response = await answer(request, context: context, next: next)
            if let span {
                let facts = context.exchange.current
                if let route = context.endpointPath { span.operationName = "\(request.method.rawValue) \(route)" }
                span.attributes["http.request.method"] = request.method.rawValue
                span.attributes["http.route"] = context.endpointPath ?? "unrouted"
                span.attributes["http.response.status_code"] = Int(response.status.code)
                span.attributes["nimbus.request_uuid"] = facts.requestUUID
                if let container = facts.container { span.attributes["nimbus.container"] = container }
                if let code = facts.serverErrorCode {
                    span.attributes["cloudkit.server_error_code"] = code
                    if response.status.code >= 500 { span.setStatus(SpanStatus(code: .error, message: code)) }
                }
            }
            return response
        }
    }

    /// Inlined: without a span, a request pays no async frame more than before spans.
    @inline(__always)
    nonisolated(nonsending) private func answer(_ request: Request, context: Context, next: @concurrent (Request, Context) async throws -> Response) async -> Response {
        let start = ContinuousClock.now
        let response: Response
        do {
            try forwarded.read(request, context: context)
            if let preflight = try await cors.admit(request, context: context) {
                response = preflight
            } else {
                response = try await next(request, context)
            }
        } catch {
            response = errors.answer(error, to: request, context: context)
        }
        log.record(request, context: context, response: response, since: start)
        return response
    }
}

/// Reads trace headers (`traceparent`, `tracestate`) for the tracer's propagators.
struct HeaderExtractor: Extractor {
    func extract(key: String, from carrier: HTTPFields) -> String? {
        HTTPField.Name(key).flatMap { carrier[$0] }
    }
}
