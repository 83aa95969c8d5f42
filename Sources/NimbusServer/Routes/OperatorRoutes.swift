import HTTPTypes
import Hummingbird
import NimbusCore
import NimbusWire

/// The admin API's route table (docs/dashboard.md): each route names what its operator needs,
/// and the operator is authenticated here, once, before any handler runs. A GET needs a signed-in
/// session (the `nimbus_operator` cookie); a POST is a change and must also echo the session's
/// CSRF token in `X-Nimbus-CSRF` (the cookie alone could be carried by another site's form).
/// Only signing in and the first run's setup are routed around it, on `unauthenticated`.
struct OperatorRoutes {
    static let csrfHeader = HTTPField.Name(ConsoleHeader.csrf)!

    /// `/admin/1/` without authentication: signing in and the first run's setup only.
    let unauthenticated: RouterGroup<NimbusRequestContext>
    let service: NimbusService

    /// What a route's operator must be allowed, beyond being signed in.
    enum Needs: Sendable {
        /// Nothing more: the service decides, given the operator (`as:`), or it is the
        /// operator's own business (their password, their session).
        case signedIn
        /// Sight of the path's `:container`.
        case sightOfContainer
        /// Changes to the path's `:container` (not a viewer, and the container is theirs).
        case changeOfContainer
        /// Every container (operators, backups: each spans them all); a POST also needs a role
        /// that may change things.
        case everyContainer
    }

    typealias Handler = @Sendable (Request, NimbusRequestContext, NimbusService.OperatorContext) async throws -> Response

    func get(_ path: RouterPath, needs: Needs = .signedIn, _ handler: @escaping Handler) {
        unauthenticated.get(path) { [service] request, context in
            let operatorContext = try await Self.signedIn(request, service)
            try Self.check(needs, operatorContext, context, changing: false)
            return try await handler(request, context, operatorContext)
        }
    }

    func post(_ path: RouterPath, needs: Needs = .signedIn, _ handler: @escaping Handler) {
        unauthenticated.post(path) { [service] request, context in
            let operatorContext = try await Self.changing(request, service)
            try Self.check(needs, operatorContext, context, changing: true)
            return try await handler(request, context, operatorContext)
        }
    }

    private static func check(
        _ needs: Needs, _ operatorContext: NimbusService.OperatorContext, _ context: NimbusRequestContext, changing: Bool
    ) throws {
        switch needs {
        case .signedIn: break
        case .sightOfContainer: try operatorContext.requireSight(of: ConsoleRoutes.container(context))
        case .changeOfContainer: try operatorContext.requireChange(container: ConsoleRoutes.container(context))
        case .everyContainer:
            if changing { try operatorContext.requireChange() }
            try operatorContext.requireEveryContainer()
        }
    }

    /// What an operator signed in with a one-time password may do before choosing its own:
    /// see who it is, sign out, and choose.
    static let allowedWithOneTimePassword: Set<String> = ["/admin/1/session", "/admin/1/session/end", "/admin/1/me/password"]

    /// The operator whose session the request's cookie names; one signed in with a one-time
    /// password may only change it.
    static func signedIn(_ request: Request, _ service: NimbusService) async throws -> NimbusService.OperatorContext {
        let operatorContext = try await service.operatorContext(token: AdminRoutes.cookie(request))
        if operatorContext.account.passwordExpiresAt != nil, !allowedWithOneTimePassword.contains(request.uri.path) {
            throw CloudKitError(
                .accessDenied,
                "operator '\(operatorContext.account.name)' signed in with a one-time password: choose a password of your own first (Operators → Change your password)")
        }
        return operatorContext
    }

    /// The signed-in operator of a change: the CSRF token must match the session's.
    private static func changing(_ request: Request, _ service: NimbusService) async throws -> NimbusService.OperatorContext {
        let operatorContext = try await signedIn(request, service)
        let sent = request.headers[csrfHeader] ?? ""
        guard Credentials.constantTimeEqual(Array(sent.utf8), Array(operatorContext.session.csrfToken.utf8)) else {
            throw CloudKitError(
                .accessDenied, "this change did not carry the session's CSRF token (\(ConsoleHeader.csrf)); reload the dashboard and try again")
        }
        return operatorContext
    }
}
