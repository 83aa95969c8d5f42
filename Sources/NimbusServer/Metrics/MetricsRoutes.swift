import Hummingbird
import Logging
import NIOCore
import NimbusCore
import ServiceLifecycle

/// Where `/metrics` is served (docs/operations.md, "Metrics"): on a listener of its own
/// (`--metrics-port`, for a monitor on a private network), and on the main port to operators
/// signed in to the dashboard, never to an app's clients.
enum MetricsRoutes {
    static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    static func addForOperators(to router: MethodRecordingRouter, parts: ServerParts) {
        guard let metrics = parts.metrics else { return }
        router.get("metrics") { request, context in
            let operatorContext = try await OperatorRoutes.signedIn(request, parts.service)
            try operatorContext.requireEveryContainer()
            return Reply.bytes(await metrics.scrape(), contentType: contentType, context: context)
        }
    }

    /// The listener behind `--metrics-port`: `GET /metrics` and nothing else, no credentials.
    static func listener(_ metrics: ServerMetrics, host: String, port: Int, logger: Logger) -> some Service {
        let router = Router()
        router.get("metrics") { _, _ -> Response in
            let text = await metrics.scrape()
            return Response(
                status: .ok, headers: [.contentType: contentType, .contentLength: String(text.count)],
                body: .init(byteBuffer: ByteBuffer(bytes: text)))
        }
        return Application(
            router: router, configuration: ApplicationConfiguration(address: .hostname(host, port: port), serverName: "Nimbus"),
            onServerRunning: { channel in metrics.metricsPort.store(channel.localAddress?.port ?? port, ordering: .relaxed) },
            logger: logger)
    }
}
