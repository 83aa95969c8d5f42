import Hummingbird
import Logging
import NIOCore
import NimbusCore
import NimbusWire

/// One structured line per request (method, route, container, user, status, `serverErrorCode`,
/// duration) at `info`, with the request UUID the answer carries. Written by `EdgeMiddleware`
/// once the answer is built, errors included; the same facts go to the dashboard's `RequestLog`.
struct AccessLog: Sendable {
    let logger: Logger
    /// The dashboard's request log and per-minute figures; nil records nothing there.
    let requests: RequestLog?
    /// The figures `/metrics` serves; nil counts nothing.
    let metrics: ServerMetrics?
    let clock: any WallClock

    func record(_ request: Request, context: NimbusRequestContext, response: Response, since start: ContinuousClock.Instant) {
        let elapsed = ContinuousClock.now - start
        let facts = context.exchange.current
        let milliseconds = Double(elapsed.components.seconds) * 1_000 + Double(elapsed.components.attoseconds) / 1e15
        // A path no route serves is kept as the client sent it (bounded), not as the router's
        // "NotFound", so the log says what was asked for.
        let routed = context.endpointPath.flatMap { $0 == "NotFound" ? nil : $0 }
        let route = routed ?? request.uri.path
        let itemFailures = facts.itemFailureCodes
        // The route's template, never the client's own path: a monitor's label set stays bounded.
        metrics?.countRequest(
            route: context.endpointPath ?? "unrouted", status: Int(response.status.code), code: facts.serverErrorCode,
            itemFailures: itemFailures, duration: elapsed)
        // The dashboard's own files and API are the operators' traffic, not the apps'; a load
        // balancer's health probes are neither (and at its rate of probes the stored log would
        // be mostly them). Both still count in /metrics.
        if let requests, !route.hasPrefix("/dashboard"), !route.hasPrefix("/admin/"), route != HealthRoutes.path,
            route != DashboardRoutes.faviconPath
        {
            requests.record(
                RequestLog.Entry(
                    at: clock.nowMilliseconds(), requestUUID: facts.requestUUID, method: request.method.rawValue,
                    route: Self.bounded(route), container: facts.container.map(Self.bounded), environment: facts.environment,
                    database: context.exchange.scope?.rawValue, user: facts.userRecordName, userName: facts.userName,
                    status: Int(response.status.code), serverErrorCode: facts.serverErrorCode,
                    itemFailureCodes: itemFailures.map(\.description), milliseconds: milliseconds))
        }
        guard logger.logLevel <= .info else { return }
        var metadata: Logger.Metadata = [
            "uuid": "\(facts.requestUUID)",
            "method": "\(request.method.rawValue)",
            "route": "\(route)",
            "status": "\(response.status.code)",
            "ms": "\((milliseconds * 100).rounded() / 100)",
        ]
        if let container = facts.container { metadata["container"] = "\(container)" }
        if let user = facts.userRecordName { metadata["user"] = "\(user)" }
        if let code = facts.serverErrorCode { metadata["serverErrorCode"] = "\(code)" }
        if !itemFailures.isEmpty { metadata["itemErrors"] = "\(itemFailures.map(\.description).joined(separator: ","))" }
        if let client = context.clientAddress { metadata["client"] = "\(client)" }
        logger.info("request", metadata: metadata)
    }

    /// What the request log keeps of a string the client chose (an unrouted path, a container
    /// name): at most 200 bytes, so 10,000 entries stay a few megabytes whatever is sent.
    static func bounded(_ text: String) -> String {
        guard text.utf8.count > RequestLog.textBytes else { return text }
        var cut = text.utf8.index(text.utf8.startIndex, offsetBy: RequestLog.textBytes)
        // Cut between characters' scalars, never inside one's bytes.
        while cut.samePosition(in: text.unicodeScalars) == nil { text.utf8.formIndex(before: &cut) }
        return String(text.unicodeScalars[..<cut])
    }
}
