import HTTPTypes
import Hummingbird
import NimbusCore
import NimbusStorage
import NimbusWire

/// Who is calling, decided before any body is read: the API token names the container and
/// environment (and must match the path's), the web auth token names the user. Sits on the
/// `/auth`, `/device` and `/database` groups: `NimbusRouter` hands it to each group's routes,
/// which run it before their handler (a middleware layer per group cost a cached fetch several
/// percent under load, docs/benchmarks.md). Server-to-server signatures and identity providers
/// plug in here as further ways to reach a `Caller`.
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

    static let deviceIDHeader = HTTPField.Name("X-Nimbus-Device-ID")!

    /// Puts the caller (and the database the path names) in the request's exchange, or throws
    /// why not.
    func authenticate(_ request: Request, context: Context) async throws {
        let parameters = context.parameters
        let container = parameters.get("container") ?? ""
        let environment = try Self.environment(named: parameters.get("environment") ?? "")
        if let database = parameters.get("database") {
            guard let scope = DatabaseScope(rawValue: database) else {
                throw CloudKitError.badRequest("unknown database '\(Names.escaped(database))'; use public, private or shared")
            }
            context.exchange.scope = scope
        }
        let query = request.uri.queryParameters  // parsed once for the three credentials
        let webAuthToken =
            credentials == .session
            ? query[Substring(WireKey.ckWebAuthToken)].map(String.init).flatMap { $0.isEmpty ? nil : $0 } : nil
        let caller: Caller
        do {
            caller = try await service.authenticate(
                container: container, environment: environment, apiToken: query[Substring(WireKey.ckAPIToken)].map(String.init),
                webAuthToken: webAuthToken,
                deviceID: try Self.deviceID(request.headers[Self.deviceIDHeader] ?? query[Substring(WireKey.ckDeviceID)].map(String.init)))
        } catch {
            context.exchange.update { $0.container = container }  // the access log names it for refusals too
            throw error
        }
        context.exchange.caller = caller
        context.exchange.update { facts in
            facts.container = container
            facts.userRecordName = caller.user?.recordName
            facts.webAuthToken = caller.user?.webAuthToken
        }
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
