import NimbusWire
import Hummingbird
import Logging
import NIOCore

/// Outermost: one structured line per request (method, route, container, user, status,
/// `serverErrorCode`, duration) at `info`, with the request UUID the answer carries.
struct RequestLogMiddleware: RouterMiddleware {
    typealias Context = NimbusRequestContext
    let logger: Logger

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws
        -> Response
    {
        guard logger.logLevel <= .info else { return try await next(request, context) }
        let start = ContinuousClock.now
        // Inner layers answer every error (ErrorMiddleware), so nothing is thrown past here.
        let response = try await next(request, context)
        let elapsed = ContinuousClock.now - start
        let facts = context.exchange.current
        let milliseconds = Double(elapsed.components.seconds) * 1_000 + Double(elapsed.components.attoseconds) / 1e15
        var metadata: Logger.Metadata = [
            "uuid": "\(facts.requestUUID)",
            "method": "\(request.method.rawValue)",
            "route": "\(context.endpointPath ?? request.uri.path)",
            "status": "\(response.status.code)",
            "ms": "\((milliseconds * 100).rounded() / 100)",
        ]
        if let container = facts.container { metadata["container"] = "\(container)" }
        if let user = facts.userRecordName { metadata["user"] = "\(user)" }
        if let code = facts.serverErrorCode { metadata["serverErrorCode"] = "\(code)" }
        if let peer = context.peerAddress { metadata["client"] = "\(peer)" }
        logger.info("request", metadata: metadata)
        return response
    }
}
