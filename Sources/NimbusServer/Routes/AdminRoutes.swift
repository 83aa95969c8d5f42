import HTTPTypes
import Hummingbird
import NimbusCore
import NimbusStorage
import NimbusWire

/// The admin API behind the dashboard (docs/dashboard.md), under `/admin/1/`: operator sign-in
/// to a session cookie (HttpOnly, SameSite=Strict), who is signed in, operators, the audit log.
/// Reads are GETs; every change is a POST that must echo the session's CSRF token; the route
/// table (`OperatorRoutes`) authenticates each before its handler runs.
enum AdminRoutes {
    static let cookieName = "nimbus_operator"

    static func add(to router: MethodRecordingRouter, parts: ServerParts) {
        let service = parts.service
        let admin = router.group("admin/1")
        let routes = OperatorRoutes(unauthenticated: admin, service: service)

        admin.post("session") { request, context in
            let signIn = try OperatorSignIn(json: try await RouteInput(request: request, context: context, parts: parts).body())
            let (token, signedIn) = try await service.signInOperator(
                name: signIn.name, password: signIn.password, code: signIn.code, clientAddress: context.clientAddress)
            return session(token, signedIn, request, context)
        }
        // The first run (docs/dashboard.md): whether a setup link is open, and the link's form,
        // which makes the first operator and signs them in. From this machine only unless the
        // server was started with --setup-from-anywhere.
        admin.get("setup") { request, context in
            Reply.json(["open": .bool(try await service.firstRunSetupIsOpen())], context: context)
        }
        admin.post("setup") { request, context in
            guard parts.setupFromAnywhere || isLoopback(context.clientAddress) else {
                throw CloudKitError(
                    .accessDenied,
                    "the setup link works only from the server's own machine; open it there, start nimbus serve with --setup-from-anywhere, or run nimbus operators create NAME")
            }
            let body = try await RouteInput(request: request, context: context, parts: parts).body()
            let (token, signedIn) = try await service.setUpFirstOperator(
                token: try body.requiredString("token"), name: try body.requiredString("name"), password: try body.requiredString("password"),
                clientAddress: context.clientAddress)
            return session(token, signedIn, request, context)
        }
        routes.get("session") { request, context, operatorContext in
            Reply.json(describe(operatorContext), context: context)
        }
        routes.post("session/end") { request, context, operatorContext in
            try await service.signOutOperator(token: cookie(request) ?? "")
            var response = Reply.json(["signedOut": .string(operatorContext.account.name)], context: context)
            response.headers[.setCookie] = "\(cookieName)=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"
            return response
        }

        // The signed-in operator's own credentials: its password and its optional second factor.
        routes.post("me/password") { request, context, operatorContext in
            let body = try await RouteInput(request: request, context: context, parts: parts).body()
            try await service.changeOperatorPassword(
                current: try body.requiredString("currentPassword"), new: try body.requiredString("newPassword"), as: operatorContext)
            return Reply.json(["passwordChanged": .bool(true)], context: context)
        }
        routes.post("me/second-factor") { request, context, operatorContext in
            let (secret, uri) = try await service.beginSecondFactor(as: operatorContext)
            return Reply.json(["secret": .string(secret), "uri": .string(uri)], context: context)
        }
        routes.post("me/second-factor/confirm") { request, context, operatorContext in
            let body = try await RouteInput(request: request, context: context, parts: parts).body()
            try await service.confirmSecondFactor(code: try body.requiredString("code"), as: operatorContext)
            return Reply.json(["secondFactor": .bool(true)], context: context)
        }
        routes.post("me/second-factor/remove") { request, context, operatorContext in
            let body = try await RouteInput(request: request, context: context, parts: parts).body()
            try await service.removeSecondFactor(code: try body.requiredString("code"), as: operatorContext)
            return Reply.json(["secondFactor": .bool(false)], context: context)
        }

        routes.get("operators") { request, context, operatorContext in
            let list: [JSON] = try await service.operators().map { account($0).json }
            return Reply.json(["operators": .array(list)], context: context)
        }
        // Operators are made, changed and removed by an administrator of every container only.
        routes.post("operators", needs: .everyContainer) { request, context, operatorContext in
            let body = try await RouteInput(request: request, context: context, parts: parts).body()
            let role = try operatorRole(try body.string("role") ?? OperatorRole.administrator.rawValue)
            let (row, password) = try await service.createOperator(
                name: try body.requiredString("name"), role: role, containers: try body.stringArray("containers"),
                by: operatorContext.account.name)
            var answer = account(row).fields
            answer[ConsoleKey.password] = .string(password)
            return Reply.json(.object(answer), context: context)
        }
        routes.post("operators/:name", needs: .everyContainer) { request, context, actor in
            let body = try await RouteInput(request: request, context: context, parts: parts).body()
            let role = try body.string("role").map(operatorRole)
            let containers: [String]?? = try body.bool("everyContainer") == true ? .some(nil) : try body.stringArray("containers").map { .some($0) }
            let row = try await service.updateOperator(
                name: context.parameters.get("name") ?? "", role: role, containers: containers, disabled: try body.bool("disabled"),
                by: actor.account.name)
            return Reply.json(account(row).json, context: context)
        }
        routes.post("operators/:name/password", needs: .everyContainer) { request, context, actor in
            let name = context.parameters.get("name") ?? ""
            let password = try await service.resetOperatorPassword(name: name, by: actor.account.name)
            return Reply.json([ConsoleKey.name: .string(name), ConsoleKey.password: .string(password)], context: context)
        }
        routes.post("operators/:name/delete", needs: .everyContainer) { request, context, actor in
            let name = context.parameters.get("name") ?? ""
            try await service.deleteOperator(name: name, by: actor.account.name)
            return Reply.json(["deleted": .string(name)], context: context)
        }

        addContainerRoutes(to: routes, parts: parts)
        ConsoleRoutes.add(to: routes, parts: parts)  // schema, data, people, the request log
        BackupRoutes.add(to: routes, parts: parts)
        TimeTravelRoutes.add(to: routes, parts: parts)

        routes.get("audit") { request, context, operatorContext in
            let limit = request.query("limit").flatMap(Int.init) ?? 50
            let before = request.query("before").flatMap(Int64.init)
            let entries = try await service.auditLog(for: operatorContext, limit: limit, beforeID: before).map { entry -> JSON in
                var object: JSONObject = [
                    "id": .int(entry.id), "at": .int(entry.at), "operator": .string(entry.operatorName),
                    WireKey.action: .string(entry.action), "detail": .string(entry.detail),
                ]
                if let container = entry.container { object["container"] = .string(container) }
                return .object(object)
            }
            return Reply.json(["entries": .array(entries)], context: context)
        }
    }

    /// Containers, their API tokens and server-to-server keys.
    static func addContainerRoutes(to routes: OperatorRoutes, parts: ServerParts) {
        let service = parts.service
        @Sendable func body(_ request: Request, _ context: NimbusRequestContext) async throws -> ObjectReader {
            try await RouteInput(request: request, context: context, parts: parts).body()
        }
        @Sendable func container(_ context: NimbusRequestContext) -> String { ConsoleRoutes.container(context) }
        @Sendable func environment(_ name: String?) throws -> NimbusStorage.Environment? {
            try name.map(ConsoleRoutes.environment(named:))
        }

        routes.get("containers") { request, context, operatorContext in
            let list = try await service.containers(visibleTo: operatorContext)
            let rows: [JSON] = list.map { .object(["id": .string($0.id), "createdAt": .int($0.createdAt)]) }
            return Reply.json(["containers": .array(rows)], context: context)
        }
        routes.post("containers") { request, context, operatorContext in
            let id = try await body(request, context).requiredString("id")
            try await service.createContainer(id, as: operatorContext)
            return Reply.json(["id": .string(id)], context: context)
        }
        routes.post("containers/:container/tokens") { request, context, operatorContext in
            let input = try await body(request, context)
            let token = try await service.createAPIToken(
                container: container(context), environment: try environment(try input.requiredString("environment")) ?? .development,
                allowedOrigins: try input.stringArray("allowedOrigins") ?? ["*"], signInCallback: try input.string("signInCallback"),
                name: try input.string("name"), as: operatorContext)
            return Reply.json(["apiToken": .string(token)], context: context)
        }
        routes.get("containers/:container/tokens") { request, context, operatorContext in
            let tokens = try await service.apiTokens(container: container(context), as: operatorContext)
            let rows: [JSON] = tokens.map { token in
                var row: JSONObject = [
                    "id": .string(token.id), "environment": .string(token.environment.rawValue), "createdAt": .int(token.createdAt),
                    "revoked": .bool(token.isRevoked), "allowedOrigins": .array(token.allowedOrigins.map(JSON.string)),
                ]
                if let name = token.name { row["name"] = .string(name) }
                if let used = token.lastUsedAt { row["lastUsedAt"] = .int(used) }
                if let callback = token.signInCallback { row["signInCallback"] = .string(callback) }
                return .object(row)
            }
            return Reply.json(["tokens": .array(rows)], context: context)
        }
        routes.post("containers/:container/tokens/:token/revoke") { request, context, operatorContext in
            let token = try await service.revokeAPIToken(
                container: container(context), id: context.parameters.get("token") ?? "", as: operatorContext)
            return Reply.json(["revoked": .string(token.id)], context: context)
        }
        routes.post("containers/:container/tokens/revoke") { request, context, operatorContext in
            let input = try await body(request, context)
            let count = try await service.revokeAPITokens(
                container: container(context), environment: try environment(try input.string("environment")), as: operatorContext)
            return Reply.json(["revoked": .int(Int64(count))], context: context)
        }
        /// A container's settings as the page reads them (and a change answers them).
        @Sendable func settings(_ container: String, as operatorContext: NimbusService.OperatorContext) async throws -> JSON {
            let (settings, limits) = try await service.containerSettings(container: container, as: operatorContext)
            let rows: [JSON] = ContainerLimit.allCases.map { limit in
                [
                    "name": .string(limit.rawValue), "value": .int(limits[limit]), "quota": .bool(limit.isQuota),
                    "set": .bool(limits.overrides[limit.rawValue] != nil), "minimum": .int(limit.minimum),
                ]
            }
            let (apns, providers) = try await service.pushAndSignIn(container: container, as: operatorContext)
            var answer: JSONObject = [
                "signUp": .bool(settings.signUp), "userDiscovery": .bool(settings.userDiscovery), "limits": .array(rows),
                "identityProviders": .array(
                    providers.map {
                        [
                            "issuer": .string($0.issuer), "audience": .string($0.audience), "jwks": .string($0.jwksSource),
                            "createdAt": .int($0.createdAt),
                        ]
                    }),
            ]
            // The key itself never leaves the server: what identifies it is enough to check it.
            if let apns {
                answer["apns"] = [
                    "teamID": .string(apns.teamID), "keyID": .string(apns.keyID), "topic": .string(apns.topic), "updatedAt": .int(apns.updatedAt),
                ]
            }
            return .object(answer)
        }
        routes.get("containers/:container/settings") { request, context, operatorContext in
            Reply.json(try await settings(container(context), as: operatorContext), context: context)
        }
        routes.post("containers/:container/settings") { request, context, operatorContext in
            let input = try await body(request, context)
            var limits: [String: Int64?] = [:]
            if let given = try input.object("limits") {
                for (name, value) in given.object.pairs {
                    switch value {
                    case .null: limits[name] = .some(nil)
                    case .int(let number): limits[name] = number
                    default: throw CloudKitError.badRequest("limits.\(Names.escaped(name)): a whole number, or null for the server's default")
                    }
                }
            }
            try await service.changeContainerSettings(
                container: container(context), signUp: try input.bool("signUp"), userDiscovery: try input.bool("userDiscovery"), limits: limits,
                as: operatorContext)
            return Reply.json(try await settings(container(context), as: operatorContext), context: context)
        }
        routes.post("containers/:container/apns") { request, context, operatorContext in
            let input = try await body(request, context)
            try await service.setAPNsCredentials(
                container: container(context), teamID: try input.requiredString("teamID"), keyID: try input.requiredString("keyID"),
                topic: try input.requiredString("topic"), privateKeyPEM: try input.requiredString("privateKeyPEM"), as: operatorContext)
            return Reply.json(try await settings(container(context), as: operatorContext), context: context)
        }
        routes.post("containers/:container/apns/remove") { request, context, operatorContext in
            try await service.removeAPNsCredentials(container: container(context), as: operatorContext)
            return Reply.json(try await settings(container(context), as: operatorContext), context: context)
        }
        routes.post("containers/:container/providers") { request, context, operatorContext in
            let input = try await body(request, context)
            try await service.addIdentityProvider(
                container: container(context), issuer: try input.requiredString("issuer"), audience: try input.requiredString("audience"),
                jwks: try input.requiredString("jwks"), as: operatorContext)
            return Reply.json(try await settings(container(context), as: operatorContext), context: context)
        }
        routes.post("containers/:container/providers/remove") { request, context, operatorContext in
            let input = try await body(request, context)
            try await service.removeIdentityProvider(
                container: container(context), issuer: try input.requiredString("issuer"), as: operatorContext)
            return Reply.json(try await settings(container(context), as: operatorContext), context: context)
        }
        routes.get("containers/:container/keys") { request, context, operatorContext in
            let keys = try await service.serverKeys(container: container(context), as: operatorContext)
            let rows: [JSON] = keys.map {
                .object([
                    "keyID": .string($0.keyID), "environment": .string($0.environment.rawValue), "createdAt": .int($0.createdAt),
                    "revoked": .bool($0.isRevoked),
                ])
            }
            return Reply.json(["keys": .array(rows)], context: context)
        }
        routes.post("containers/:container/keys") { request, context, operatorContext in
            let input = try await body(request, context)
            let row = try await service.addServerKey(
                container: container(context), environment: try environment(try input.requiredString("environment")) ?? .development,
                publicKeyPEM: try input.requiredString("publicKeyPEM"), as: operatorContext)
            return Reply.json(["keyID": .string(row.keyID)], context: context)
        }
        routes.post("containers/:container/keys/:key/revoke") { request, context, operatorContext in
            let key = context.parameters.get("key") ?? ""
            try await service.revokeServerKey(id: key, container: container(context), as: operatorContext)
            return Reply.json(["revoked": .string(key)], context: context)
        }
    }

    /// A role named in a request body, or BAD_REQUEST naming the roles there are.
    static func operatorRole(_ name: String) throws(CloudKitError) -> OperatorRole {
        guard let role = OperatorRole(rawValue: name) else {
            throw .badRequest("role: '\(Names.escaped(name))' is not a role; use \(OperatorRole.allCases.map(\.rawValue).joined(separator: " or "))")
        }
        return role
    }

    static func cookie(_ request: Request) -> String? {
        for header in request.headers[values: .cookie] {
            for pair in header.split(separator: ";") {
                let parts = pair.split(separator: "=", maxSplits: 1)
                if parts.count == 2, parts[0].trimmingCharacters(in: .whitespaces) == cookieName {
                    return String(parts[1]).trimmingCharacters(in: .whitespaces)
                }
            }
        }
        return nil
    }

    /// A signed-in answer: who, the CSRF token, and the session cookie.
    static func session(_ token: String, _ signedIn: NimbusService.OperatorContext, _ request: Request, _ context: NimbusRequestContext)
        -> Response
    {
        var response = Reply.json(describe(signedIn), context: context)
        response.headers[.setCookie] =
            "\(cookieName)=\(token); Path=/; HttpOnly; SameSite=Strict; Max-Age=\(NimbusService.operatorSessionLifetimeMilliseconds / 1000)"
            + (isHTTPS(request, context) ? "; Secure" : "")
        return response
    }

    /// Whether a client address is this machine's own (127.0.0.0/8, ::1, an IPv4-mapped one).
    static func isLoopback(_ address: String?) -> Bool {
        guard var address else { return false }
        if address.hasPrefix("::ffff:") { address.removeFirst("::ffff:".count) }
        return address == "::1" || address.hasPrefix("127.")
    }

    static func isHTTPS(_ request: Request, _ context: NimbusRequestContext) -> Bool {
        context.exchange.baseURL(for: request).hasPrefix("https:")
    }

    static func describe(_ signedIn: NimbusService.OperatorContext) -> JSON {
        OperatorSession(account: account(signedIn.account), csrfToken: signedIn.session.csrfToken).json
    }

    static func account(_ row: OperatorRow) -> OperatorAccount {
        OperatorAccount(
            name: row.name, role: row.role.rawValue, createdAt: row.createdAt, secondFactor: row.secondFactor != nil,
            disabled: row.disabled, containers: row.containers, oneTimePasswordExpiresAt: row.passwordExpiresAt)
    }
}
