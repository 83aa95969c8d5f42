import HTTPTypes
import Hummingbird
import NimbusCore
import NimbusWire

/// Cross-origin access from each API token's allowed origins (CloudKit's API token setting).
/// A request with an `Origin` header is granted `Access-Control-Allow-Origin` — `*` when the
/// token allows any origin, the origin itself when the token lists it — and refused with
/// `ACCESS_DENIED` when the token does not allow it. Endpoints without an API token (the
/// web-courier poll, `/health`) are open to any origin. `OPTIONS` answers the preflight.
/// Applied by `EdgeMiddleware`.
struct CORSPolicy: Sendable {
    typealias Context = NimbusRequestContext
    let service: NimbusService

    /// Notes the grant in the request's exchange; the preflight's answer for `OPTIONS`, nil for
    /// a request that goes on to its route.
    func admit(_ request: Request, context: Context) async throws -> Response? {
        if let origin = request.headers[.origin] {
            let apiToken = request.query(WireKey.ckAPIToken).flatMap { $0.isEmpty ? nil : $0 }
            let grant = try await grant(for: origin, apiToken: apiToken)
            context.exchange.update { $0.allowedOrigin = grant }
        } else if request.query(WireKey.ckAPIToken) == nil {
            // No token (the web courier, /health): open to any page, as before CORS had a say.
            context.exchange.update { $0.allowedOrigin = "*" }
        }
        guard request.method == .options else { return nil }
        var response = Reply.empty(status: .noContent, context: context)
        response.headers[.accessControlAllowMethods] = "GET, POST, OPTIONS"
        response.headers[.accessControlAllowHeaders] = "Content-Type, X-Nimbus-Device-ID"
        response.headers[.accessControlMaxAge] = "86400"
        return response
    }

    /// The `Access-Control-Allow-Origin` value for a page from `origin`.
    private func grant(for origin: String, apiToken: String?) async throws -> String {
        guard let apiToken else { return "*" }
        // An unknown token fails authentication later; the page may read that answer.
        guard let token = try await service.apiTokenRow(apiToken) else { return origin }
        if token.allowedOrigins.contains("*") { return "*" }
        guard token.allows(origin: origin) else {
            throw CloudKitError(
                .accessDenied,
                "the API token does not allow requests from \(Names.escaped(origin)); make a token for it with nimbus tokens create --allowed-origin \(Names.escaped(origin))")
        }
        return origin
    }
}
