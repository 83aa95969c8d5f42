import Hummingbird
import Logging
import NIOCore
import NimbusWire

/// One structured line per request (method, route, container, user, status, `serverErrorCode`,
/// duration) at `info`, with the request UUID the answer carries. Written by `EdgeMiddleware`
/// once the answer is built, errors included.
struct AccessLog: Sendable {
    let logger: Logger

    var isEnabled: Bool { logger.logLevel <= .info }

    func record(_ request: Request, context: NimbusRequestContext, response: Response, since start: ContinuousClock.Instant) {
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
        if let client = context.clientAddress { metadata["client"] = "\(client)" }
        logger.info("request", metadata: metadata)
    }
}
