import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import NIOCore
import Logging
import NimbusCore
import NimbusStorage
import NimbusWire

/// The HTTP API: routes every CloudKit Web Services path to the service and turns every
/// failure into CloudKit's error JSON.
///
/// Routes (module / version / container / environment / [database] / entity / action):
///
/// | path | handler |
/// |---|---|
/// | `/database/1/{c}/{env}/{db}/records/modify` | `modifyRecords` |
/// | `/database/1/{c}/{env}/{db}/records/lookup` | `lookupRecords` |
/// | `/database/1/{c}/{env}/{db}/records/query` | `queryRecords` |
/// | `/database/1/{c}/{env}/{db}/records/changes` | `recordChanges` (deprecated) |
/// | `/database/1/{c}/{env}/{db}/zones/list` | `listZones` |
/// | `/database/1/{c}/{env}/{db}/zones/lookup` | `lookupZones` |
/// | `/database/1/{c}/{env}/{db}/zones/modify` | `modifyZones` |
/// | `/database/1/{c}/{env}/{db}/zones/changes` | `databaseChanges` (deprecated) |
/// | `/database/1/{c}/{env}/{db}/changes/database` | `databaseChanges` |
/// | `/database/1/{c}/{env}/{db}/changes/zone` | `zoneChanges` |
/// | `/database/1/{c}/{env}/{db}/subscriptions/list`, `lookup`, `modify` | subscriptions |
/// | `/database/1/{c}/{env}/{db}/users/caller`, `users/current` | the signed-in user |
/// | `/device/1/{c}/{env}/tokens/…`, `notifications/…`, `badge/modify` | `deviceEndpoint` |
/// | `/auth/1/{c}/{env}/signin`, `signout` | sessions |
/// | `/webcourier/aps?tok=…` | `webCourierPoll` (CloudKit JS's long poll) |
/// | `/health` | liveness |
///
/// GET and POST are accepted on every endpoint, and bodies are JSON whatever their
/// Content-Type (reference §17). The remaining CloudKit endpoints answer with a clear "not
/// available yet" until their features land.
public struct NimbusResponder: HTTPResponder {
    public typealias Context = BasicRequestContext

    let service: NimbusService
    let logger: Logger
    let courier: WebCourier

    init(service: NimbusService, logger: Logger, courier: WebCourier) {
        self.service = service
        self.logger = logger
        self.courier = courier
    }

    /// Endpoints of the protocol that later Nimbus features serve.
    static let reservedEndpoints: Set<String> = [
        "records/resolve", "records/accept", "assets/upload", "assets/rereference", "users/discover",
        "users/lookup/email", "users/lookup/id", "users/lookup/contacts",
    ]

    public func respond(to request: Request, context: Context) async throws -> Response {
        if request.method == .options { return corsPreflight() }
        var webAuthToken: String?
        do {
            return try await route(request, webAuthToken: &webAuthToken)
        } catch let error as CloudKitError {
            return errorResponse(error, webAuthToken: webAuthToken)
        } catch {
            let uuid = UUIDText.random()
            logger.error("request failed", metadata: ["uuid": "\(uuid)", "path": "\(request.uri.path)", "error": "\(error)"])
            return errorResponse(
                CloudKitError(.internalError, "the server failed to handle this request; quote \(uuid) when reporting it"),
                webAuthToken: webAuthToken, uuid: uuid)
        }
    }

    // MARK: Routing

    private func route(_ request: Request, webAuthToken: inout String?) async throws -> Response {
        guard request.method == .get || request.method == .post else {
            throw CloudKitError.badRequest("method \(request.method.rawValue) is not supported; use GET or POST")
        }
        let parts = request.uri.path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        guard let module = parts.first else { throw unknownEndpoint(request) }
        switch module {
        case "health" where parts.count == 1:
            return jsonResponse(["status": "ok"], webAuthToken: nil)
        case "webcourier" where parts == ["webcourier", "aps"]:
            return try await webCourierPoll(request)
        case "database", "device", "auth":
            guard parts.count >= 4 else { throw unknownEndpoint(request) }
            guard parts[1] == "1" else {
                throw CloudKitError(.notFound, "API version '\(Names.escaped(parts[1]))' is not served; use version 1")
            }
        default:
            throw unknownEndpoint(request)
        }
        let container = parts[2]
        guard let environment = NimbusStorage.Environment(rawValue: parts[3]) else {
            throw CloudKitError.badRequest(
                "unknown environment '\(Names.escaped(parts[3]))'; use development or production")
        }
        let query = request.uri.queryParameters
        let apiToken = query["ckAPIToken"].map(String.init)
        let body = try await readBody(request)

        if module == "auth" {
            return try await authEndpoint(
                parts.dropFirst(4).joined(separator: "/"), container: container, environment: environment,
                apiToken: apiToken, body: body, webAuthToken: &webAuthToken, query: query)
        }
        // Device endpoints; tokens/ also under /database/1/{c}/{env}/ and …/{db}/ (reference §1.3).
        let deviceAction: String? =
            if module == "device" || parts[4] == "tokens" { parts.dropFirst(4).joined(separator: "/") }
            else if parts.count >= 7, parts[5] == "tokens" { parts.dropFirst(5).joined(separator: "/") }
            else { nil }
        if let deviceAction {
            webAuthToken = query["ckWebAuthToken"].map(String.init).flatMap { $0.isEmpty ? nil : $0 }
            let caller = try await service.authenticate(
                container: container, environment: environment, apiToken: apiToken, webAuthToken: webAuthToken,
                deviceID: try deviceID(request))
            let result = try await deviceEndpoint(deviceAction, caller: caller, body: body, request: request)
            return jsonResponse(result, webAuthToken: caller.user?.webAuthToken)
        }
        guard parts.count >= 6 else { throw unknownEndpoint(request) }
        guard let scope = DatabaseScope(rawValue: parts[4]) else {
            throw CloudKitError.badRequest("unknown database '\(Names.escaped(parts[4]))'; use public, private or shared")
        }
        let endpoint = parts.dropFirst(5).joined(separator: "/")
        webAuthToken = query["ckWebAuthToken"].map(String.init).flatMap { $0.isEmpty ? nil : $0 }
        let caller = try await service.authenticate(
            container: container, environment: environment, apiToken: apiToken, webAuthToken: webAuthToken,
            deviceID: try deviceID(request))
        let target = DatabaseTarget(caller: caller, scope: scope)
        let result = try await databaseEndpoint(endpoint, target: target, body: body, request: request)
        return jsonResponse(result, webAuthToken: caller.user?.webAuthToken)
    }

    private func databaseEndpoint(_ endpoint: String, target: DatabaseTarget, body: ObjectReader, request: Request)
        async throws -> JSON
    {
        switch endpoint {
        case "records/modify": return try await service.modifyRecords(target, RecordsModifyRequest(json: body))
        case "records/lookup": return try await service.lookupRecords(target, RecordsLookupRequest(json: body))
        case "records/query": return try await service.queryRecords(target, RecordsQueryRequest(json: body))
        case "records/changes": return try await service.recordChanges(target, ZoneChangesRequest(singleZone: body))
        case "zones/list": return try await service.listZones(target)
        case "zones/lookup": return try await service.lookupZones(target, ZonesLookupRequest(json: body))
        case "zones/modify": return try await service.modifyZones(target, ZonesModifyRequest(json: body))
        case "zones/changes":
            var changes = try await service.databaseChanges(target, DatabaseChangesRequest(json: body), allowPublic: true)
            if case .object(var object) = changes {
                object["metaSyncToken"] = object["syncToken"]
                changes = .object(object)
            }
            return changes
        case "changes/database": return try await service.databaseChanges(target, DatabaseChangesRequest(json: body))
        case "changes/zone": return try await service.zoneChanges(target, ZoneChangesRequest(json: body))
        case "subscriptions/list": return try await service.listSubscriptions(target)
        case "subscriptions/lookup": return try await service.lookupSubscriptions(target, SubscriptionsLookupRequest(json: body))
        case "subscriptions/modify": return try await service.modifySubscriptions(target, SubscriptionsModifyRequest(json: body))
        case "users/caller": return try callerIdentity(target.caller)
        case "users/current": return try currentUser(target.caller)
        default:
            if Self.reservedEndpoints.contains(endpoint) {
                throw CloudKitError(.notFound, "\(endpoint) is not available in this Nimbus version yet")
            }
            throw unknownEndpoint(request)
        }
    }

    /// `/device/1/{c}/{env}/…`: push registration and the notification collection, for the
    /// signed-in user (container-wide, not per database).
    private func deviceEndpoint(_ action: String, caller: Caller, body: ObjectReader, request: Request) async throws -> JSON {
        switch action {
        case "tokens/create": return try await service.createWebCourierToken(caller, body: body, baseURL: baseURL(request))
        case "tokens/register": return try await service.registerPushToken(caller, body: body)
        case "notifications/changes": return try await service.notificationChangesJSON(caller, body: body)
        case "notifications/markRead": return try await service.markNotificationsRead(caller, body: body)
        case "badge/modify": return try await service.modifyBadge(caller, body: body)
        case NotificationSocket.path:
            _ = try caller.requireUser(for: "The notification stream")
            if let token = request.uri.queryParameters["syncToken"].map(String.init) {
                _ = try await service.notificationChanges(caller, token: token, limit: 1)
            }
            throw CloudKitError.badRequest("\(NotificationSocket.path) is a WebSocket: connect with an Upgrade: websocket request")
        default:
            throw CloudKitError(
                .notFound,
                "no device endpoint '\(Names.escaped(action))'; use tokens/create, tokens/register, notifications/changes, notifications/markRead, notifications/connect or badge/modify")
        }
    }

    /// `GET /webcourier/aps?tok=…&ttl=…`: one push payload as JSON, or 204 after the poll
    /// timeout with nothing to send. The token is the credential, as the URL `tokens/create`
    /// hands out is all a client has.
    private func webCourierPoll(_ request: Request) async throws -> Response {
        guard let token = request.uri.queryParameters["tok"].map(String.init), !token.isEmpty else {
            throw CloudKitError.badRequest("missing tok: poll the webcourierURL that tokens/create returned")
        }
        let row = try await service.webCourierToken(token)
        guard let payload = await courier.poll(token: row) else {
            return Response(status: .noContent, headers: [.accessControlAllowOrigin: "*"])
        }
        var headers = baseHeaders(webAuthToken: nil)
        headers[.contentLength] = String(payload.count)
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: payload)))
    }

    /// This server's address as the client reached it, for URLs handed back (`webcourierURL`).
    private func baseURL(_ request: Request) -> String {
        "http://\(request.head.authority ?? "127.0.0.1")"
    }

    private func unknownEndpoint(_ request: Request) -> CloudKitError {
        CloudKitError(
            .notFound,
            "no endpoint at \(Names.escaped(request.uri.path)); paths look like /database/1/{container}/{environment}/{database}/records/modify")
    }

    // MARK: Users and sessions

    private func authEndpoint(
        _ action: String, container: String, environment: NimbusStorage.Environment, apiToken: String?, body: ObjectReader,
        webAuthToken: inout String?, query: FlatDictionary<Substring, Substring>
    ) async throws -> Response {
        switch action {
        case "signin":
            let (token, userRecordName) = try await service.signIn(
                container: container, environment: environment, apiToken: apiToken,
                userName: try body.requiredString("username"), password: try body.requiredString("password"))
            webAuthToken = token
            return jsonResponse(["ckWebAuthToken": .string(token), "userRecordName": .string(userRecordName)], webAuthToken: token)
        case "signout":
            guard let token = query["ckWebAuthToken"].map(String.init), !token.isEmpty else {
                throw CloudKitError.badRequest("missing ckWebAuthToken: name the session to sign out")
            }
            _ = try await service.authenticate(
                container: container, environment: environment, apiToken: apiToken, webAuthToken: nil, deviceID: "")
            try await service.signOut(webAuthToken: token)
            return jsonResponse([:], webAuthToken: nil)
        default:
            throw CloudKitError(.notFound, "no auth endpoint '\(Names.escaped(action))'; use signin or signout")
        }
    }

    /// `users/caller`: the identity at the top level and in a `users` array, since clients
    /// read either (reference §10).
    private func callerIdentity(_ caller: Caller) throws -> JSON {
        let user = try caller.requireUser(for: "users/caller")
        let identity: JSONObject = [
            "userRecordName": .string(user.recordName),
            "lookupInfo": .object(["userRecordName": .string(user.recordName)]),
            "nameComponents": .object(["nickname": .string(user.name)]),
        ]
        var object = identity
        object["users"] = .array([.object(identity)])
        return .object(object)
    }

    private func currentUser(_ caller: Caller) throws -> JSON {
        let user = try caller.requireUser(for: "users/current")
        return ["userRecordName": .string(user.recordName), "firstName": .string(user.name)]
    }

    // MARK: Requests and responses

    /// The body as a JSON object; an empty body reads as `{}` (GET endpoints, lenient clients).
    private func readBody(_ request: Request) async throws -> ObjectReader {
        let limit = Limits.requestBodyBytes
        let buffer: ByteBuffer
        do {
            buffer = try await request.body.collect(upTo: limit.value)
        } catch is NIOTooManyBytesError {
            throw CloudKitError.limitExceeded(limit, actual: limit.value + 1, what: "the request body in bytes (at least)")
        }
        if buffer.readableBytes == 0 { return ObjectReader(JSONObject(), path: "") }
        let json: JSON
        do {
            json = try buffer.withUnsafeReadableBytes { try JSON.parse($0) }
        } catch let error as JSONSyntaxError {
            throw CloudKitError.badRequest("the request body is not valid JSON: \(error)")
        }
        return try ObjectReader(root: json)
    }

    /// The device a change is attributed to (`created.deviceID`): the `X-Nimbus-Device-ID`
    /// header or `ckDeviceID` query parameter, else "iCloud" as Apple's web services report.
    private func deviceID(_ request: Request) throws -> String {
        let name = HTTPField.Name("X-Nimbus-Device-ID")!
        let given = request.headers[name] ?? request.uri.queryParameters["ckDeviceID"].map(String.init)
        guard let given, !given.isEmpty else { return Names.anonymousDevice }
        guard given.utf8.count <= 64, given.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) else {
            throw CloudKitError.badRequest("the device ID must be 1 to 64 printable ASCII characters without spaces")
        }
        return given
    }

    static let webAuthTokenHeader = HTTPField.Name("X-Apple-CloudKit-Web-Auth-Token")!
    static let requestUUIDHeader = HTTPField.Name("X-Apple-Request-UUID")!

    private func baseHeaders(webAuthToken: String?) -> HTTPFields {
        var headers: HTTPFields = [
            .contentType: "application/json; charset=utf-8",
            .accessControlAllowOrigin: "*",
            .accessControlExposeHeaders: "X-Apple-CloudKit-Web-Auth-Token, X-Apple-Request-UUID",
        ]
        if let webAuthToken { headers[Self.webAuthTokenHeader] = webAuthToken }
        return headers
    }

    func jsonResponse(_ json: JSON, status: HTTPResponse.Status = .ok, webAuthToken: String?, uuid: String? = nil) -> Response {
        var headers = baseHeaders(webAuthToken: webAuthToken)
        if let uuid { headers[Self.requestUUIDHeader] = uuid }
        let bytes = json.serialized()
        var buffer = ByteBufferAllocator().buffer(capacity: bytes.count)
        buffer.writeBytes(bytes)
        headers[.contentLength] = String(bytes.count)
        return Response(status: status, headers: headers, body: .init(byteBuffer: buffer))
    }

    func errorResponse(_ error: CloudKitError, webAuthToken: String?, uuid: String = UUIDText.random()) -> Response {
        var error = error
        if error.code == .authenticationRequired, error.redirectURL == nil {
            error.redirectURL = "/auth/1/signin"
        }
        // After an authentication failure the token is not echoed: it is not a valid session.
        let echo = error.code == .authenticationRequired || error.code == .authenticationFailed ? nil : webAuthToken
        return jsonResponse(
            error.json(uuid: uuid), status: HTTPResponse.Status(code: error.code.httpStatus), webAuthToken: echo, uuid: uuid)
    }

    private func corsPreflight() -> Response {
        Response(
            status: .noContent,
            headers: [
                .accessControlAllowOrigin: "*",
                .accessControlAllowMethods: "GET, POST, OPTIONS",
                .accessControlAllowHeaders: "Content-Type, X-Nimbus-Device-ID",
                .accessControlMaxAge: "86400",
            ])
    }
}
