import Hummingbird
import Logging
import NimbusCore

/// The composition root of the HTTP API: the middleware, in the order a request meets it, and
/// every area's routes. A new area is a file in `Routes/` with its table, and one line here.
enum NimbusRouter {
    /// Hummingbird's router, and the responder that answers through it: endpoints found by
    /// their bytes (`RouteTable`), the rest by the router.
    static func make(parts: ServerParts, trustedProxies: Set<String>) -> (router: Router<NimbusRequestContext>, responder: RoutingResponder<NimbusRequestContext>) {
        let service = parts.service
        let methods = EndpointMethods()
        let router = MethodRecordingRouter(router: Router(context: NimbusRequestContext.self, options: .autoGenerateHeadEndpoints), methods: methods)
        // Middleware must be added before the routes it wraps (Hummingbird builds each route's
        // chain when the route is added). Outermost first:
        router.add(
            middleware: EdgeMiddleware(
                log: AccessLog(logger: parts.logger, requests: parts.requests, metrics: parts.metrics, clock: service.options.clock),  // log line, request log, metrics
                errors: ErrorMapping(logger: parts.logger, methods: methods),  // every error → CloudKit's error JSON
                forwarded: ForwardedHeaders(trustedProxies: trustedProxies),  // public base URL
                cors: CORSPolicy(service: service)))  // the API token's allowed origins; preflight

        router.add(HealthRoutes.routes, parts: parts)
        router.add(TestModeRoutes.routes, parts: parts)  // the clock and faults, in test mode only
        router.add(CourierRoutes.routes, parts: parts)
        AssetRoutes.addTransfers(to: router, parts: parts)  // the upload and download URLs
        ShareRoutes.addPage(to: router, parts: parts)  // the page at a share's URL
        AdminRoutes.add(to: router, parts: parts)  // the dashboard's admin API, operator sessions
        DashboardRoutes.add(to: router)  // the dashboard's page, style and script
        MetricsRoutes.addForOperators(to: router, parts: parts)  // /metrics, for signed-in operators

        // Authentication runs in each route of these groups before its handler (`Route.bind`).
        let apiToken = Authentication(service: service, credentials: .apiToken, bodies: parts.bodies)
        let session = Authentication(service: service, credentials: .session, bodies: parts.bodies)
        router.group("auth/1/:container/:environment").add(AuthRoutes.routes, parts: parts, authentication: apiToken)
        router.group("device/1/:container/:environment").add(DeviceRoutes.routes, parts: parts, authentication: session)
        router.group("database/1/:container/:environment").add(DeviceRoutes.tokenRoutes, parts: parts, authentication: session)

        let database = router.group("database/1/:container/:environment/:database")
        database.add(RecordRoutes.routes, parts: parts, authentication: session)
        database.add(ZoneRoutes.routes, parts: parts, authentication: session)
        database.add(ChangeRoutes.routes, parts: parts, authentication: session)
        database.add(SubscriptionRoutes.routes, parts: parts, authentication: session)
        database.add(UserRoutes.routes, parts: parts, authentication: session)
        database.add(AssetRoutes.routes, parts: parts, authentication: session)
        database.add(KeyRoutes.routes, parts: parts, authentication: session)
        database.add(DeviceRoutes.tokenRoutes, parts: parts, authentication: session)
        return (router.router, RoutingResponder(table: methods.routeTable, router: router.router.buildResponder()))
    }
}
