import HTTPTypes
import Hummingbird
import NimbusCore
import NimbusStorage
import NimbusWire

/// Who is calling: the API token names the container and environment (and must match the
/// path's), the web auth token names the user; or a server-to-server signature names a key
/// registered for the container and environment (docs/keys.md). Decided before any body is
/// read, except for a signed request, whose signature covers the body. Sits on the `/auth`,
/// `/device` and `/database` groups: `NimbusRouter` hands it to each group's routes, which run
/// it before their handler (a middleware layer per group cost a cached fetch several percent
/// under load, docs/benchmarks.md). Identity providers plug in here as a further way to reach
/// a `Caller`.
struct Authentication: Sendable {
    typealias Context = NimbusRequestContext

    enum Credentials {
        /// The API token alone (sign-in, sign-out: the session is the subject, not the caller).
        case apiToken
        /// The API token and, when sent, the session.
        case session
    }

    let service: NimbusService
    let credentials: Credentials
    /// How a signed request's body is read (before authentication: its signature covers it).
    let bodies: RequestBodies

    static let deviceIDHeader = HTTPField.Name("X-Nimbus-Device-ID")!
    static let keyIDHeader = HTTPField.Name("X-Apple-CloudKit-Request-KeyID")!
    static let dateHeader = HTTPField.Name("X-Apple-CloudKit-Request-ISO8601Date")!
    static let signatureHeader = HTTPField.Name("X-Apple-CloudKit-Request-SignatureV1")!

    /// Puts the caller (and the database the path names) in the request's exchange, or throws
    /// why not. A signed request's body is read here and put back, read, for the handler.
    func authenticate(_ request: inout Request, context: Context) async throws {
        let container = context.parameter("container") ?? ""
        let environment = try Self.environment(named: context.parameter("environment") ?? "")
        if let database = context.parameter("database") {
            guard let scope = DatabaseScope(rawValue: database) else {
                throw CloudKitError.badRequest("unknown database '\(Names.escaped(database))'; use public, private or shared")
            }
            context.exchange.scope = scope
        }
        let webAuthToken = credentials == .session ? request.query(WireKey.ckWebAuthToken).flatMap { $0.isEmpty ? nil : $0 } : nil
        let apiToken = request.query(WireKey.ckAPIToken)
        let caller: Caller
        do {
            let deviceID = try Self.deviceID(request.headers[Self.deviceIDHeader] ?? request.query(WireKey.ckDeviceID))
            if let signed = try await signedRequest(&request, context: context, apiToken: apiToken, webAuthToken: webAuthToken) {
                caller = try await service.authenticate(
                    container: container, environment: environment, signed: signed, deviceID: deviceID)
            } else {
                caller = try await service.authenticate(
                    container: container, environment: environment, apiToken: apiToken, webAuthToken: webAuthToken,
                    deviceID: deviceID)
            }
        } catch {
            context.exchange.update { $0.container = container }  // the access log names it for refusals too
            throw error
        }
        context.exchange.caller = caller
        context.exchange.update { facts in
            facts.container = container
            facts.environment = environment.rawValue
            facts.userRecordName = caller.user?.recordName
            facts.userName = caller.user?.name
            facts.webAuthToken = caller.user?.webAuthToken
        }
    }

    /// The server-to-server signature a request carries, with the body it signs (read now,
    /// and put back for the handler); nil for a request that carries none of its headers.
    func signedRequest(_ request: inout Request, context: Context, apiToken: String?, webAuthToken: String?) async throws
        -> SignedRequest?
    {
        let headers = request.headers
        let keyID = headers[Self.keyIDHeader]
        let date = headers[Self.dateHeader]
        let signature = headers[Self.signatureHeader]
        guard keyID != nil || date != nil || signature != nil else { return nil }
        guard apiToken == nil, webAuthToken == nil else {
            throw CloudKitError(
                .authenticationFailed,
                "a request carries either ckAPIToken (and ckWebAuthToken) or a server-to-server signature, not both; drop the tokens from a signed request")
        }
        guard let keyID, let date, let signature else {
            let missing = [(Self.keyIDHeader, keyID), (Self.dateHeader, date), (Self.signatureHeader, signature)]
                .filter { $0.1 == nil }.map { $0.0.rawName }
            throw CloudKitError(
                .authenticationFailed, "a signed request needs three headers; missing \(missing.joined(separator: ", "))")
        }
        // Not yet authenticated: the key ID it claims keys the caller's share of the budget.
        let body = try await bodies.collect(request, context: context, caller: "key:\(keyID)")
        request.body = RequestBody(buffer: body)
        return SignedRequest(
            keyID: keyID, date: date, signature: signature, body: Array(body.readableBytesView),
            target: request.head.path ?? "")
    }

    /// The environment a path names.
    static func environment(named name: String) throws(CloudKitError) -> NimbusStorage.Environment {
        guard let environment = NimbusStorage.Environment(rawValue: name) else {
            throw .badRequest("unknown environment '\(Names.escaped(name))'; use development or production")
        }
        return environment
    }

    /// The device a change is attributed to (`created.deviceID`): the `X-Nimbus-Device-ID`
    /// header or `ckDeviceID` query parameter, else "iCloud" as Apple's web services report.
    static func deviceID(_ given: String?) throws -> String {
        guard let given, !given.isEmpty else { return Names.anonymousDevice }
        guard given.utf8.count <= 64, given.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) else {
            throw CloudKitError.badRequest("the device ID must be 1 to 64 printable ASCII characters without spaces")
        }
        return given
    }
}
