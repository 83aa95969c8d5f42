import HTTPTypes
import Hummingbird
import Logging
import NimbusStorage
import NimbusWire

/// Every thrown error becomes CloudKit's error JSON with the request UUID. A `CloudKitError`
/// is answered as it is; the router's "no such route" becomes 404, or 405 naming the methods
/// the path does take in `Allow` (`EndpointMethods`); a storage failure that may pass (`StorageError.retryAfterSeconds`) is
/// `TRY_AGAIN_LATER` with `retryAfter`; anything else is `INTERNAL_ERROR`, its cause logged under the same UUID
/// and never sent to the client. Applied by `EdgeMiddleware` around everything inside it.
struct ErrorMapping: Sendable {
    typealias Context = NimbusRequestContext
    let logger: Logger
    /// What each registered path takes, for 405's `Allow`.
    let methods: EndpointMethods

    func answer(_ error: any Error, to request: Request, context: Context) -> Response {
        switch error {
        case var error as CloudKitError:
            if error.code == .authenticationRequired, error.redirectURL == nil {
                error.redirectURL = Self.signInURL(request, context: context)
            }
            return Reply.error(error, context: context)
        case let error as BodyOverLimit:
            // An upload streaming its body when the edge saw its chunk sizes pass the bound.
            return Reply.error(error.cloudKitError, context: context)
        case let error as HTTPError where error.status == .notFound && context.endpointPath == "NotFound":
            return noRoute(request, context: context)
        case let error as StorageError where error.retryAfterSeconds != nil:
            // Nothing was written (a failed transaction leaves no trace); the client may retry.
            let uuid = context.exchange.current.requestUUID
            logger.warning(
                "storage could not serve a request", metadata: ["uuid": "\(uuid)", "path": "\(request.uri.path)", "error": "\(error)"])
            var answer = CloudKitError(
                .tryAgainLater, "the server's storage is busy or unavailable for the moment; nothing was written, try again after retryAfter seconds")
            answer.retryAfter = error.retryAfterSeconds
            return Reply.error(answer, context: context)
        default:
            let uuid = context.exchange.current.requestUUID
            logger.error(
                "request failed", metadata: ["uuid": "\(uuid)", "path": "\(request.uri.path)", "error": "\(error)"])
            return Reply.error(
                CloudKitError(.internalError, "the server failed to handle this request; quote \(uuid) when reporting it"),
                context: context)
        }
    }

    /// The sign-in page for the container and environment the request's path names.
    static func signInURL(_ request: Request, context: Context) -> String? {
        let parts = request.uri.path.split(separator: "/").map(String.init)
        guard parts.count >= 4, ["database", "device", "auth"].contains(parts[0]) else { return nil }
        return AuthRoutes.signInURL(
            baseURL: context.exchange.baseURL(for: request), container: parts[2], environment: parts[3],
            apiToken: request.query(WireKey.ckAPIToken))
    }

    func noRoute(_ request: Request, context: Context) -> Response {
        let allowed = methods.allowed(at: request.uri.path)
        guard allowed.isEmpty || allowed.contains(request.method) else {
            // HEAD goes with GET (the router answers it from the GET handler); the reason names
            // what a client would pick.
            let named = allowed.filter { $0 != .head }.map(\.rawValue).joined(separator: " or ")
            let reason = allowed.contains(.get) ? "takes \(named)" : "changes data and takes \(named) only (a GET never changes anything)"
            var response = Reply.error(
                .badRequest("\(Names.escaped(request.uri.path)) \(reason), not \(request.method.rawValue)"),
                context: context, status: .methodNotAllowed)
            response.headers[.allow] = allowed.map(\.rawValue).joined(separator: ", ")
            return response
        }
        let hint =
            request.uri.path.hasPrefix("/admin/")
            ? "the admin API's paths are listed in docs/dashboard.md, e.g. /admin/1/containers or /admin/1/requests"
            : "paths look like /database/1/{container}/{environment}/{database}/records/modify"
        return Reply.error(CloudKitError(.notFound, "no endpoint at \(Names.escaped(request.uri.path)); \(hint)"), context: context)
    }
}
